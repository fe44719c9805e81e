"""Points: correctness per case group, performance per stage (gated on a fully correct entry)."""

from __future__ import annotations

from dataclasses import dataclass

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
        scores.append(GroupScore(name=group.name, description=group.description, points=round(group.points * fraction, 4),
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
        return StageDecision(0.0, worst.verdict, f"not correct yet ({len(failed)} case(s) fail: {names})")
    unmet = [r for r in requirements if not r.passed]
    if unmet:
        text = "; ".join(f"{r.description} ({r.detail})" if r.detail else r.description for r in unmet)
        # The answer is right but the stage's technique is missing: its speed points are not earned.
        return StageDecision(0.0, Verdict.TOO_SLOW, f"requirement not met: {text}")
    if timing is None:
        return StageDecision(0.0, Verdict.INTERNAL_ERROR, "no timing was recorded")
    if timing.below_floor:
        return StageDecision(0.0, Verdict.TOO_SLOW,
                             f"time {timing.median_us:.4g} us is below the roofline floor {timing.floor_us:.4g} us "
                             "(physically impossible): flagged, not rewarded")
    if threshold is None:
        return StageDecision(0.0, Verdict.PASSED, threshold_note or "speed not graded: no threshold for this "
                             "backend/device (run `grade calibrate`)")
    if timing.median_us <= threshold.threshold_us:
        return StageDecision(stage.points, Verdict.PASSED,
                             f"{timing.median_us:.4g} us <= threshold {threshold.threshold_us:.4g} us")
    return StageDecision(0.0, Verdict.TOO_SLOW,
                         f"{timing.median_us:.4g} us > threshold {threshold.threshold_us:.4g} us "
                         f"({timing.median_us / threshold.threshold_us:.2f}x)")
