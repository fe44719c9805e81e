"""Judging one call: what the sandbox sent back (result JSON, raw output, launch trace) -> a CaseResult.

Everything here is host-side and treats the sandbox's files as untrusted data: only the raw output array is
compared with the host's own float64 reference; the harness's error kinds only choose the verdict's name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from grader.checks import compare
from grader.orchestration.trace_summary import diagnostics_of
from grader.results import CaseResult, TraceSummary, Verdict
from grader.spec import AssignmentSpec, ConcreteCase

# How the harness names a failed call (bang_harness.job.ErrorKind) -> the verdict it earns.
ERROR_VERDICTS = {
    "python_exception": Verdict.RUNTIME_ERROR,
    "emulator_error": Verdict.RUNTIME_ERROR,
    "bad_output": Verdict.WRONG_ANSWER,
    "crash": Verdict.CRASH,
    "timeout": Verdict.TIMEOUT,
    "harness_error": Verdict.INTERNAL_ERROR,
}
# An entry failing its first call with one of these fails every call the same way (bang_harness.worker).
LOAD_FAILURES = ("cannot import the submission", "while loading the extension", "cannot activate the")
MESSAGE_CHARS = 8000


@dataclass
class CallOutcome:
    meta: dict[str, Any] | None
    output: np.ndarray | None = None
    trace: list[dict[str, Any]] = field(default_factory=list)
    read_error: str | None = None


def judge_call(spec: AssignmentSpec, entry: str, case: ConcreteCase, got: CallOutcome, expected: np.ndarray | None,
               kernel_trace: bool) -> CaseResult:
    """`kernel_trace`: the backend records kernel launches (emu), so "no launch" is detectable."""
    base = {"name": case.name, "group": case.group, "entry": entry, "dtype": case.dtype,
            "shapes": {k: list(v) for k, v in case.shapes.items()}}
    meta = got.meta or {}
    diagnostics = diagnostics_of(got.trace)
    if not meta.get("ok"):
        verdict = ERROR_VERDICTS.get(str(meta.get("error_kind")), Verdict.RUNTIME_ERROR)
        message = str(meta.get("error") or "the call failed")[:MESSAGE_CHARS]
        if verdict == Verdict.CRASH and meta.get("lost"):
            message = f"no result for this call: {message}"
        return CaseResult(**base, verdict=verdict, passed=False, message=message, diagnostics=diagnostics)
    if kernel_trace and not got.trace:
        return CaseResult(**base, verdict=Verdict.NOT_USING_KERNEL, passed=False, diagnostics=diagnostics,
                          message="the wrapper computed the result without launching a kernel "
                                  "(no BANG kernel ran during the call)")
    if got.output is None or expected is None:
        return CaseResult(**base, verdict=Verdict.WRONG_ANSWER, passed=False,
                          message=got.read_error or "no output array was returned")
    outcome = compare(got.output, expected, case.dtype, spec.tolerances[case.dtype], spec.checks)  # type: ignore[index]
    message, passed = outcome.message, outcome.passed
    if passed and meta.get("repeats_consistent") is False:
        passed, message = False, "repeated calls on the same inputs returned different results"
    m = outcome.metrics
    return CaseResult(**base, verdict=Verdict.PASSED if passed else Verdict.WRONG_ANSWER, passed=passed,
                      diff1=m.get("diff1"), diff2=m.get("diff2"), diff3=m.get("diff3"),
                      max_abs_error=m.get("diff3_2"), unwritten_fraction=outcome.unwritten_fraction,
                      nan_inf_mismatch=outcome.nan_inf_mismatch, mismatches=outcome.mismatches,
                      message=message, diagnostics=diagnostics)


def dooms_entry(outcome: CallOutcome) -> bool:
    """Whether an entry's first failure (a hang, or failing to load) means its other calls need not run."""
    meta = outcome.meta or {}
    if meta.get("ok"):
        return False
    error = str(meta.get("error", ""))
    return meta.get("error_kind") == "timeout" or any(m in error for m in LOAD_FAILURES)


def call_samples(meta: dict[str, Any] | None, source: str) -> list[float]:
    """The call's timing samples in µs: device time, or the host clock where the backend has none."""
    if not meta or not meta.get("ok"):
        return []
    key = "wall_us" if source == "host_clock" else "device_us"
    values = meta.get(key) or []
    # Untrusted numbers: only finite, positive floats count (the roofline floor bounds them from below).
    return [float(v) for v in values if isinstance(v, int | float) and not isinstance(v, bool)
            and np.isfinite(v) and v > 0][:10_000]


def modelled_samples(source: str, reported: list[float], trace: TraceSummary | None) -> tuple[list[float], str]:
    """On the emulator the stage time is the runtime's trace, never the harness's own clocks.

    The harness runs inside the student's process, where `time.perf_counter` or `torch.mlu.Event` can be
    patched; the emulator runtime writes each launch's modelled time to the trace itself. A disagreement is
    reported, and the trace wins.
    """
    if source != "modelled" or trace is None:
        return reported, ""
    modelled = trace.modelled_time_us
    note = ""
    if reported and not all(abs(r - modelled) <= 0.01 * modelled + 1e-3 for r in reported):
        note = (f"the in-process timer reported {min(reported):.3f} µs but the emulator traced "
                f"{modelled:.3f} µs; the traced time is used. ")
    return [modelled] * max(1, len(reported)), note
