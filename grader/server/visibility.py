"""What a student may see of a result before the hidden groups are released (Gradescope's hidden tests): the
cases of groups with `visibility = "after_deadline"` (assignment.toml) are dropped, and so is what they decide:
their groups' points, the stages' points (gated by every gating group), and a verdict or stage decision earned
on them, which is decided again on the visible cases by the same rule (scoring.decide_stage, the pipeline's
`worst`). A stage whose only failures are hidden was timed all the same (score_stages.entry_correct), so it
reads as a correct stage does. The instructor, and the student after the release, see the whole result; the
grading itself never changes."""

from __future__ import annotations

from functools import cache

from grader.results import GradeResult, StageResult, Verdict, worst
from grader.scoring.points import decide_stage
from grader.scoring.thresholds import StageThreshold

# Verdicts a case earns; any other overall verdict (build, layout, integrity, too slow) does not depend on
# which cases are shown and stays as it is.
CASE_VERDICTS = frozenset({Verdict.TIMEOUT, Verdict.CRASH, Verdict.RUNTIME_ERROR, Verdict.WRONG_ANSWER})


@cache
def hidden_groups(assignment: str) -> frozenset[str]:
    """The groups of `assignment` shown after the deadline (or the instructor's release) only."""
    from grader.spec import load_assignment

    return load_assignment(assignment).hidden_groups()


def _decided_again(assignment: str, stage: StageResult, visible: list) -> StageResult:  # noqa: ANN001
    """`stage` decided on its entry's visible cases of its gating groups, as score_stages decides it."""
    from grader.orchestration.score_stages import next_step
    from grader.spec import load_assignment

    spec = load_assignment(assignment)
    stage_spec = spec.stage(stage.name)
    gating = spec.gating_groups(stage_spec)
    correctness = [c for c in visible if c.entry == stage.entry and c.group in gating]
    threshold = None if stage.threshold_us is None else StageThreshold(stage.reference_us or 0.0, stage.threshold_us,
                                                                      {})
    decision = decide_stage(stage_spec, correctness, stage.requirements, stage.timing, threshold)
    reached = decision.verdict == Verdict.PASSED and decision.points > 0
    return stage.model_copy(update={"verdict": decision.verdict, "message": decision.message,
                                    "correct": all(c.passed for c in correctness),
                                    "next_step": next_step(spec, stage.name, reached)})


def redact_hidden(result: GradeResult, hidden: frozenset[str], note: str) -> GradeResult:
    """`result` as a student sees it before the release: the visible groups' cases and points only. `note`
    says when the rest is shown."""
    if not hidden or not any(c.group in hidden for c in result.cases) and not any(g.name in hidden
                                                                                     for g in result.groups):
        return result
    cases = [c for c in result.cases if c.group not in hidden]
    groups = [g for g in result.groups if g.name not in hidden]
    # A stage (and the overall verdict) is decided again only when a hidden case failed (it may be where its
    # verdict came from); one no case earned (a build that timed out, a crash before any case) stays as it is.
    hidden_failed = {c.entry for c in result.cases if c.group in hidden and not c.passed}
    stages = []
    for stage in result.stages:
        if stage.verdict in CASE_VERDICTS and stage.entry in hidden_failed:
            stage = _decided_again(result.assignment, stage, cases)
        stages.append(stage.model_copy(update={"points": 0.0, "points_possible": 0.0}))
    verdict = result.verdict
    if verdict in CASE_VERDICTS and hidden_failed:
        verdict = worst([c.verdict for c in cases] + [s.verdict for s in stages])
    return result.model_copy(update={
        "cases": cases, "groups": groups, "stages": stages, "verdict": verdict,
        "score": sum(g.points for g in groups), "max_score": sum(g.points_possible for g in groups),
        "pending_points": round(result.max_score - sum(g.points_possible for g in groups), 2),
        "message": "\n".join(m for m in (result.message, note) if m)})
