"""What counts (Gradescope's active submission): of a student's graded `final` submissions of an assignment, the
one its policy picks (assignment.toml [submission] `counts`): the latest, the best counted score (after the late
penalty; the latest of equals), or the one the student chose (the latest until they choose). Its score counts
with the late penalty taken off when it was late. The one place the export, the pages, the leaderboard and the
API (and so the CLI) ask; `counting` is a pure function of plain values, `counting_ids` reads them."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from grader.i18n import N_

if TYPE_CHECKING:  # the database is imported where it is read: the policy's words and rule stay light (the client)
    from grader.server.db import Assignment, Database, Submission

POLICIES = ("latest", "best", "chosen")
# How each policy is named to the student (translated where shown).
POLICY_WORDS = {"latest": N_("your latest graded final submission counts"),
                "best": N_("your best graded final submission counts (after any late penalty)"),
                "chosen": N_("the final submission you choose counts (your latest until you choose one)")}


@dataclass(frozen=True)
class Counted:
    """A final submission's score as it counts: `raw` as graded, `penalty` the share taken off (late), `score`."""

    raw: float
    penalty: float
    score: float


def counted(raw: float, late: bool, late_penalty: float) -> Counted:
    penalty = late_penalty if late else 0.0
    return Counted(raw, penalty, round(raw * (1 - penalty), 2))


@dataclass(frozen=True)
class Graded:
    """One graded final submission, as `counting` weighs it (`score`: as the viewer sees it)."""

    submission_id: int
    student_pk: int
    score: float
    late: bool
    chosen_at: float | None = None


def policy_of(assignment: Assignment) -> str:
    """The assignment's `counts` policy: its row's (grade serve --counts, the instructor's API), set from its
    spec's [submission] `counts` when it was created."""
    return assignment.counts if assignment.counts in POLICIES else "latest"


def counting(graded: Iterable[Graded], policy: str, late_penalty: float) -> dict[int, int]:
    """Student -> the id of their submission that counts under `policy`, among `graded`."""
    def key(g: Graded) -> tuple:
        if policy == "best":
            return (counted(g.score, g.late, late_penalty).score, g.submission_id)
        if policy == "chosen":
            return (g.chosen_at is not None, g.chosen_at or 0.0, g.submission_id)
        return (g.submission_id,)

    best: dict[int, Graded] = {}
    for g in graded:
        held = best.get(g.student_pk)
        if held is None or key(g) > key(held):
            best[g.student_pk] = g
    return {student: g.submission_id for student, g in best.items()}


def graded_finals(db: Database, assignment: Assignment) -> list[tuple[Submission, str]]:
    """(submission, results document) of every graded final submission of `assignment`, oldest first."""
    from sqlalchemy import select

    from grader.server.db import Result, Submission

    with db.session() as s:
        return [(sub, document) for sub, document in s.execute(
            select(Submission, Result.document).join(Result, Result.submission_pk == Submission.id)
            .where(Submission.assignment_pk == assignment.id, Submission.mode == "final")
            .order_by(Submission.id)).all()]


def counting_ids(db: Database, assignment: Assignment,
                 score_of: Callable[[Submission, str], float] | None = None) -> dict[int, int]:
    """Student -> their submission of `assignment` that counts: its graded finals weighed by `score_of(submission,
    results document)` (default the stored score; the views pass the score as their viewer sees it, so what
    counts never reveals a hidden case)."""
    graded = [Graded(sub.id, sub.student_pk, sub.score or 0.0 if score_of is None else score_of(sub, document),
                     bool(sub.late), sub.chosen_at) for sub, document in graded_finals(db, assignment)]
    return counting(graded, policy_of(assignment), assignment.late_penalty or 0.0)
