"""What a student may see of a result before the deadline (Gradescope's hidden tests): the cases of groups with
`visibility = "after_deadline"` (assignment.toml) are dropped, and so is what they decide: their groups'
points, the stages' points (gated by every gating group) and a verdict earned on them. The instructor, and the
student after the deadline, see the whole result; the grading itself never changes."""

from __future__ import annotations

from functools import cache

from grader.i18n import _
from grader.results import GradeResult, Verdict

# Verdicts a case earns; any other overall verdict (build, layout, integrity, too slow) does not depend on
# which cases are shown and stays as it is.
CASE_VERDICTS = frozenset({Verdict.TIMEOUT, Verdict.CRASH, Verdict.RUNTIME_ERROR, Verdict.WRONG_ANSWER})


@cache
def hidden_groups(assignment: str) -> frozenset[str]:
    """The groups of `assignment` shown after the deadline only."""
    from grader.spec import load_assignment

    return frozenset(g.name for g in load_assignment(assignment).groups if g.visibility == "after_deadline")


def _worst(verdicts: list[Verdict]) -> Verdict:
    return min(verdicts, key=lambda v: v.severity) if verdicts else Verdict.PASSED


def redact_hidden(result: GradeResult, hidden: frozenset[str], shown_at: str) -> GradeResult:
    """`result` as a student sees it before the deadline: the visible groups' cases and points only.
    `shown_at` (a date for people) is when the rest is shown."""
    if not hidden or not any(c.group in hidden for c in result.cases) and not any(g.name in hidden
                                                                                     for g in result.groups):
        return result
    cases = [c for c in result.cases if c.group not in hidden]
    groups = [g for g in result.groups if g.name not in hidden]
    # A case verdict is recomputed from the visible cases only when a hidden case failed (it may be where the
    # verdict came from); one no case earned (a build that timed out, a crash before any case) stays as it is.
    hidden_failed = {c.entry for c in result.cases if c.group in hidden and not c.passed}
    verdict = result.verdict
    if verdict in CASE_VERDICTS and hidden_failed:
        verdict = _worst([c.verdict for c in cases if not c.passed])
    stages = []
    for stage in result.stages:
        failing = [c.verdict for c in cases if c.entry == stage.entry and not c.passed]
        recompute = stage.verdict in CASE_VERDICTS and stage.entry in hidden_failed
        stage_verdict = _worst(failing) if recompute else stage.verdict
        stages.append(stage.model_copy(update={"points": 0.0, "points_possible": 0.0, "verdict": stage_verdict,
                                               "correct": stage.correct or (recompute and not failing)}))
    note = _("Before the deadline only the visible cases are shown: the hidden cases, and the stage points that "
             "depend on them, are shown after {when}.").format(when=shown_at)
    return result.model_copy(update={
        "cases": cases, "groups": groups, "stages": stages, "verdict": verdict,
        "score": sum(g.points for g in groups), "max_score": sum(g.points_possible for g in groups),
        "message": "\n".join(m for m in (result.message, note) if m)})
