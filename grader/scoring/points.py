"""Points: correctness per case group, performance per stage (gated on a fully correct entry)."""

from __future__ import annotations

from dataclasses import dataclass

from grader.i18n import _
from grader.results import CaseResult, GroupScore, RequirementResult, Timing, Verdict
from grader.scoring.thresholds import StageThreshold
from grader.spec.models import AssignmentSpec, StageSpec


def group_scores(spec: AssignmentSpec, cases: list[CaseResult]) -> list[GroupScore]:
    scores = []
    for group in spec.groups:
        runs = [c for c in cases if c.group == group.name]
        passed = sum(c.passed for c in runs)
        if not runs:
            fraction = 0.0
        elif group.scoring == "all_or_nothing":
            fraction = 1.0 if passed == len(runs) else 0.0
        else:
            fraction = passed / len(runs)
        scores.append(GroupScore(name=group.name, description=_(group.description), points=round(group.points * fraction, 4),
                                 points_possible=group.points, passed_cases=passed, total_cases=len(runs)))
    return scores


@dataclass(frozen=True)
class StageDecision:
    points: float
    verdict: Verdict
    message: str


def decide_stage(stage: StageSpec, correctness: list[CaseResult], requirements: list[RequirementResult],
                 timing: Timing | None, threshold: StageThreshold | None, threshold_note: str = "") -> StageDecision:
    """Perf points need: every case of the entry passed, every requirement met, a trusted time under the threshold."""
    failed = [c for c in correctness if not c.passed]
    if failed:
        worst = min(failed, key=lambda c: c.verdict.severity)
        names = ", ".join(c.name for c in failed[:3]) + (" ..." if len(failed) > 3 else "")
        return StageDecision(0.0, worst.verdict, _("not correct yet ({n} case(s) fail: {names})").format(
            n=len(failed), names=names))
    unmet = [r for r in requirements if not r.passed]
    if unmet:
        text = "; ".join(f"{r.description} ({r.detail})" if r.detail else r.description for r in unmet)
        # The answer is right but the stage's technique is missing: its speed points are not earned.
        return StageDecision(0.0, Verdict.TOO_SLOW, _("requirement not met: {text}").format(text=text))
    if timing is None:
        return StageDecision(0.0, Verdict.INTERNAL_ERROR, _("no timing was recorded"))
    if timing.below_floor:
        return StageDecision(0.0, Verdict.TOO_SLOW,
                             _("time {time:.4g} us is below the roofline floor {floor:.4g} us (physically "
                               "impossible): flagged, not rewarded").format(time=timing.median_us,
                                                                           floor=timing.floor_us))
    if threshold is None:
        return StageDecision(0.0, Verdict.PASSED, threshold_note or _("speed not graded: no threshold for this "
                                                                      "backend/device (run `grade calibrate`)"))
    if timing.median_us <= threshold.threshold_us:
        return StageDecision(stage.points, Verdict.PASSED,
                             _("{time:.4g} us <= threshold {threshold:.4g} us").format(
                                 time=timing.median_us, threshold=threshold.threshold_us))
    return StageDecision(0.0, Verdict.TOO_SLOW,
                         _("{time:.4g} us > threshold {threshold:.4g} us ({ratio:.2f}x)").format(
                             time=timing.median_us, threshold=threshold.threshold_us,
                             ratio=timing.median_us / threshold.threshold_us))
