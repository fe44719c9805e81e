"""Host-side integrity checks (grader.checks.integrity) on records signed with real keys in the runtime's line
format, a real shared library for the symbol read, and the host's real device table."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import numpy as np
import pytest
from signed_trace import DEVICE, new_key, write_signed

from grader.checks.integrity import (
    CallIntegrity,
    HostFacts,
    KernelSymbols,
    base_name,
    device_profile,
    launch_floor_us,
    mangled_base_name,
)
from grader.orchestration.judge import CallOutcome, judge_call
from grader.orchestration.trace_summary import read_trace
from grader.results import Verdict
from grader.spec import SeedPlan, correctness_cases, load_assignment
from grader.spec.references import REFERENCES

PROFILE = device_profile(DEVICE)
N = 65536


def sigmoid_launch(n: int = N, time_us: float = 200.0, kernel: str = "sigmoid_kernel<float>", **extra) -> dict:
    record = {"record": "launch", "kernel": kernel, "dim": [16, 1, 1], "func_type": "BLOCK", "device": DEVICE,
              "profile": dict(PROFILE), "modelled_time_us": time_us, "cores_used": 16,
              "bytes_moved": {"GDRAM2NRAM": 4 * n, "NRAM2GDRAM": 4 * n},
              "builtin_counts": {"__bang_active_sigmoid": 16, "__memcpy": 32},
              "work": {"vector_elements": {"__bang_active_sigmoid": n}, "tensor_macs": 0}, "diagnostics": []}
    record.update(extra)
    return record


def output_record(array: np.ndarray, written: int | None = None, **extra) -> dict:
    data = np.ascontiguousarray(array).tobytes()
    record = {"record": "output", "bytes": len(data), "kernel_written": len(data) if written is None else written,
              "sha256": hashlib.sha256(data).hexdigest()}
    record.update(extra)
    return record


@pytest.fixture(scope="module")
def library(tmp_path_factory) -> Path:
    """A real shared library: a template kernel, a C-linkage one, and a launch-site literal of an inlined one."""
    folder = tmp_path_factory.mktemp("lib")
    src = folder / "k.cpp"
    src.write_text('template <typename T> void tiled_kernel(T *p) { p[0] = T(1); }\n'
                   'template void tiled_kernel<float>(float *);\n'
                   'extern "C" void plain_kernel(float *p) { p[0] = 2; }\n'
                   'extern "C" const char *site() { return "inlined_kernel<half>"; }\n')
    so = folder / "libk.so"
    subprocess.run(["g++", "-shared", "-fPIC", "-O2", str(src), "-o", str(so)], check=True)
    return so


def facts(library: Path | None = None) -> HostFacts:
    return HostFacts(device=DEVICE, profile=PROFILE, symbols=KernelSymbols.from_library(library) if library else None)


def check(records: list[dict], output: np.ndarray | None, tmp_path: Path, library: Path | None = None,
          required=None, key: bytes | None = None, call_id: str = "c0") -> list[str]:
    key = key or new_key()
    path = write_signed(tmp_path / f"{call_id}.trace.jsonl", key, call_id, records)
    checker = CallIntegrity(call_id, facts(library), required, 4)
    reading = read_trace(path, key, call_id, checker)
    return reading.findings + checker.finish(output) + checker.coverage  # coverage: weighed by judge_call


def required_sigmoid(n: int = N):
    return REFERENCES["sigmoid"].required({"x": (n,)})


def test_the_device_table_is_the_emulator_one():
    assert PROFILE is not None and PROFILE["clock_mhz"] > 0 and "launch_overhead_us" in PROFILE


def test_base_names_of_symbols_and_trace_names():
    assert base_name("void ns::k<float>(float const*, int)") == "k"
    assert base_name("k<half>") == "k"
    assert base_name("plain_kernel") == "plain_kernel"
    assert base_name("void outer<std::pair<int, int> >(int)") == "outer"


MANGLING = """
#include <cstdint>
void plain_kernel(const float* x, float* y, int64_t n) { y[0] = x[0] + n; }
static void static_kernel(float* y) { y[0] = 1; }
void (*keep_static)(float*) = static_kernel;
namespace { void anon_kernel(float* y) { y[0] = 2; } }
void (*keep_anon)(float*) = anon_kernel;
namespace ns { namespace inner { template <typename T> void tk(const T* x, T* y, int n) { y[0] = x[0]; } } }
template void ns::inner::tk<float>(const float*, float*, int);
template void ns::inner::tk<_Float16>(const _Float16*, _Float16*, int);
template <int N, typename T> void unrolled(T* y) { y[0] = N; }
template void unrolled<64, float>(float*);
template void unrolled<-3, int>(int*);
struct Holder { template <class T> static void member(T*) {} };
template void Holder::member<float>(float*);
"""


def test_mangled_kernel_names_meet_their_demangled_symbols(tmp_path):
    """CNPAPI reports a kernel by its mangled name, `nm -C` demangles: both give the same base name."""
    if subprocess.run(["which", "c++filt"], capture_output=True).returncode != 0:
        pytest.skip("needs c++filt (binutils)")
    (tmp_path / "k.cpp").write_text(MANGLING)
    subprocess.run(["g++", "-c", "-fPIC", str(tmp_path / "k.cpp"), "-o", str(tmp_path / "k.o")], check=True)
    listing = subprocess.run(["nm", "--defined-only", str(tmp_path / "k.o")], capture_output=True, text=True,
                             check=True).stdout.splitlines()
    mangled = [line.split()[2] for line in listing if line.split()[1] in "TtWw" and line.split()[2].startswith("_Z")]
    demangled = subprocess.run(["c++filt", *mangled], capture_output=True, text=True, check=True).stdout.split("\n")
    assert len(mangled) == 8
    for symbol, plain in zip(mangled, demangled, strict=False):
        assert mangled_base_name(symbol) == base_name(plain) != "", (symbol, plain)
    assert {base_name(p) for p in demangled if p} == {"plain_kernel", "static_kernel", "anon_kernel", "tk",
                                                      "unrolled", "member"}
    assert mangled_base_name("plain_kernel") is None and mangled_base_name("_Z") is None


def test_kernel_names_come_from_the_built_library(library):
    symbols = KernelSymbols.from_library(library)
    assert symbols is not None
    assert symbols.has("tiled_kernel<float>") and symbols.has("tiled_kernel<half>")
    assert symbols.has("plain_kernel") and symbols.has("inlined_kernel<float>")
    assert not symbols.has("torch_sigmoid") and not symbols.has("forged_kernel")


def test_an_honest_call_has_no_findings(tmp_path, library):
    out = np.random.default_rng(0).random(N, dtype=np.float32)
    records = [sigmoid_launch(kernel="tiled_kernel<float>"), output_record(out),
               sigmoid_launch(kernel="tiled_kernel<float>")]  # a timed repeat after the seal
    assert check(records, out, tmp_path, library, required_sigmoid()) == []


def test_device_profile_and_kernel_name_must_be_the_hosts(tmp_path, library):
    out = np.zeros(N, dtype=np.float32)
    patched = dict(PROFILE, clock_mhz=PROFILE["clock_mhz"] * 4)
    findings = check([sigmoid_launch(device="mlu270", profile=patched, kernel="forged_kernel"), output_record(out)],
                     out, tmp_path, library, required_sigmoid())
    text = "\n".join(findings)
    assert "ran on device 'mlu270', the host chose 'mlu370-x8'" in text
    assert "clock_mhz" in text and "profile figures differ" in text
    assert "kernel 'forged_kernel' is not a function of the built extension" in text


def test_a_time_below_the_work_floor_is_a_finding(tmp_path):
    out = np.zeros(N, dtype=np.float32)
    honest = sigmoid_launch()
    floor = launch_floor_us(honest, PROFILE)
    assert PROFILE["launch_overhead_us"] < floor < honest["modelled_time_us"]
    findings = check([sigmoid_launch(time_us=floor * 0.9), output_record(out)], out, tmp_path)
    assert len(findings) == 1 and "counted work needs at least" in findings[0]
    # A huge matmul on the tensor unit: the floor grows with the multiply-adds.
    big = sigmoid_launch(work={"vector_elements": {}, "tensor_macs": 10**12})
    assert launch_floor_us(big, PROFILE) > 1e4  # 2e12 ops over 16 cores x 3072 ops/cycle x 1 GHz, halved


def test_output_provenance_and_digest(tmp_path):
    out = np.arange(N, dtype=np.float32)
    host_written = check([sigmoid_launch(), output_record(out, written=4096 * 4)], out, tmp_path)
    assert any("kernels wrote 16384 of the output's 262144 bytes" in f for f in host_written)
    other = out.copy()
    other[7] = -1
    swapped = check([sigmoid_launch(), output_record(other)], out, tmp_path)
    assert swapped == ["the output record's sha256 differs from the array the host received"]
    assert check([sigmoid_launch()], out, tmp_path) == ["no output record: the runtime never sealed the output"]
    two = check([sigmoid_launch(), output_record(out), output_record(out)], out, tmp_path)
    assert "2 output records" in two[0]


def test_work_must_cover_the_output(tmp_path):
    """The decoy: a real kernel on the first 4096 elements; the rest copied (or scattered) by kernel code."""
    out = np.zeros(N, dtype=np.float32)
    decoy = sigmoid_launch(n=N, work={"vector_elements": {"__bang_active_sigmoid": 4096}, "tensor_macs": 0})
    findings = check([decoy, output_record(out)], out, tmp_path, required=required_sigmoid())
    assert findings == ["counted work does not cover the output: 4096 elements went through an activation "
                        f"(builtin or scalar code), the output needs {N}"]
    small_io = sigmoid_launch(bytes_moved={"GDRAM2NRAM": 4 * 4096, "NRAM2GDRAM": 4 * N})
    findings = check([small_io, output_record(out)], out, tmp_path, required=required_sigmoid())
    assert findings == [f"counted work does not cover the output: kernels read 4096 elements from GDRAM, the "
                        f"inputs hold {N}"]
    # Work after the seal (timed repeats) does not count for the checked invocation.
    findings = check([output_record(out), sigmoid_launch()], out, tmp_path, required=required_sigmoid())
    assert any("activation" in f for f in findings)


def test_matmul_work_counts_tensor_vector_and_scalar_evidence(tmp_path):
    m, k, n = 64, 64, 64
    required = REFERENCES["matmul"].required({"a": (m, k), "b": (k, n)})
    out = np.zeros((m, n), dtype=np.float32)
    moved = {"GDRAM2NRAM": 4 * m * k, "GDRAM2WRAM": 4 * k * n, "NRAM2GDRAM": 4 * m * n}
    tensor = sigmoid_launch(bytes_moved=moved, work={"vector_elements": {}, "tensor_macs": m * n * k})
    assert check([tensor, output_record(out)], out, tmp_path, required=required) == []
    scalar = sigmoid_launch(bytes_moved={}, builtin_counts={"scalar_load_gdram": 2 * m * n * k,
                                                            "scalar_store_gdram": m * n},
                            work={"vector_elements": {}, "tensor_macs": 0}, time_us=1e6)
    assert check([scalar, output_record(out)], out, tmp_path, required=required) == []
    half = sigmoid_launch(bytes_moved=moved, work={"vector_elements": {}, "tensor_macs": m * n * k // 2})
    findings = check([half, output_record(out)], out, tmp_path, required=required)
    assert findings == [f"counted work does not cover the output: kernels did {m * n * k // 2} multiply-adds "
                        f"(tensor, vector and scalar), the product needs {m * n * k}"]


def test_findings_make_the_case_an_integrity_verdict_with_the_message(tmp_path):
    spec = load_assignment("sigmoid")
    case = correctness_cases(spec, SeedPlan.create("public"))[3]
    expected = REFERENCES["sigmoid"].compute(case.make_inputs()["x"])
    out = expected.astype(np.float32)
    key = new_key()
    path = write_signed(tmp_path / "c3.trace.jsonl", key, "c3", [sigmoid_launch(n=out.size),
                                                                   output_record(out, written=0)])
    checker = CallIntegrity("c3", facts(), REFERENCES["sigmoid"].required(case.shapes), 4)
    reading = read_trace(path, key, "c3", checker)
    findings = reading.findings + checker.finish(out)
    got = CallOutcome(meta={"ok": True}, output=out, trace=reading, integrity=findings, coverage=checker.coverage)
    result = judge_call(spec, "sigmoid", case, got, expected, kernel_trace=True)
    # Right values the kernels did not write: host code made them.
    assert result.verdict == Verdict.INTEGRITY and not result.passed
    assert "not your kernels' work" in result.message and "kernels wrote 0 of the output's" in result.message


def test_an_honest_kernel_that_leaves_part_of_the_output_unwritten_is_a_wrong_answer(tmp_path):
    """tail_dropped / output_partly_unwritten: the unwritten part still holds the poison, so it is a bug."""
    spec = load_assignment("sigmoid")
    case = correctness_cases(spec, SeedPlan.create("public"))[3]
    expected = REFERENCES["sigmoid"].compute(case.make_inputs()["x"])
    out = expected.astype(np.float32)
    out[-3:] = np.nan
    key = new_key()
    path = write_signed(tmp_path / "c3.trace.jsonl", key, "c3", [sigmoid_launch(n=out.size),
                                                                   output_record(out, written=(out.size - 3) * 4)])
    checker = CallIntegrity("c3", facts(), REFERENCES["sigmoid"].required(case.shapes), 4)
    reading = read_trace(path, key, "c3", checker)
    findings = reading.findings + checker.finish(out)
    assert findings == [] and checker.coverage
    got = CallOutcome(meta={"ok": True}, output=out, trace=reading, integrity=findings, coverage=checker.coverage)
    result = judge_call(spec, "sigmoid", case, got, expected, kernel_trace=True)
    assert result.verdict == Verdict.WRONG_ANSWER and "kernels wrote" in result.message


def test_a_call_without_launches_stays_not_using_kernel(tmp_path):
    out = np.zeros(N, dtype=np.float32)
    assert check([output_record(out, written=0)], out, tmp_path, required=required_sigmoid()) == []


# -- end to end: the real harness, emulator runtime and process runner ----------------------------------------
ROOT = Path(__file__).resolve().parents[1]

DECOY_OPS = '''
"""A decoy: one real launch on a sliver of the input, the answer computed by torch on the host."""
import my_ops_ext
import torch


def sigmoid(x):
    my_ops_ext.sigmoid_vector(x[:64].contiguous())
    return torch.sigmoid(x.cpu())
'''


def _grade(path: Path, **request):
    from grader.orchestration import GradeEnvironment, GradeRequest, grade_submission
    from grader.orchestration.build_cache import default_build_cache

    # the session's build cache (tests/conftest.py): a copy that changed only ops.py reuses its kernels' build
    return grade_submission(path, GradeRequest(**request), GradeEnvironment(sandbox="none",
                                                                            build_cache=default_build_cache()))


@pytest.mark.slow
def test_the_bundled_example_still_gets_full_marks():
    result = _grade(ROOT / "reference_kernels" / "example")
    assert result.integrity == [], result.integrity
    assert (result.verdict, result.score) == (Verdict.PASSED, result.max_score), result.message


@pytest.mark.slow
def test_a_decoy_kernel_with_a_host_computed_answer_is_an_integrity_failure(tmp_path):
    import shutil

    submission = tmp_path / "decoy"
    shutil.copytree(ROOT / "reference_kernels" / "sigmoid" / "vector", submission)
    (submission / "ops.py").write_text(DECOY_OPS)
    result = _grade(submission, stages=["vector"])
    assert result.verdict == Verdict.INTEGRITY and result.score == 0, result.message
    # The host-side answer is a CPU tensor: the run never marked a device output, so the grader's replay of the
    # kernels cannot stand for the call (issue 26: what the run's process records decides nothing).
    assert any("case n4096: the grader's replay of your kernels could not stand for this call: the run never marked "
               "the call's output" in line for line in result.integrity), result.integrity
    assert all(c.verdict == Verdict.INTEGRITY for c in result.cases)


def test_a_kept_reading_of_symbols_is_the_librarys_own_and_keyed_by_its_content(tmp_path, library, monkeypatch):
    """build_step.kernel_symbols keeps the host's reading in the build cache by the library's bytes: read back, it
    is the same reading (every has() alike); without nm on PATH the kept one is still found, a library differing
    by one byte is not; a kept file that does not parse is read again from the library."""
    from grader.orchestration.build_step import kernel_symbols

    cache = tmp_path / "cache"
    fresh = KernelSymbols.from_library(library)
    assert fresh is not None and kernel_symbols(library, cache, library.parent) == fresh
    kept = list((cache / "symbols").glob("*/symbols.json"))
    assert len(kept) == 1
    other = tmp_path / "libk2.so"
    other.write_bytes(library.read_bytes() + b"\0")  # a byte past the ELF's end: the same symbols, another key
    empty = tmp_path / "no-nm"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    assert KernelSymbols.from_library(library) is None  # no nm now: only the kept reading can answer
    back = kernel_symbols(library, cache, library.parent)
    assert back == fresh
    for name in ("tiled_kernel<half>", "plain_kernel", "inlined_kernel<float>", "forged_kernel", "torch_sigmoid"):
        assert back.has(name) == fresh.has(name), name
    assert kernel_symbols(other, cache, other.parent) is None  # not kept under the other library's content
    monkeypatch.undo()
    kept[0].write_text("{not json")
    assert kernel_symbols(library, cache, library.parent) == fresh
    assert kernel_symbols(other, cache, other.parent) == fresh and len(list((cache / "symbols").glob("*/symbols.json"))) == 2
    planted = tmp_path / "planted"
    planted.mkdir()
    unseen = tmp_path / "libk3.so"
    unseen.write_bytes(library.read_bytes() + b"\0\0")  # content no reading was kept for
    (planted / "libk.so").symlink_to(unseen)
    before = sorted((cache / "symbols").iterdir())
    assert kernel_symbols(planted / "libk.so", cache, planted) == fresh  # from_library, as before this cache
    assert sorted((cache / "symbols").iterdir()) == before
