"""Judging one call: what the sandbox sent back (result JSON, raw output, launch trace) -> a CaseResult.

Everything here is host-side and treats the sandbox's files as untrusted data: only the raw output array is
compared with the host's own float64 reference; the harness's error kinds (bang_harness.protocol.ErrorKind,
values, never message text) only choose the verdict's name. A `harness_error` read from a file the student's
process could write is not believed: it becomes the student's runtime error. Only the host's own observation
of its runner (grader.orchestration.pipeline) can make an internal error.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from bang_harness.protocol import ErrorKind

from grader.checks import CheckOutcome, compare
from grader.checks.kernel_use import KernelUse
from grader.i18n import N_, _
from grader.orchestration.replay import ReplayedCall
from grader.orchestration.trace_summary import TraceReading
from grader.results import CaseResult, TraceSummary, Verdict
from grader.spec import AssignmentSpec, ConcreteCase

# How the harness names a failed call -> the verdict it earns.
ERROR_VERDICTS: dict[ErrorKind, Verdict] = {
    ErrorKind.PYTHON_EXCEPTION: Verdict.RUNTIME_ERROR,
    ErrorKind.LOAD_FAILURE: Verdict.RUNTIME_ERROR,
    ErrorKind.EMULATOR_ERROR: Verdict.RUNTIME_ERROR,
    ErrorKind.BAD_OUTPUT: Verdict.WRONG_ANSWER,
    ErrorKind.CRASH: Verdict.CRASH,
    ErrorKind.TIMEOUT: Verdict.TIMEOUT,
    ErrorKind.HARNESS_ERROR: Verdict.RUNTIME_ERROR,  # claimed in a file the student could write: not believed
}
MESSAGE_CHARS = 8000
# A call held for review: the WebAssembly engine's account would cost it points, the native replay's does not
DISAGREEMENT = N_("held for review, not a finding against your code: the grader replays your kernels in a confined "
                  "engine (WebAssembly), which said: {account}. Replayed natively on the same inputs, the same "
                  "kernels gave the right answer and nothing was found. The two replays disagree, which is the "
                  "grader's to resolve: the call earns nothing until your instructor has looked at it.")
NOT_BELIEVED = N_("the sandbox reported a fault of the grader's harness, but that report comes from a file the "
                   "submission's process could write, so it is not believed and counts as a runtime error: {error}")


def error_kind(meta: dict[str, Any]) -> ErrorKind | None:
    try:
        return ErrorKind(meta.get("error_kind"))
    except ValueError:
        return None


@dataclass
class CallOutcome:
    meta: dict[str, Any] | None
    output: np.ndarray | None = None
    trace: TraceReading | None = None
    read_error: str | None = None
    integrity: list[str] = field(default_factory=list)  # what did not add up (reader + integrity checks)
    coverage: list[str] = field(default_factory=list)  # output or work not covered by kernels (see judge_call)
    integrity_notes: list[str] = field(default_factory=list)  # checks that could not run, and why
    no_kernel: str | None = None  # mlu: why the host holds that no kernel of the extension ran (checks.kernel_use)
    kernels: KernelUse | None = None  # mlu: the timing driver's records of the call, as the host read them
    replayed: ReplayedCall | None = None  # emu: the trusted replay's output for the call's twin (replay.py)
    # emu: the WebAssembly engine's account of the call would cost it points (what it said), while the native
    # replay of the same journal on the same twin found nothing: held for review (DESIGN.md "Confinement by
    # construction", the disagreement policy), never credited and never an accusation
    disagreement: str | None = None
    # the run's output against the case's reference, once: replay_accuses and judge_call both read it
    run_check: tuple[np.ndarray, CheckOutcome] | None = field(default=None, repr=False)
    # emu, read from the run alone (before its replay): the launches the run's own process recorded (unsigned)
    run_launches: int | None = None


def judge_call(spec: AssignmentSpec, entry: str, case: ConcreteCase, got: CallOutcome, expected: np.ndarray | None,
               kernel_trace: bool) -> CaseResult:
    """`kernel_trace`: the backend records kernel launches (emu), so "no launch" is detectable."""
    base = {"name": case.name, "group": case.group, "entry": entry, "dtype": case.dtype,
            "shapes": {k: list(v) for k, v in case.shapes.items()}}
    meta = got.meta or {}
    diagnostics = got.trace.diagnostics if got.trace is not None else []
    if not meta.get("ok"):
        kind = error_kind(meta)
        verdict = ERROR_VERDICTS.get(kind, Verdict.RUNTIME_ERROR) if kind is not None else Verdict.RUNTIME_ERROR
        message = str(meta.get("error") or _("the call failed"))[:MESSAGE_CHARS]
        if kind == ErrorKind.HARNESS_ERROR:
            message = _(NOT_BELIEVED).format(error=message)
        if verdict == Verdict.CRASH and meta.get("lost"):
            message = _("no result for this call: {error}").format(error=message)
        return CaseResult(**base, verdict=verdict, passed=False, message=message, diagnostics=diagnostics)
    if got.disagreement is not None:
        plain = _run_check(spec, case, got, expected) if got.output is not None and expected is not None else None
        if plain is None or plain.passed:
            return CaseResult(**base, verdict=Verdict.HELD_FOR_REVIEW, passed=False, diagnostics=diagnostics,
                              message=_(DISAGREEMENT).format(account=got.disagreement)[:MESSAGE_CHARS])
        # wrong on the run's own inputs: judged on that alone, the engine's account set aside
        got = CallOutcome(meta=got.meta, output=got.output, trace=got.trace, read_error=got.read_error,
                          run_check=got.run_check)
    if got.integrity:
        return CaseResult(**base, verdict=Verdict.INTEGRITY, passed=False, diagnostics=diagnostics,
                          message=_("the sandbox's claims about this call do not add up: {findings}").format(
                              findings="; ".join(got.integrity)))
    if got.no_kernel is not None:
        return CaseResult(**base, verdict=Verdict.NOT_USING_KERNEL, passed=False, diagnostics=diagnostics,
                          message=got.no_kernel[:MESSAGE_CHARS])
    if kernel_trace and (got.trace is None or got.trace.launch_count == 0):
        return CaseResult(**base, verdict=Verdict.NOT_USING_KERNEL, passed=False, diagnostics=diagnostics,
                          message=_("the wrapper computed the result without launching a kernel "
                                    "(no BANG kernel ran during the call)"))
    if got.output is None or expected is None:
        return CaseResult(**base, verdict=Verdict.WRONG_ANSWER, passed=False,
                          message=got.read_error or _("no output array was returned"))
    outcome = _run_check(spec, case, got, expected)
    message, passed = outcome.message, outcome.passed
    if passed and meta.get("repeats_consistent") is False:
        passed, message = False, _("repeated calls on the same inputs returned different results")
    verdict = Verdict.PASSED if passed else Verdict.WRONG_ANSWER
    if passed and (replayed := twin_check(spec, case, got.replayed)) is not None:
        if not replayed.passed:
            # right on the run's inputs, wrong when the grader replays the kernels on inputs the run never saw
            if got.replayed.host_data:  # host code's data reached the output: unverifiable, named, not accused
                message = _("{where} reached the output: the grader replays your kernels and the torch work on the "
                            "device with fresh inputs of the same case, but not host code, so this output cannot be "
                            "credited to your kernels (replayed, it gave {outcome}). Do this step on the device."
                            ).format(where=got.replayed.host_data, outcome=replayed.message)
            else:
                message = _("the output is right, but your kernels did not compute it: replayed by the grader on "
                            "fresh inputs of the same case, they gave {outcome}").format(outcome=replayed.message)
            return CaseResult(**base, verdict=Verdict.INTEGRITY, passed=False, diagnostics=diagnostics,
                              message=message[:MESSAGE_CHARS])
    if got.coverage:
        # Kernels that wrote or did less than the output needs: an honest bug when the values are wrong
        # (a dropped tail still holds the poison), a forgery when they are right anyway.
        if passed:
            passed, verdict = False, Verdict.INTEGRITY
            message = _("the output is right, but not your kernels' work: {findings}").format(
                findings="; ".join(got.coverage))[:MESSAGE_CHARS]
        else:
            message = _("{message} ({details})").format(message=message,
                                                          details=_("; ").join(got.coverage))[:MESSAGE_CHARS]
    m = outcome.metrics
    return CaseResult(**base, verdict=verdict, passed=passed,
                      diff1=m.get("diff1"), diff2=m.get("diff2"), diff3=m.get("diff3"),
                      max_abs_error=m.get("diff3_2"), unwritten_fraction=outcome.unwritten_fraction,
                      nan_inf_mismatch=outcome.nan_inf_mismatch, findings=outcome.findings,
                      mismatches=outcome.mismatches,
                      message=message, diagnostics=diagnostics)


def check_run(spec: AssignmentSpec, case: ConcreteCase, got: CallOutcome) -> None:
    """The run's output compared with the case's reference now, kept on `got` (judge_call and replay_accuses read
    it): done while the replay runs (execute.py), not after it."""
    if (got.meta or {}).get("ok") and got.output is not None:
        _run_check(spec, case, got, case.expected(spec.reference))


def _run_check(spec: AssignmentSpec, case: ConcreteCase, got: CallOutcome, expected: np.ndarray) -> CheckOutcome:
    """The run's output against `expected`, kept on `got` with the array it was compared to."""
    if got.run_check is not None and got.run_check[0] is expected:
        return got.run_check[1]
    assert got.output is not None
    outcome = compare(got.output, expected, case.dtype, spec.tolerances[case.dtype], spec.checks)  # type: ignore[index]
    got.run_check = (expected, outcome)
    return outcome


def twin_check(spec: AssignmentSpec, case: ConcreteCase, replayed: ReplayedCall | None) -> CheckOutcome | None:
    """The replay's output for the call's twin against the reference on the twin's inputs (None: no output); kept
    on `replayed`, so the disagreement policy and the judge compare once."""
    if replayed is None or replayed.output is None:
        return None
    if replayed.twin_check is None:
        replayed.twin_check = compare(replayed.output, replayed.twin.expected(spec.reference), case.dtype,
                                      spec.tolerances[case.dtype], spec.checks)  # type: ignore[index]
    return replayed.twin_check


def replay_accuses(spec: AssignmentSpec, case: ConcreteCase, got: CallOutcome) -> str | None:
    """What the replay's account of a call the run finished holds against it, in a line (None: nothing), where
    judge_call would turn it into a verdict: its failure to replay the call or a finding on its trace (integrity),
    a torch operator's work (not_using_kernel) -- and, when the run's own output is right, kernels that wrote less
    than it, or a wrong answer on the twin (integrity). What a second opinion is asked about (execute.py, the
    disagreement policy); a run already wrong on its own inputs is judged so whatever the replay says."""
    if not (got.meta or {}).get("ok") or got.replayed is None or got.replayed.over_budget:
        return None
    if got.integrity:
        return "; ".join(got.integrity)
    if got.no_kernel is not None:
        return got.no_kernel
    if got.output is None or not _run_check(spec, case, got, case.expected(spec.reference)).passed:
        return None
    if got.coverage:
        return "; ".join(got.coverage)
    twin = twin_check(spec, case, got.replayed)
    if twin is not None and not twin.passed:
        return _("on fresh inputs of the same case it gave {outcome}").format(outcome=twin.message)
    return None


def passes_on_the_run(spec: AssignmentSpec, entry: str, case: ConcreteCase, got: CallOutcome,
                      expected: np.ndarray | None) -> CaseResult:
    """A call read from the run alone (no replay yet) judged on what the run can show: its output against the
    reference, and a kernel launch in the run's own records. Never stricter than judge_call with the replay: a
    call judge_call passes passes here (the replay only adds findings, and a run that recorded no launch is
    judged not_using_kernel, or integrity where the replay's launches differ), so the stages this passes are a
    superset of those judge_call's verdicts let be timed (policy.py times them beside the replay)."""
    result = judge_call(spec, entry, case, got, expected, kernel_trace=False)
    if result.passed and not got.run_launches:
        return result.model_copy(update={"passed": False, "verdict": Verdict.NOT_USING_KERNEL})
    return result


def dooms_entry(outcome: CallOutcome) -> bool:
    """Whether an entry's first failure (a hang, or failing to load) means its other calls need not run."""
    meta = outcome.meta or {}
    if meta.get("ok"):
        return False
    kind = error_kind(meta)
    return kind in (ErrorKind.TIMEOUT, ErrorKind.LOAD_FAILURE) or meta.get("during") == "load"


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
    if source != "modelled":
        return reported, ""
    if trace is None:  # no verified launch: nothing the in-process clocks say is believed
        return [], _("no verified launch records, so no modelled time.") + " "
    modelled = trace.modelled_time_us
    note = ""
    if reported and not all(abs(r - modelled) <= 0.01 * modelled + 1e-3 for r in reported):
        note = _("the in-process timer reported {reported:.3f} µs but the emulator traced {traced:.3f} µs; the "
                 "traced time is used.").format(reported=min(reported), traced=modelled) + " "
    return [modelled] * max(1, len(reported)), note
