"""Scoring: each call judged against the host's float64 reference, each stage's result (correctness, structural
requirements, time against its threshold, the next hint), integrity failures costing their entry every point."""

from __future__ import annotations

import numpy as np

from grader.checks.requirements import check_requirements
from grader.i18n import _
from grader.orchestration.environment import ResolvedBackend
from grader.orchestration.judge import CallOutcome, judge_call, modelled_samples, passes_on_the_run
from grader.orchestration.plan import PlannedCall
from grader.results import (
    CaseResult,
    RequirementResult,
    StageResult,
    Timing,
    TraceSummary,
    Verdict,
    verdict_label,
)
from grader.scoring import StageThreshold, ThresholdTable, decide_stage, summarise
from grader.spec import REFERENCES, AssignmentSpec, ConcreteCase, StageSpec


class Scorer:
    def __init__(self, spec: AssignmentSpec, backend: ResolvedBackend) -> None:
        self.spec = spec
        self.backend = backend

    def expected(self, case: ConcreteCase) -> np.ndarray:
        # Several entries (and a batch worker's every submission) run the same case: computed once, kept.
        return case.expected(self.spec.reference)

    def judge(self, call: PlannedCall, got: CallOutcome) -> CaseResult:
        expected = self.expected(call.case) if (got.meta or {}).get("ok") and got.output is not None else None
        return judge_call(self.spec, call.entry, call.case, got, expected, kernel_trace=self.backend.impl.kernel_trace)

    def judge_run(self, call: PlannedCall, got: CallOutcome) -> CaseResult:
        """A call read from the run alone, judged on what the run can show (judge.passes_on_the_run)."""
        expected = self.expected(call.case) if (got.meta or {}).get("ok") and got.output is not None else None
        return passes_on_the_run(self.spec, call.entry, call.case, got, expected)

    def entry_correct(self, perf_call: PlannedCall, judged: dict[str, CaseResult]) -> bool:
        """Whether the timed call's entry passed every visible case of the groups gating its stage. Hidden
        (after_deadline) groups do not decide it: a stage failing only those is timed too (it scores nothing
        all the same), so before the release the course server shows it as a correct stage is shown, time and
        leaderboard place included, and the hidden failure stays hidden."""
        assert perf_call.stage is not None
        groups = self.spec.gating_groups(self.spec.stage(perf_call.stage)) - self.spec.hidden_groups()
        mine = [r for r in judged.values() if r.entry == perf_call.entry and r.group in groups]
        return bool(mine) and all(r.passed for r in mine)

    def stage_result(self, call: PlannedCall, judged: dict[str, CaseResult], got: CallOutcome | None,
                     samples: list[float], thresholds: ThresholdTable | None) -> StageResult:
        assert call.stage is not None
        backend = self.backend
        stage = self.spec.stage(call.stage)
        groups = self.spec.gating_groups(stage)
        correctness = [r for c_id, r in judged.items() if r.entry == call.entry and (r.group in groups or c_id == call.id)]
        trace = got.trace.summary(call.invocations, backend.device) if got and got.trace else None
        requirements = check_requirements(stage.requirements, trace, backend.impl.kernel_trace)
        samples, note = modelled_samples(backend.time_source, samples, trace)
        timing: Timing | None = None
        work = REFERENCES[self.spec.reference].work(call.case.shapes, np.dtype(call.case.dtype).itemsize)
        if samples:
            timing = summarise(samples, backend.time_source, work, call.case.dtype, backend.device)
        threshold = thresholds.stages.get(stage.name) if thresholds is not None else None
        if threshold is not None and threshold.perf_dims and threshold.perf_dims != dict(stage.perf.dims):
            threshold, note = None, note + _("speed not graded: the thresholds were calibrated on another perf "
                                             "shape; run `grade calibrate`")
        return stage_result(self.spec, stage, call.entry, correctness, requirements, timing, threshold, note,
                            {k: list(v) for k, v in call.case.shapes.items()}, trace)


def stage_result(spec: AssignmentSpec, stage: StageSpec, entry: str, correctness: list[CaseResult],
                 requirements: list[RequirementResult], timing: Timing | None, threshold: StageThreshold | None,
                 note: str, perf_shape: dict[str, list[int]], trace: TraceSummary | None,
                 title: str | None = None) -> StageResult:
    """One stage's result under the one points rule (scoring.decide_stage): an extension's entry and a lab
    program (orchestration/programs.py) alike."""
    decision = decide_stage(stage, correctness, requirements, timing, threshold, note)
    return StageResult(
        name=stage.name, title=title or _(stage.title), entry=entry, points=decision.points,
        points_possible=stage.points, correct=all(r.passed for r in correctness), verdict=decision.verdict,
        message=decision.message, perf_shape=perf_shape, timing=timing,
        threshold_us=threshold.threshold_us if threshold else None,
        reference_us=threshold.reference_us if threshold else None,
        requirements=requirements, trace=trace,
        next_step=next_step(spec, stage.name, decision.verdict == Verdict.PASSED and decision.points > 0))


def next_step(spec: AssignmentSpec, stage: str, reached: bool) -> str | None:
    """Not reached: how to reach this stage. Reached: how to reach the next one (None after the last)."""
    names = [s.name for s in spec.stages]
    if not reached:
        hint = spec.stage(stage).hint
    else:
        following = names.index(stage) + 1
        hint = spec.stages[following].hint if following < len(names) else None
    return _(hint) if hint else None  # assignment.toml's English is a msgid too (grader/spec/messages.py)


def apply_integrity(calls: list[PlannedCall], outcomes: dict[str, CallOutcome], judged: dict[str, CaseResult],
                    cases: list[CaseResult], stages: list[StageResult]) -> list[str]:
    """A call whose claims do not add up costs its whole entry every point: cases and stages alike (updated in
    place). Returns the integrity findings for the record."""
    failed: dict[str, str] = {}
    lines: list[str] = []
    for call in calls:
        got = outcomes.get(call.id)
        if got is None:
            continue
        # Coverage shortfalls count only where judging found the output right all the same (judge_call);
        # beside other findings they are shown too, since they say what the kernels really did.
        forged_coverage = call.id in judged and judged[call.id].verdict == Verdict.INTEGRITY
        findings = got.integrity + got.coverage if got.integrity else (got.coverage if forged_coverage else [])
        if not findings:
            continue
        label = _("stage {name}").format(name=call.stage) if call.stage else _("case {name}").format(
            name=call.case.name)
        failed.setdefault(call.entry, label)
        lines += [f"{call.entry}(), {label}: {finding}" for finding in findings]
    for i, case in enumerate(cases):
        if case.entry in failed and case.passed:
            cases[i] = case.model_copy(update={
                "verdict": Verdict.INTEGRITY, "passed": False,
                "message": _("no points for {entry}(): the sandbox's claims for its {what} do not add up (see "
                             "integrity)").format(entry=case.entry, what=failed[case.entry])})
    for i, stage in enumerate(stages):
        if stage.entry in failed:
            stages[i] = stage.model_copy(update={
                "verdict": Verdict.INTEGRITY, "points": 0.0,
                "message": _("no points for {entry}(): the sandbox's claims for its {what} do not add up (see "
                             "integrity)").format(entry=stage.entry, what=failed[stage.entry])})
    caught = [(call, judged[call.id]) for call in calls if call.id in judged and judged[call.id].verdict in CAUGHT]
    if caught:
        call, result = caught[0]
        what = _("stage {name}").format(name=call.stage) if call.stage else _("case {name}").format(name=call.case.name)
        line = withhold_speed_points(call.entry, what, result.verdict, stages)
        lines += [line] if not failed else []
    return lines


# Verdicts that say the submission computed without its kernels (a cached answer for a repeated shape, a host
# fallback, records that do not add up): caught once is caught (withhold_speed_points).
CAUGHT = (Verdict.NOT_USING_KERNEL, Verdict.INTEGRITY)


def withhold_speed_points(entry: str, what: str, verdict: Verdict, stages: list[StageResult]) -> str:
    """Caught once is caught: a submission caught on one call or program (`what`, judged `verdict`, one of
    CAUGHT) earns no speed points in any stage (updated in place), and the grading is flagged for review: the
    line for its record (GradeResult.integrity)."""
    for i, stage in enumerate(stages):
        if stage.points > 0 or stage.verdict == Verdict.PASSED:
            stages[i] = stage.model_copy(update={
                "verdict": verdict, "points": 0.0,
                "message": _("no speed points: {entry}() was caught on its {what} ({verdict}); every stage's "
                             "speed points are withheld and the grading is flagged for review").format(
                    entry=entry, what=what, verdict=verdict_label(verdict))})
    return _("{entry}(), {what}: {verdict}, so no stage earns speed points (flagged for review)").format(
        entry=entry, what=what, verdict=verdict_label(verdict))


def summary_line(verdict: Verdict, cases: list[CaseResult], stages: list[StageResult]) -> str:
    correct = sum(c.passed for c in cases)
    reached = sum(s.verdict == Verdict.PASSED and s.points >= s.points_possible for s in stages)
    head = _("all checks passed") if verdict == Verdict.PASSED else _("verdict {verdict}").format(
        verdict=verdict_label(verdict))
    return _("{head}: {correct}/{cases} cases correct, {reached}/{stages} stages reached").format(
        head=head, correct=correct, cases=len(cases), reached=reached, stages=len(stages))
