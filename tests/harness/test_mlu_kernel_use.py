"""Kernel use on the mlu backend, judged on the host from the timing driver's records (grader.checks.kernel_use).

No MLU here: the records are written by the real driver (bang_harness.mlu_driver.NotifierDriver with
`windows=True`, as on a card) over the emulator runtime's CNRT notifiers and a stand-in libcnpapi built from
the documented activity API (test_mlu_driver.CNPAPI_STANDIN), in a child process, appended as
bang_harness.device does. Attacks are real lines altered as a student's process could alter them. The symbols
are those of a real shared library built here with g++ and read by the host's own KernelSymbols (nm).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from bang_harness.job import CallResult, write_result
from bang_harness.protocol import TRACE_MAX_LINE_BYTES, WINDOW_MAX_KERNELS, KernelRecord, KernelWindow
from test_mlu_driver import build_cnpapi_standin, mlu_card

from grader.backends.mlu import MluBackend
from grader.checks.integrity import HostFacts, KernelSymbols
from grader.checks.kernel_use import CLOCK_SLACK_US, FLOOR_TOLERANCE, read_kernel_use, work_floor
from grader.orchestration.environment import ResolvedBackend
from grader.orchestration.judge import judge_call
from grader.orchestration.plan import PlannedCall
from grader.orchestration.read_outputs import read_call
from grader.results import Verdict
from grader.sandbox.base import RunOutcome
from grader.spec import REFERENCES, SeedPlan, correctness_cases, load_assignment, perf_case

EXTENSION = """
#include <cstdint>
void sigmoid_kernel(const float* x, float* y, int64_t n) { for (int64_t i = 0; i < n; ++i) y[i] = x[i]; }
namespace ops { template <typename T> void tiled_kernel(const T* x, T* y, int n) { y[0] = x[0]; }
template void tiled_kernel<float>(const float*, float*, int); }
"""

# One call as the worker runs it: `invocations` invocations, each launching `launches` kernels named `name`
# (CNPAPI stand-in), measured by the driver and appended to the call's trace file as DeviceSession.timed does.
DRIVER = textwrap.dedent("""
    import ctypes, json, sys
    from bang_emu import toolchain
    from bang_harness.mlu_driver import CnpapiKernels, NotifierDriver
    runtime = ctypes.CDLL(str(toolchain.runtime_dir() / toolchain.LIB_NAME), mode=ctypes.RTLD_GLOBAL)
    queue = runtime.bang_emu_default_queue
    queue.restype = ctypes.c_void_p
    standin_path, plan = sys.argv[1], json.loads(sys.argv[2])
    standin = ctypes.CDLL(standin_path)
    for call in plan:
        name = ctypes.c_char_p(call["name"].encode())
        standin.standin_name(name)
        cnpapi = CnpapiKernels(standin) if call["cnpapi"] else None
        driver = NotifierDriver(runtime, queue(), cnpapi, windows=True)
        for _ in range(call["invocations"]):
            value, timing = driver.measure(lambda: [standin.standin_launch() for _ in range(call["launches"])],
                                           call["trace"])
            with open(call["trace"], "ab") as fh:
                fh.write(timing.window.to_line())
""")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The extension's library and its symbols, and the CNPAPI stand-in."""
    if shutil.which("g++") is None or shutil.which("nm") is None:
        pytest.skip("needs g++ and nm (binutils) to build and read a shared library")
    folder = tmp_path_factory.mktemp("kernel_use")
    (folder / "ext.cpp").write_text(EXTENSION)
    library = folder / "ext.so"
    subprocess.run(["g++", "-shared", "-fPIC", "-O1", str(folder / "ext.cpp"), "-o", str(library)], check=True)
    symbols = KernelSymbols.from_library(library)
    assert symbols is not None
    mangled = subprocess.run(["nm", "--defined-only", str(library)], capture_output=True, text=True,
                             check=True).stdout.split()
    return {"symbols": symbols, "standin": build_cnpapi_standin(folder),
            "mangled": {m for m in mangled if m.startswith("_Z")}}


def drive(built: dict, folder: Path, *calls: dict) -> list[Path]:
    pytest.importorskip("bang_emu.toolchain", reason="the emulator toolchain (bang_emu.toolchain) is not installed")
    folder.mkdir(parents=True, exist_ok=True)
    plan = []
    for index, call in enumerate(calls):
        plan.append({"name": "sigmoid_kernel", "invocations": 1, "launches": 1, "cnpapi": True,
                     "trace": str(folder / f"c{index}.trace.jsonl"), **call})
    out = subprocess.run([sys.executable, "-c", DRIVER, str(built["standin"]), json.dumps(plan)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return [Path(call["trace"]) for call in plan]


def judge(built: dict, trace: Path, invocations: int = 1, timed: int = 0, **options):
    return read_kernel_use(trace, trace.parent, invocations=invocations, timed=timed, symbols=built["symbols"],
                           during="sigmoid(x)", **options)


@pytest.mark.slow
def test_the_extensions_kernel_counts_under_its_mangled_demangled_or_plain_name(built, tmp_path):
    demangled = subprocess.run(["c++filt", *sorted(built["mangled"])], capture_output=True, text=True,
                               check=True).stdout.split("\n")
    names = sorted(built["mangled"]) + [d for d in demangled if d] + ["sigmoid_kernel", "tiled_kernel<float>"]
    traces = drive(built, tmp_path, *({"name": name} for name in names))
    for name, trace in zip(names, traces, strict=True):
        use = judge(built, trace)
        assert (use.findings, use.missing, use.unverified, use.cnpapi) == ([], None, None, True), name


@pytest.mark.slow
def test_stage_time_is_the_devices_per_timed_invocation(built, tmp_path):
    # Warm-up 3, timed 10 (the mlu backend): 14 invocations, the last 10 timed. Two kernels per invocation, as
    # the stand-in reports them 1 µs apart and 2.5 µs long: a 3.5 µs span, longer than the emulator notifier's
    # 0 µs without a launch, so the span is the time.
    trace, = drive(built, tmp_path, {"invocations": 14, "launches": 2})
    use = judge(built, trace, invocations=14, timed=10)
    assert use.missing is None and not use.findings
    assert use.device_us == [3.5] * 10
    assert use.kernels == {"sigmoid_kernel": (28, 70.0)} and use.kernel_count == 28  # 2.5 µs each


@pytest.mark.slow
def test_return_a_matmul_is_not_kernel_use_and_the_message_says_what_ran(built, tmp_path):
    foreign, nothing = drive(built, tmp_path, {"name": "cnnlMatMul_v2", "launches": 2}, {"launches": 0})
    use = judge(built, foreign)
    assert not use.findings and use.missing is not None
    assert use.missing.startswith("CNPAPI saw no kernel of your extension during sigmoid(x)")
    assert "it saw: cnnlMatMul_v2 (x2)" in use.missing
    assert "no kernel at all" in judge(built, nothing).missing


@pytest.mark.slow
def test_without_cnpapi_kernel_use_is_unverified_never_silently_passed(built, tmp_path):
    trace, = drive(built, tmp_path, {"cnpapi": False, "invocations": 4})
    review = judge(built, trace, invocations=4, timed=3)
    assert review.cnpapi is False and review.missing is None and not review.findings
    assert "could not be verified" in review.unverified and "flagged for review" in review.unverified
    assert len(review.device_us) == 3  # the notifier still times the stage
    stage = judge(built, trace, invocations=4, timed=3, action="zero_stages", stage_call=True)
    assert stage.missing == stage.unverified and "withheld" in stage.missing
    correctness = judge(built, trace, invocations=4, timed=3, action="zero_stages", stage_call=False)
    assert correctness.missing is None and correctness.unverified  # correctness points stand


def real_lines(built: dict, folder: Path, invocations: int = 3, **call) -> list[bytes]:
    trace, = drive(built, folder, {"invocations": invocations, **call})
    return trace.read_bytes().splitlines(keepends=True)


def _with(line: bytes, **fields) -> bytes:
    data = json.loads(line)
    data.update(fields)
    return json.dumps(data).encode() + b"\n"


ATTACKS = {
    # name: (alter the driver's 3 real lines, the finding it must end in)
    "infinite time": (lambda ls, no: [ls[0].replace(b'"device_us":0.0', b'"device_us":Infinity'), *ls[1:]],
                      "not plain JSON"),
    "negative time": (lambda ls, no: [_with(ls[0], device_us=-5.0), *ls[1:]], "not a finite time >= 0"),
    "huge name": (lambda ls, no: [_with(ls[0], kernels=[{"kernel": "k" * 5000, "start_ns": 0, "end_ns": 1,
                                                         "queue_id": 0}]), *ls[1:]], "not a string of 1-512"),
    "kernel flood": (lambda ls, no: [_with(ls[0], kernels=[KernelRecord("x", 0, 1, 0).to_json()]
                                           * (WINDOW_MAX_KERNELS + 1)), *ls[1:]], "at most 256"),
    "time running backwards": (lambda ls, no: [_with(ls[0], kernels=[KernelRecord("x", 9, 1, 0).to_json()]),
                                               *ls[1:]], "ends (1 ns) before it starts (9 ns)"),
    "reordered": (lambda ls, no: [ls[1], ls[0], ls[2]], "invocation 1, expected 0"),
    "one dropped": (lambda ls, no: ls[:2], "recorded 2 invocation(s) of sigmoid(x), the harness made 3"),
    "one added": (lambda ls, no: [*ls, ls[-1]], "more records than the 3 invocation(s)"),
    "cut short": (lambda ls, no: [*ls[:2], ls[2][:-1]], "cut short"),
    "giant line": (lambda ls, no: [ls[0][:-1] + b" " * TRACE_MAX_LINE_BYTES + b"\n", *ls[1:]], "longer than"),
    "an emulator launch record": (lambda ls, no: [b'{"record": "launch", "kernel": "k"}\n', *ls[1:]],
                                  "not a window record"),
    "cnpapi switched off midway": (lambda ls, no: [ls[0], no[1], ls[2]], "available for some invocations"),
    "no record at all": (None, "left no readable record"),
}


@pytest.mark.slow
def test_every_altered_record_is_an_integrity_finding(built, tmp_path):
    lines = real_lines(built, tmp_path / "with")
    without = real_lines(built, tmp_path / "without", cnpapi=False)
    assert KernelWindow.from_line(lines[0][:-1]).kernels  # the unaltered lines are well formed
    for name, (alter, finding) in ATTACKS.items():
        trace = tmp_path / f"{name.replace(' ', '_')}.trace.jsonl"
        if alter is not None:
            trace.write_bytes(b"".join(alter(lines, without)))
        use = judge(built, trace, invocations=3, timed=2)
        assert len(use.findings) == 1 and finding in use.findings[0], (name, use.findings)
        assert use.device_us == [], name  # nothing of a call that does not add up is timed


# -- through the host's reader and judge, as a grading on the mlu backend reads a call --------------------------
MLU = ResolvedBackend(name="mlu", device="0", impl=MluBackend())
SPEC = load_assignment("sigmoid")
SEEDS = SeedPlan.create("public")


def sandbox_call(built: dict, folder: Path, call: PlannedCall, **driver) -> tuple:
    """What the worker leaves for `call`: the result JSON, the right output, the driver's records."""
    outputs = folder / "outputs"
    outputs.mkdir(parents=True)
    expected = REFERENCES[SPEC.reference].compute(*call.case.reference_inputs(call.case.make_inputs()))
    np.save(outputs / f"{call.id}.npy", expected.astype(call.case.dtype), allow_pickle=False)
    # The harness's own claim of the timed figures: the host uses the driver's records instead.
    write_result(outputs, call.id, CallResult(ok=True, device_us=[0.001] * call.timed_repeats,
                                              trace=f"{call.id}.trace.jsonl"))
    trace, = drive(built, folder, {"invocations": call.invocations, **driver})
    trace.rename(outputs / f"{call.id}.trace.jsonl")
    facts = HostFacts(device="0", profile=None, symbols=built["symbols"])
    got, _ = read_call(call, outputs, RunOutcome(exit_code=0), SPEC, MLU, facts, None)
    return got, judge_call(SPEC, call.entry, call.case, got, expected, kernel_trace=False)


@pytest.mark.slow
def test_a_grading_on_the_mlu_backend_reads_kernel_use_and_device_time(built, tmp_path):
    case = correctness_cases(SPEC, SEEDS)[0]
    honest, result = sandbox_call(built, tmp_path / "honest", PlannedCall(id="c0", entry="sigmoid", case=case))
    assert result.verdict == Verdict.PASSED and not honest.integrity_notes
    torch_only, result = sandbox_call(built, tmp_path / "torch", PlannedCall(id="c0", entry="sigmoid", case=case),
                                      name="cnnlActivationForward")
    assert result.verdict == Verdict.NOT_USING_KERNEL and not result.passed
    assert "CNPAPI saw no kernel of your extension during sigmoid(x); it saw: cnnlActivationForward" \
        in result.message
    stage = SPEC.stages[0].name
    timed = PlannedCall(id="p1", entry="sigmoid", case=perf_case(SPEC, stage, SEEDS), stage=stage,
                        warmup=MluBackend.warmup, timed_repeats=MluBackend.timed_repeats)
    # 20 launches: 21.5 µs of the extension's kernels, above the 2^20-element floor (20.5 µs on the fastest card)
    got, result = sandbox_call(built, tmp_path / "timed", timed, launches=20)
    assert result.passed and got.meta["device_us"] == [21.5] * MluBackend.timed_repeats  # not the claimed 0.001
    assert got.kernels is not None and got.kernels.kernel_count == 20 * timed.invocations
    unverified, result = sandbox_call(built, tmp_path / "nocnpapi", timed, cnpapi=False)
    assert result.passed and "flagged for review" in unverified.integrity_notes[0]


# -- time conservation: the extension's kernels must be busy as long as the work takes at the roofline -------------
# The decoy on a card: one trivial kernel of the extension (the stand-in's 2.5 µs record, as the real driver writes
# it) while torch.matmul's cnnlMatMul does the work. The perf shape of the multi-core stages, 16384x256x128 fp32.
MATMUL = {"a": (16384, 256), "b": (256, 128)}
MATMUL_WORK = REFERENCES["matmul"].work(MATMUL, 4)


def with_foreign(lines: list[bytes], name: str, duration_us: float) -> list[bytes]:
    """Each window gains a kernel CNPAPI reports on the same queue after the listed ones, as it would report the
    cnnl kernel a torch_mlu op launches beside the extension's."""
    out = []
    for line in lines:
        data = json.loads(line)
        after = max((k["end_ns"] for k in data["kernels"]), default=0) + 1000
        data["kernels"].append(KernelRecord(name, after, after + round(duration_us * 1000), 3).to_json())
        out.append(json.dumps(data).encode() + b"\n")
    return out


def judge_matmul(built: dict, lines: list[bytes], folder: Path, device: str = "0", invocations: int = 14):
    trace = folder / "matmul.trace.jsonl"
    trace.write_bytes(b"".join(lines))
    floor = work_floor(MATMUL_WORK, "float32", device, MATMUL)
    use = read_kernel_use(trace, folder, invocations=invocations, timed=10, symbols=built["symbols"],
                          during="matmul(a, b)", floor=floor)
    return use, floor


def test_the_floor_is_the_host_roofline_of_the_chosen_card_or_the_fastest_in_the_table():
    x8 = work_floor(MATMUL_WORK, "float32", "mlu370-x8", MATMUL)
    assert x8.us == pytest.approx(25_296_896 / 307.2e3) and x8.device == "mlu370-x8"  # operands once at 307.2 GB/s
    card = work_floor(MATMUL_WORK, "float32", "0", MATMUL)  # an MLU card index: the model is unknown to the host
    assert card.us == pytest.approx(2 * 16384 * 256 * 128 / 15974.4e3)  # mlu370-m8's fp32 tensor peak: 67.2 µs
    assert card.device.startswith("mlu370-m8, the fastest card") and card.shapes == "a 16384x256, b 256x128 (float32)"
    assert card.bound_us == pytest.approx(FLOOR_TOLERANCE * card.us - CLOCK_SLACK_US)


@pytest.mark.slow
def test_a_decoy_kernel_beside_cnnl_matmul_is_integrity_and_says_what_did_not_add_up(built, tmp_path):
    decoy = with_foreign(real_lines(built, tmp_path / "drv", invocations=14), "cnnlMatMul_v2", 118.0)
    use, floor = judge_matmul(built, decoy, tmp_path)
    assert use.missing is None  # a kernel of the extension ran: the kernel-name rule alone lets the decoy through
    assert len(use.findings) == 1 and use.device_us == []
    assert use.findings[0] == (
        "your kernels ran 2.5 µs during matmul(a, b) (invocation 1 of 14); with a 16384x256, b 256x128 (float32) "
        f"that work cannot take less than 67.2 µs on {floor.device} (the roofline floor; judged below 55.5 µs); "
        "in the same invocation CNPAPI saw cnnlMatMul_v2 (118.0 µs): the work was done by kernels that are not "
        "your extension's")
    on_x8, _ = judge_matmul(built, decoy, tmp_path, device="mlu370-x8")  # a card the table knows: its own floor
    assert "cannot take less than 82.3 µs on mlu370-x8 (the roofline floor; judged below 69.1 µs)" \
        in on_x8.findings[0]


@pytest.mark.slow
def test_an_honest_tiled_matmul_above_the_floor_passes_beside_a_foreign_fill(built, tmp_path):
    # One launch per 128-row tile: 128 records 1 µs apart, 2.5 µs each -> 129.5 µs busy (overlaps counted once),
    # and a 3 µs fill kernel of torch_mlu (an output zeroed before the kernel runs) in the same invocation.
    honest = with_foreign(real_lines(built, tmp_path / "drv", invocations=14, launches=128), "cnnlFill_v3", 3.0)
    use, _ = judge_matmul(built, honest, tmp_path)
    assert (use.findings, use.missing) == ([], None)
    assert use.device_us == [133.5] * 10  # the stage time is the span: the tiles, a 1 µs gap, the fill


@pytest.mark.slow
def test_the_tolerance_is_what_it_says(built, tmp_path):
    # bound 0.9 * 67.2 - 5 = 55.5 µs; n launches are n + 1.5 µs busy
    above = with_foreign(real_lines(built, tmp_path / "above", invocations=14, launches=55), "cnnlMatMul_v2", 118.0)
    below = with_foreign(real_lines(built, tmp_path / "below", invocations=14, launches=53), "cnnlMatMul_v2", 118.0)
    assert judge_matmul(built, above, tmp_path)[0].findings == []
    assert "your kernels ran 54.5 µs" in judge_matmul(built, below, tmp_path)[0].findings[0]


@pytest.mark.slow
def test_a_time_below_the_floor_with_no_other_kernel_is_impossible(built, tmp_path):
    # Honest lines of one call where only the last timed invocation is below the floor: judged per invocation.
    lines = real_lines(built, tmp_path / "drv", invocations=13, launches=128)
    lines += [_with(real_lines(built, tmp_path / "last", invocations=1)[0], invocation=13)]
    use, _ = judge_matmul(built, lines, tmp_path)
    assert len(use.findings) == 1 and "(invocation 14 of 14)" in use.findings[0]
    assert use.findings[0].endswith("and no other kernel ran: that time is impossible (the device's records or "
                                    "clock were altered, or your kernels skipped the work in this invocation)")


@pytest.mark.slow
def test_small_shapes_unlisted_kernels_and_no_cnpapi_are_not_judged(built, tmp_path):
    decoy = with_foreign(real_lines(built, tmp_path / "drv", invocations=1), "cnnlMatMul_v2", 118.0)
    trace = tmp_path / "small.trace.jsonl"
    trace.write_bytes(b"".join(decoy))
    lab = {"a": (128, 256), "b": (256, 128)}  # the single-core stages' shape: a floor of about 2 µs
    small = work_floor(REFERENCES["matmul"].work(lab, 4), "float32", "mlu370-x8", lab)
    assert small.us < 10
    use = read_kernel_use(trace, tmp_path, invocations=1, timed=0, symbols=built["symbols"], during="matmul(a, b)",
                          floor=small)
    assert use.findings == []
    # More kernels than a window lists: the unlisted ones may be the student's, their time unknown.
    flooded = [_with(line, dropped=1) for line in decoy]
    assert judge_matmul(built, flooded, tmp_path, invocations=1)[0].findings == []
    without = real_lines(built, tmp_path / "none", invocations=14, cnpapi=False)
    use, _ = judge_matmul(built, without, tmp_path)
    assert use.findings == [] and use.unverified


@pytest.mark.mlu
@pytest.mark.skipif(not mlu_card(), reason="needs an MLU card (/dev/cambricon_dev*) and torch_mlu")
def test_the_driver_on_a_card_records_torch_kernels_as_not_the_extensions(tmp_path):
    import torch
    import torch_mlu  # noqa: F401
    from bang_harness.mlu_driver import mlu_driver

    driver, note = mlu_driver(int(torch.mlu.current_stream().mlu_stream))
    x = torch.randn(1 << 20).to("mlu")
    trace = tmp_path / "c0.trace.jsonl"
    for _ in range(3):
        _, timing = driver.measure(lambda: torch.sigmoid(x), trace.name)
        with trace.open("ab") as fh:
            fh.write(timing.window.to_line())
    use = read_kernel_use(trace, tmp_path, invocations=3, timed=2, symbols=KernelSymbols(frozenset({"mine"})),
                          during="sigmoid(x)")
    assert not use.findings and len(use.device_us) == 2 and min(use.device_us) > 0
    if use.cnpapi:  # torch's own sigmoid kernel ran, not one of "the extension"
        assert use.missing and "it saw:" in use.missing, note
    else:
        assert "could not be verified" in use.unverified, note
