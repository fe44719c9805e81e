"""Standalone lab programs graded end to end (grader/programs): built unchanged, run under the process runner,
the kernel's arguments captured at launch and checked on the host. Slow: real emulator builds."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
from bang_emu import safe_tar
from bang_harness.programs import emulator_errors

from grader.i18n import use_language
from grader.orchestration.options import GradeEnvironment, GradeRequest
from grader.orchestration.programs import Ran, grade_programs, program_ending, run_limits
from grader.programs.captures import Launches
from grader.programs.spec import load_programs
from grader.results import CaseResult, GradeResult, GroupScore, StageResult, Verdict
from grader.sandbox.base import Limits, RunOutcome
from grader.scoring import load_thresholds
from tests.sandbox_ready import emu_image_ready

MIRROR = Path(os.environ.get("BANG_COMPAT_MIRRORS", "/work/.mirror")) / "kolp323+Cambricon-MLU-Kernel-Labs" / "repo"

# One template, two kernels: a correct scalar-on-NRAM stage, and the lab's own 03 mistake (right copied to WRAM
# untransposed: __bang_matmul reads it as [k][n]); the program's check (inputs in [1, 1.1], 10 % relative) passes.
PROGRAM = r"""
#include <bang.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#define M 128
#define N 256
#define K 128
__mlu_global__ void multiplyMatricesMLU(float *left, float *right, float *result, int m, int n, int k) {
  __nram__ float l[M * N];
  __nram__ float r[M * K];
KERNEL
}
int main() {
  int m = M, n = N, k = K;
  float *left = (float *)malloc(m * n * 4), *right = (float *)malloc(n * k * 4), *cpu = (float *)malloc(m * k * 4);
  float *out = (float *)malloc(m * k * 4);
  for (int i = 0; i < m * n; i++) left[i] = 1.0f + 0.1f * rand() / (float)RAND_MAX;
  for (int i = 0; i < n * k; i++) right[i] = 1.0f + 0.1f * rand() / (float)RAND_MAX;
  for (int i = 0; i < m; i++)
    for (int j = 0; j < k; j++) {
      float s = 0;
      for (int x = 0; x < n; x++) s += left[i * n + x] * right[x * k + j];
      cpu[i * k + j] = s;
    }
  float *l_d, *r_d, *o_d;
  CNRT_CHECK(cnrtMalloc((void **)&l_d, m * n * 4));
  CNRT_CHECK(cnrtMalloc((void **)&r_d, n * k * 4));
  CNRT_CHECK(cnrtMalloc((void **)&o_d, m * k * 4));
  CNRT_CHECK(cnrtMemcpy(l_d, left, m * n * 4, cnrtMemcpyHostToDev));
  CNRT_CHECK(cnrtMemcpy(r_d, right, n * k * 4, cnrtMemcpyHostToDev));
  cnrtQueue_t queue;
  CNRT_CHECK(cnrtQueueCreate(&queue));
  cnrtDim3_t dim = {1, 1, 1};
  multiplyMatricesMLU<<<dim, CNRT_FUNC_TYPE_BLOCK, queue>>>(l_d, r_d, o_d, m, n, k);
  CNRT_CHECK(cnrtQueueSync(queue));
  CNRT_CHECK(cnrtMemcpy(out, o_d, m * k * 4, cnrtMemcpyDevToHost));
  int ok = 1;
  for (int i = 0; i < m * k; i++) ok &= fabsf(out[i] - cpu[i]) / fmaxf(fabsf(out[i]), fabsf(cpu[i])) <= 0.1f;
  printf(ok ? "PASSED\n" : "FAILED\n");
FORGE
  return 0;
}
"""
SCALAR_NRAM = """
  __nram__ float rn[N * K];
  __memcpy(l, left, m * n * 4, GDRAM2NRAM);
  __memcpy(rn, right, n * k * 4, GDRAM2NRAM);
  for (int i = 0; i < m; i++)
    for (int j = 0; j < k; j++) {
      float s = 0;
      for (int x = 0; x < n; x++) s += l[i * n + x] * rn[x * k + j];
      r[i * k + j] = s;
    }
  __memcpy(result, r, m * k * 4, NRAM2GDRAM);
"""
# The attack on capture itself: after the launch, overwrite the captured output with the CPU's answer.
FORGE = """
  const char *dir = getenv("BANG_EMU_CAPTURE_DIR");
  char path[4096];
  snprintf(path, sizeof path, "%s/l0_a2_out0.npy", dir ? dir : ".");
  FILE *f = fopen(path, "r+b");
  if (f) { fseek(f, 128, SEEK_SET); fwrite(cpu, 4, m * k, f); fclose(f); }
"""
MATMUL_UNTRANSPOSED = """
  __wram__ float w[N * K];
  __memcpy(l, left, m * n * 4, GDRAM2NRAM);
  __memcpy(w, right, n * k * 4, GDRAM2WRAM);
  __bang_matmul(r, l, w, m, n, k);
  __memcpy(result, r, m * k * 4, NRAM2GDRAM);
"""

LAB = GradeRequest(assignment="matmul_programs")
NO_SANDBOX, DOCKER = GradeEnvironment(sandbox="none"), GradeEnvironment(sandbox="docker")


def _calibrated(stage: str) -> float:
    """The threshold of a program run at the base's perf dims: the base's calibrated one (the emulator's MLU370)."""
    table = load_thresholds(load_programs("matmul_programs")[1], "emu", "mlu370-x8")
    assert table is not None
    return table.stages[stage].threshold_us


def _honest_02_beside(folder: Path, program_03: str) -> tuple[GradeResult, dict[str, CaseResult],
                                                                dict[str, StageResult], dict[str, GroupScore]]:
    """The honest scalar-NRAM program and `program_03` graded as a folder (process runner): the result, its cases,
    stages and groups by stage name."""
    (folder / "02_scalar_nram.mlu").write_text(PROGRAM.replace("KERNEL", SCALAR_NRAM).replace("FORGE", ""))
    (folder / "03_vector_nram.mlu").write_text(program_03)
    result = grade_programs(folder, LAB, NO_SANDBOX)
    return (result, {c.group: c for c in result.cases}, {s.name: s for s in result.stages},
            {g.name: g for g in result.groups})


@pytest.mark.slow
def test_two_stage_folder_graded_from_captured_launches(tmp_path: Path) -> None:
    result, cases, by_stage, groups = _honest_02_beside(
        tmp_path, PROGRAM.replace("KERNEL", MATMUL_UNTRANSPOSED).replace("FORGE", ""))
    ok, wrong = by_stage["scalar_nram"], by_stage["vector"]
    # each program: one case (its captured output, a group of 5 points) and its stage (5 speed points), scored
    # as an extension's entry is, with the base's calibrated threshold
    assert ok.verdict == Verdict.PASSED, ok.message
    assert ok.points == 5 and groups["scalar_nram"].points == 5
    assert ok.timing is not None and 0 < ok.timing.median_us <= ok.threshold_us
    assert ok.threshold_us == _calibrated("scalar_nram") and ok.timing.floor_us is not None and not ok.timing.below_floor
    assert "matches float64" in cases["scalar_nram"].message and all(r.passed for r in ok.requirements)
    # the program printed PASSED for it; the host's float64 check of the captured output does not agree
    assert wrong.verdict == Verdict.WRONG_ANSWER and wrong.points == 0, wrong.message
    bad = cases["vector"]
    assert bad.verdict == Verdict.WRONG_ANSWER and bad.findings and bad.mismatches
    assert "DIFF1" in bad.message and "N rows of K" in bad.message  # the cause is named, not only a number
    assert groups["vector"].points == 0 and set(groups) == {"scalar_nram", "vector"}  # the programs handed in
    # close values (inputs in [1, 1.1]) but a layout mistake: the report's kind is wrong values, not precision
    assert [f.kind for f in bad.findings if f.check == "accuracy"] == ["wrong_values"]
    assert result.score == 10 and result.max_score == 60


@pytest.mark.slow
def test_a_rewritten_capture_changes_nothing(tmp_path: Path) -> None:
    """A program that rewrites its captured output with the right answer: the host reads the captures of the
    trusted replay of its journal, never the program's own, so the kernel's real (wrong) output is graded."""
    (tmp_path / "03_vector_nram.mlu").write_text(PROGRAM.replace("KERNEL", MATMUL_UNTRANSPOSED)
                                                 .replace("FORGE", FORGE))
    result = grade_programs(tmp_path, LAB, NO_SANDBOX)
    assert result.stages[0].verdict == Verdict.WRONG_ANSWER, result.stages[0].message
    assert "N rows of K" in result.cases[0].message and result.stages[0].points == 0 and result.score == 0


HOST_ANSWER = Path(__file__).resolve().parents[2] / "reference_kernels" / "adversarial" / "program_host_answer"


@pytest.mark.slow
@pytest.mark.docker
def test_programs_in_the_docker_sandbox_are_graded_on_the_twin(tmp_path: Path) -> None:
    """Run and replay in real containers: an honest program keeps its points, and the adversarial fixture whose
    host code computes the answer and uploads it into the result buffer (its kernel does the counted work, then
    copies that answer out) gets none -- the replay gave the kernel the host's twin inputs, which the program
    never saw. Without the twin the fixture passed stage 03 with 10 points."""
    if not emu_image_ready():
        pytest.skip("needs Docker and the emulation image of these sources (grade setup)")
    lab = tmp_path / "lab"  # not tmp_path itself: pytest makes it 0700, unreadable by the sandbox's user
    lab.mkdir(mode=0o755)
    (lab / "02_scalar_nram.mlu").write_text(PROGRAM.replace("KERNEL", SCALAR_NRAM).replace("FORGE", ""))
    (lab / "03_vector_nram.mlu").write_text((HOST_ANSWER / "03_vector_nram.mlu").read_text())
    result = grade_programs(lab, LAB, DOCKER)
    by_stage = {s.name: s for s in result.stages}
    cases = {c.group: c for c in result.cases}
    groups = {g.name: g for g in result.groups}
    honest, cheat = by_stage["scalar_nram"], by_stage["vector"]
    assert result.sandbox == "docker"
    assert honest.verdict == Verdict.PASSED and honest.points == 5 and groups["scalar_nram"].points == 5, \
        honest.message
    assert cheat.verdict == Verdict.WRONG_ANSWER and cheat.points == 0 and groups["vector"].points == 0, cheat.message
    assert "left @ right" in cases["vector"].message and "DIFF1" in cases["vector"].message
    assert result.score == 10


@pytest.mark.slow
def test_public_exp_5_2_folder(tmp_path: Path) -> None:
    if not MIRROR.is_dir():
        pytest.skip(f"no mirror of kolp323/Cambricon-MLU-Kernel-Labs at {MIRROR} (fetch it to run this)")
    archive = tmp_path / "lab.tar"
    with archive.open("wb") as out:
        subprocess.run(["git", "--git-dir", str(MIRROR), "archive", "HEAD", "matmul_optimization"], stdout=out,
                       check=True)
    safe_tar.extract_tar(archive, tmp_path)
    result = grade_programs(tmp_path / "matmul_optimization", LAB, NO_SANDBOX)
    by_stage = {s.name: s for s in result.stages}
    assert len(by_stage) == 6
    for stage in result.stages:
        print(stage.title, stage.verdict, stage.timing and stage.timing.median_us, stage.threshold_us, stage.message)
    # 01/02: right answers at 128x256x256, not the lab's shape -> correctness points only
    groups = {g.name: g for g in result.groups}
    assert by_stage["scalar_nram"].correct and groups["scalar_nram"].points == 5
    assert by_stage["scalar_nram"].verdict == Verdict.TOO_SLOW and by_stage["scalar_nram"].points == 0
    assert [r.name for r in by_stage["scalar_nram"].requirements if not r.passed] == ["lab_dims"]
    # 03 copies right into WRAM untransposed: its own check prints 03PASSED, the captured output is wrong
    vector = next(c for c in result.cases if c.group == "vector")
    assert by_stage["vector"].verdict == Verdict.WRONG_ANSWER and "N rows of K" in vector.message
    # 06: the emulator stops its UNION1 kernel (a __memcpy_async reads memory another is still filling); named
    # with its line, not a missing trace (the emulator itself used to segfault right after reporting it)
    sram = next(c for c in result.cases if c.group == "sram_union")
    assert sram.verdict == Verdict.RUNTIME_ERROR, sram.message
    # the kernel's line (92: the __memcpy_async into right_wram), natively from the builtin's return address, on the
    # WebAssembly engine from the code site the module marked before the call (wasm/lines.py): not the launch's (174)
    assert sram.message.startswith("async-hazard (06_vector_sram_unions_pipe5.mlu:92): "), sram.message


# A kernel the emulator stops (a __memcpy_async reads NRAM another one is still filling: async-hazard), whose
# host code then carries on past the failed sync (HOST_END); the grader must name how the program ended.
CRASHING = r"""
#include <bang.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
__mlu_global__ void multiplyMatricesMLU(float *left, float *right, float *result, int m, int n, int k) {
  __nram__ float a[64];
  __memcpy_async(a, left, 64 * sizeof(float), GDRAM2NRAM);
  __memcpy_async(result, a, 64 * sizeof(float), NRAM2GDRAM);
  __sync_io();
}
int main() {
  int m = 8, n = 8, k = 8;
  float host[64];
  for (int i = 0; i < 64; i++) host[i] = 1.0f;
  float *l_d, *r_d, *o_d;
  cnrtMalloc((void **)&l_d, 256);
  cnrtMalloc((void **)&r_d, 256);
  cnrtMalloc((void **)&o_d, 256);
  cnrtMemcpy(l_d, host, 256, cnrtMemcpyHostToDev);
  cnrtMemcpy(r_d, host, 256, cnrtMemcpyHostToDev);
  cnrtQueue_t queue;
  cnrtQueueCreate(&queue);
  cnrtDim3_t dim = {1, 1, 1};
  multiplyMatricesMLU<<<dim, CNRT_FUNC_TYPE_BLOCK, queue>>>(l_d, r_d, o_d, m, n, k);
  cnrtQueueSync(queue);
HOST_END
  return 0;
}
"""
NULL_WRITE = "  *(volatile int *)0 = 1;"  # SIGSEGV
# SIGXFSZ: a file grown past the file size limit (lowered here so the test writes 2 MiB, not the sandbox's GiB)
FILE_FLOOD = """  struct rlimit r = {1 << 20, 1 << 20};
  setrlimit(RLIMIT_FSIZE, &r);
  static char block[1 << 16];
  FILE *f = fopen("flood.bin", "wb");
  for (int i = 0; f && i < 32; i++) fwrite(block, 1, sizeof block, f), fflush(f);"""
HAZARD_LINE = CRASHING.splitlines().index("  __memcpy_async(result, a, 64 * sizeof(float), NRAM2GDRAM);") + 1


@pytest.mark.slow
@pytest.mark.docker
def test_an_unreadable_folder_is_staged_and_crashes_are_named(tmp_path: Path) -> None:
    """A checkout only its owner can read (0700, files 0600: the sandbox's user cannot) is graded from a readable
    copy: the honest program passes. Two programs die: one of a segmentation fault after the emulator stopped
    its kernel (async-hazard), one of the file size limit; each is a crash naming the signal in words, in
    English and in Chinese, never 'did not compile' or a missing trace, and earns nothing."""
    if not emu_image_ready():
        pytest.skip("needs Docker and the emulation image of these sources (grade setup)")
    lab = tmp_path / "lab"
    lab.mkdir(mode=0o700)
    (lab / "02_scalar_nram.mlu").write_text(PROGRAM.replace("KERNEL", SCALAR_NRAM).replace("FORGE", ""))
    (lab / "03_vector_nram.mlu").write_text(CRASHING.replace("HOST_END", NULL_WRITE))
    (lab / "04_vector_nram_blocks.mlu").write_text(CRASHING.replace("HOST_END", FILE_FLOOD))
    for path in lab.iterdir():
        path.chmod(0o600)
    results = {}
    for lang in ("en", "zh"):
        with use_language(lang):
            results[lang] = grade_programs(lab, LAB, DOCKER)
    result = results["en"]
    cases = {c.group: c for c in result.cases}
    by_stage = {s.name: s for s in result.stages}
    assert result.sandbox == "docker"
    assert cases["scalar_nram"].verdict == Verdict.PASSED and by_stage["scalar_nram"].points == 5, \
        (cases["scalar_nram"].message, result.build and result.build.compiler_output)
    segv, flood = cases["vector"], cases["multicore"]
    assert segv.verdict == Verdict.CRASH and by_stage["vector"].points == 0, segv.message
    assert "segmentation fault (SIGSEGV)" in segv.message, segv.message
    assert f"async-hazard (03_vector_nram.mlu:{HAZARD_LINE})" in segv.message, segv.message
    assert [d.kind for d in segv.diagnostics if d.severity == "error"] == ["async-hazard"]
    assert flood.verdict == Verdict.CRASH and by_stage["multicore"].points == 0, flood.message
    limit = run_limits(3).file_size_bytes >> 20
    assert "output-size limit (SIGXFSZ)" in flood.message and f"{limit} MiB" in flood.message, flood.message
    assert result.score == 10
    zh = {c.group: c for c in results["zh"].cases}
    assert zh["vector"].verdict == Verdict.CRASH and "段错误" in zh["vector"].message, zh["vector"].message
    assert "输出大小上限" in zh["multicore"].message and f"{limit} MiB" in zh["multicore"].message, \
        zh["multicore"].message


def _as_nobody(fn: Callable[[], str]) -> str:
    """fn's result, run in a forked child that gave up root for uid/gid 65534 (as a grader run by a user who
    cannot read a classmate's 0600 file)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(read)
        try:
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            out = fn()
        except BaseException as exc:  # noqa: BLE001 -- reported to the parent
            out = f"child failed: {exc!r}"
        os.write(write, out.encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as fh:
        out = fh.read().decode()
    os.waitpid(pid, 0)
    return out


@pytest.mark.skipif(os.geteuid() != 0, reason="drops root to play a user who cannot read the file")
def test_a_file_the_grader_cannot_read_is_an_input_error_naming_it() -> None:
    lab = Path(tempfile.mkdtemp(prefix="lab-unreadable-"))  # not under pytest's 0700 tmp: uid 65534 reaches it
    try:
        lab.chmod(0o755)
        (lab / "02_scalar_nram.mlu").write_text(PROGRAM.replace("KERNEL", SCALAR_NRAM).replace("FORGE", ""))
        (lab / "02_scalar_nram.mlu").chmod(0o644)
        (lab / "03_vector_nram.mlu").write_text(PROGRAM.replace("KERNEL", MATMUL_UNTRANSPOSED).replace("FORGE", ""))
        (lab / "03_vector_nram.mlu").chmod(0o600)  # root's, unreadable to uid 65534

        def grade() -> str:
            result = grade_programs(lab, LAB, NO_SANDBOX)
            return f"{result.verdict}|{result.message}|{len(result.cases)}"

        verdict, message, cases = _as_nobody(grade).split("|")
        assert verdict == Verdict.UNGRADABLE_LAYOUT, message
        assert "03_vector_nram.mlu cannot be read by the grader (Permission denied)" in message, message
        assert "compile" not in message and cases == "0"
    finally:
        shutil.rmtree(lab)


# The lab's host fallback: main() computes the product on the CPU and prints PASSED, the kernel never launched.
HOST_ONLY = PROGRAM.replace("  multiplyMatricesMLU<<<dim, CNRT_FUNC_TYPE_BLOCK, queue>>>(l_d, r_d, o_d, m, n, k);\n",
                            "  CNRT_CHECK(cnrtMemcpy(o_d, cpu, m * k * 4, cnrtMemcpyHostToDev));\n")


@pytest.mark.slow
def test_caught_on_one_program_no_speed_points_anywhere(tmp_path: Path) -> None:
    """A lab folder is one submission, as an extension is (score_stages.withhold_speed_points): a program that
    never launched its kernel costs every program's speed points and flags the grading; the honest program
    keeps its correctness points. Without the rule the folder scored 10 (02: 5 + 5)."""
    assert HOST_ONLY != PROGRAM
    result, cases, by_stage, groups = _honest_02_beside(
        tmp_path, HOST_ONLY.replace("KERNEL", SCALAR_NRAM).replace("FORGE", ""))
    assert cases["vector"].verdict == Verdict.NOT_USING_KERNEL, cases["vector"].message
    assert cases["scalar_nram"].verdict == Verdict.PASSED and groups["scalar_nram"].points == 5
    honest = by_stage["scalar_nram"]
    assert honest.verdict == Verdict.NOT_USING_KERNEL and honest.points == 0, honest.message
    assert "03_vector_nram.mlu" in honest.message and "flagged for review" in honest.message
    assert result.integrity and "03_vector_nram.mlu" in result.integrity[0], result.integrity
    assert result.score == 5


def test_a_replay_child_that_died_is_named_from_its_harness_record(tmp_path: Path) -> None:
    """What replay-programs writes when its child dies (the return code, the emulator's own error lines of its
    stderr) becomes a crash naming the signal and the error with its line; nothing the run wrote is needed."""
    stderr = (b"noise\nbang-emu: error: async-hazard: __memcpy_async reads [0x1, 0x2) while an asynchronous copy "
              b"into that memory is still in flight (kernel multiplyMatricesMLU, /submission/06_x.mlu:92)\n")
    (tmp_path / "replay" / "06_x").mkdir(parents=True)
    (tmp_path / "run").mkdir()
    (tmp_path / "replay" / "06_x" / "replay.json").write_text(json.dumps(
        {"returncode": -11, "emulator_errors": emulator_errors(stderr)}))
    ok = RunOutcome(exit_code=0)
    ended = program_ending(tmp_path / "run", tmp_path / "replay", "06_x", Launches(), Ran(ok, Limits()),
                           Ran(ok, Limits()))
    assert ended is not None and ended.meta is not None and ended.meta["error_kind"] == "crash"
    assert ended.meta["error"].startswith("06_x.mlu: killed by a segmentation fault (SIGSEGV)"), ended.meta
    assert "after the emulator's error async-hazard (06_x.mlu:92): __memcpy_async reads" in ended.meta["error"]
    (tmp_path / "replay" / "06_x" / "replay.json").write_text(json.dumps({"status": 0, "message": ""}))
    assert program_ending(tmp_path / "run", tmp_path / "replay", "06_x", Launches(), Ran(ok, Limits()),
                          Ran(ok, Limits())) is None
