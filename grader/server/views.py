"""What the pages and the API show, as the viewer may see it: submissions (a student's own, or everybody's for
an instructor), a result and its report with the hidden cases left out until they are released, the
assignments' state, the leaderboard, a submission's code, and the change stamp the live pages watch."""

from __future__ import annotations

import hashlib
import tempfile
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import func, or_, select

from grader.i18n import _
from grader.results import GradeResult, StageResult, Verdict
from grader.server.counting import POLICY_WORDS, Graded, counted, counting, counting_ids, policy_of
from grader.server.course_time import course_time, course_zone
from grader.server.db import (
    PHASES,
    AdminJob,
    Assignment,
    Database,
    Result,
    Student,
    Submission,
    SupersededResult,
    Worker,
    now,
    upload_of,
)
from grader.server.devices import device_type
from grader.server.policy import Refused
from grader.server.workers import WORKER_STALE_SECONDS, QueuePlace, queue_place


@dataclass
class SubmissionView:
    id: int
    student_id: str
    assignment: str
    mode: str
    status: str
    verdict: str | None
    score: float | None  # as graded (before a late penalty), as the viewer sees it
    max_score: float | None  # of the cases the viewer sees
    worker: str | None
    grade_runs: int
    late: bool
    phases: dict[str, float | None]
    device_type: str | None  # asked for
    graded_type: str | None  # what the worker that graded it stated, and its device (profile or card)
    graded_device: str | None
    graded: bool = False  # it has a committed result (shown while a regrade of it waits or runs)
    generation: int = 0  # its gradings: 0 the first, each regrade one more
    regrade_failed: str | None = None  # why its last regrade failed (the result before it stays)
    place: QueuePlace | None = None  # while queued or grading: its place in its queue (with_places)
    pending: float = 0.0  # points of cases hidden from the viewer until the deadline (or the release)
    penalty: float = 0.0  # the share of the score a late final loses
    counted_score: float | None = None  # the score as it counts (a graded final: the late penalty taken off)
    counts: bool = False  # the graded final submission that counts (counting.py), as the viewer sees it
    chosen_at: float | None = None  # when its student chose it to count (an assignment whose policy is `chosen`)
    policy: str = "latest"  # the assignment's counting policy (counting.POLICIES)
    # the replay engine its latest grading (queued, in flight or committed) was asked for: None the default,
    # "native" an instructor's regrade after review (admin.regrade); and the one its committed result's was
    replay_engine: str | None = None
    result_engine: str | None = None

    @property
    def held(self) -> bool:
        """Its result is held for review (the replays disagreed): the course staff's to resolve."""
        return self.verdict == Verdict.HELD_FOR_REVIEW

    def as_json(self) -> dict:
        found = self.__dict__.copy()
        found["place"] = None if self.place is None else self.place.as_json()
        found["held"] = self.held
        return found


def released(assignment: Assignment) -> bool:
    """Whether `assignment`'s after_deadline groups are shown to students: its deadline has passed, or the
    instructor released them (explicitly, or by closing the assignment). Without a deadline they stay hidden
    until the instructor does."""
    return assignment.released_at is not None or (assignment.deadline is not None and now() > assignment.deadline)


def hides_cases(assignment: Assignment, viewer: Student | None) -> bool:
    """Whether `viewer` sees `assignment`'s results without their after_deadline groups: anyone but an
    instructor (None: the instructor's own views), until they are released."""
    from grader.server.visibility import hidden_groups

    if viewer is None or viewer.role == "instructor":
        return False
    return not released(assignment) and bool(hidden_groups(assignment.name))


def hides_cases_of(db: Database, assignment: str, viewer: Student | None) -> bool:
    with db.session() as s:
        found = s.scalar(select(Assignment).where(Assignment.name == assignment))
        return found is not None and hides_cases(found, viewer)


def hidden_note(assignment: Assignment) -> str:
    """What a student is told while some of `assignment`'s cases are hidden from them."""
    if assignment.deadline is not None:
        return _("Some cases of {name} are hidden until its deadline: they, and the stage points that depend on "
                 "them, are shown after {when}, or earlier if your instructor releases them.").format(
                     name=assignment.name, when=course_time(assignment.deadline))
    return _("Some cases of {name} are hidden: they, and the stage points that depend on them, are shown when "
             "your instructor releases them.").format(name=assignment.name)


def _shown_result(document: str, assignment: Assignment, viewer: Student | None) -> GradeResult:
    from grader.server.visibility import hidden_groups, redact_hidden

    result = GradeResult.from_json(document)
    if not hides_cases(assignment, viewer):
        return result
    return redact_hidden(result, hidden_groups(assignment.name), hidden_note(assignment))


# The figures a student sees of a stored result before the release (verdict, score, max score, pending points), by
# the document's digest and its assignment (what redact_hidden decides them from): the pages and a status poll show
# them for every graded sibling, and parsing each document again on every poll was most of the server's CPU under
# load (benchmarks/server_throughput.py). Bounded: emptied when full.
_SHOWN_FIGURES: dict[tuple[bytes, str], tuple[str, float, float, float]] = {}
SHOWN_FIGURES_KEPT = 4096


def _shown_figures(document: str, assignment: Assignment, viewer: Student | None) -> tuple[str, float, float, float]:
    """(verdict, score, max score, pending points) of `document` as `viewer`, whom `assignment` hides cases from
    (hides_cases), sees it: _shown_result's, the same for every such viewer."""
    key = (hashlib.blake2b(document.encode(), digest_size=16).digest(), assignment.name)
    found = _SHOWN_FIGURES.get(key)
    if found is None:
        shown = _shown_result(document, assignment, viewer)
        found = (str(shown.verdict), shown.score, shown.max_score, shown.pending_points)
        if len(_SHOWN_FIGURES) >= SHOWN_FIGURES_KEPT:
            _SHOWN_FIGURES.clear()
        _SHOWN_FIGURES[key] = found
    return found


def _view(sub: Submission, student: Student, assignment: Assignment, document: str | None = None,
          result_engine: str | None = None, viewer: Student | None = None) -> SubmissionView:
    verdict, score, max_score, pending = sub.verdict, sub.score, sub.max_score, 0.0
    if document is not None and hides_cases(assignment, viewer):
        verdict, score, max_score, pending = _shown_figures(document, assignment, viewer)
    view = SubmissionView(sub.id, student.student_id, assignment.name, sub.mode, sub.status, verdict, score,
                          max_score, sub.worker, sub.grade_runs, bool(sub.late),
                          {p: getattr(sub, f"{p}_at") for p in PHASES}, sub.device_type, sub.graded_type,
                          sub.graded_device, graded=document is not None, generation=sub.generation,
                          regrade_failed=sub.regrade_failed, pending=pending, chosen_at=sub.chosen_at,
                          policy=policy_of(assignment), replay_engine=sub.replay_engine,
                          result_engine=result_engine)
    if sub.mode == "final" and score is not None:
        worth = counted(score, bool(sub.late), assignment.late_penalty or 0.0)
        view.penalty, view.counted_score = worth.penalty, worth.score
    return view


def _mark_counting(views: list[SubmissionView], penalties: dict[str, float]) -> list[SubmissionView]:
    """Marks, among `views` (as their viewer sees them), each student's submission of each assignment that counts
    (a graded final: one being regraded keeps its result, and counts as it until the regrade commits)."""
    by_assignment: dict[str, list[SubmissionView]] = {}
    for v in views:
        if v.mode == "final" and v.graded and v.score is not None:
            by_assignment.setdefault(v.assignment, []).append(v)
    pk = {sid: i for i, sid in enumerate(sorted({v.student_id for v in views}))}
    for name, graded in by_assignment.items():
        ids = set(counting([Graded(v.id, pk[v.student_id], v.score or 0.0, v.late, v.chosen_at)
                            for v in graded], graded[0].policy, penalties.get(name, 0.0)).values())
        for v in graded:
            v.counts = v.id in ids
    return views


def with_places(db: Database, rows: list[SubmissionView]) -> list[SubmissionView]:
    """`rows` with the place in its queue of each one queued or being graded (workers.queue_place)."""
    for row in rows:
        if row.status in ("queued", "running"):
            row.place = queue_place(db, row.id)
    return rows


def _rows(result=Result.document):  # noqa: ANN001, ANN202 - a column; a SQLAlchemy select
    """Submissions with their student, assignment, `result` (its document; Result.id where only whether it
    was graded matters) and its replay engine; the upload itself is never loaded with them."""
    return (select(Submission, Student, Assignment, result, Result.replay_engine)
            .join(Student, Submission.student_pk == Student.id)
            .join(Assignment, Submission.assignment_pk == Assignment.id)
            .outerjoin(Result, Result.submission_pk == Submission.id))


def _instructors_view(sub: Submission, student: Student, assignment: Assignment, result_id: int | None,
                      result_engine: str | None) -> SubmissionView:
    """A row as the instructor sees it: nothing hidden, so of its result only whether there is one (and its
    engine)."""
    view = _view(sub, student, assignment, result_engine=result_engine)
    view.graded = result_id is not None
    return view


def submissions(db: Database, student: Student | None = None) -> list[SubmissionView]:
    """Newest first; one student's (as they may see them), or everybody's (student None: the instructor); the
    ones that count marked."""
    with db.session() as s:
        if student is None:
            rows = s.execute(_rows(Result.id).order_by(Submission.id.desc())).all()
            views = [_instructors_view(*row) for row in rows]
        else:
            rows = s.execute(_rows().where(Submission.student_pk == student.id)
                             .order_by(Submission.id.desc())).all()
            views = [_view(*row, viewer=student) for row in rows]
    return _mark_counting(views, {row[2].name: row[2].late_penalty or 0.0 for row in rows})


def _siblings(db: Database, submission_id: int, viewer: Student) -> list[SubmissionView]:
    """The submissions of the student and the assignment of `submission_id`, as `viewer` may see them, the one
    that counts marked; Refused 404 unless `viewer` may see it (its student, or an instructor: a student learns
    nothing about others' ids)."""
    with db.session() as s:
        row = s.execute(_rows().where(Submission.id == submission_id)).first()
        if row is None or (viewer.role != "instructor" and row[1].id != viewer.id):
            raise Refused(_("no such submission"), 404)
        # only finals count: the others (test and benchmark runs) are neither read nor parsed
        siblings = s.execute(_rows().where(Submission.student_pk == row[1].id,
                                           Submission.assignment_pk == row[2].id,
                                           or_(Submission.id == submission_id, Submission.mode == "final"))).all()
    return _mark_counting([_view(*r, viewer=viewer) for r in siblings], {row[2].name: row[2].late_penalty or 0.0})


# The dashboard's page of submissions; its filters' values: a status, or "held" (a result held for review, whatever
# its status: a regrade of it queued or running keeps it held until the regrade commits).
PAGE_SIZE = 50
STATUSES = ("queued", "running", "done", "cancelled", "held")


@dataclass
class ClassPage:
    """One page of the class's submissions, newest first, as the instructor filtered them, with what the page
    needs around it: the count of all that match, the page and the number of pages, the verdicts' counts."""

    rows: list[SubmissionView]
    total: int
    page: int
    pages: int
    verdicts: dict[str, int]


def class_page(db: Database, *, assignment: str | None = None, status: str | None = None, late: bool | None = None,
               student: str | None = None, page: int = 1, per_page: int = PAGE_SIZE) -> ClassPage:
    """The instructor's view of the class's submissions (the dashboard, a student's page): filtered by
    assignment, status ("held": its result held for review), lateness and student (each given), `per_page` a
    page, page `page` (from 1)."""
    filters = []
    if assignment:
        filters.append(Assignment.name == assignment)
    if status == "held":
        filters.append(Submission.verdict == str(Verdict.HELD_FOR_REVIEW))
    elif status:
        filters.append(Submission.status == status)
    if late is not None:
        filters.append(Submission.late.is_(late))
    if student:
        filters.append(Student.student_id == student)

    def matching(query):  # noqa: ANN001, ANN202 - a select joined as _rows
        return query.join(Student, Submission.student_pk == Student.id).join(
            Assignment, Submission.assignment_pk == Assignment.id).where(*filters)

    with db.session() as s:
        total = s.scalar(matching(select(func.count()).select_from(Submission))) or 0
        verdicts = dict(s.execute(matching(select(Submission.verdict, func.count()).select_from(Submission))
                                  .where(Submission.verdict.is_not(None)).group_by(Submission.verdict)).all())
        pages = max(1, -(-total // per_page))
        page = min(max(1, page), pages)
        rows = s.execute(_rows(Result.id).where(*filters).order_by(Submission.id.desc())
                         .limit(per_page).offset((page - 1) * per_page)).all()
        shown = [_instructors_view(*row) for row in rows]
    counts = {i for a in {row[2].name: row[2] for row in rows}.values() for i in counting_ids(db, a).values()}
    for view in shown:  # the ones that count, among the whole class's (not only this page's)
        view.counts = view.id in counts
    return ClassPage(shown, total, page, pages, verdicts)


def student_of(db: Database, student_id: str) -> Student:
    """The account of roster id `student_id` (an instructor's per-student page); else Refused 404."""
    with db.session() as s:
        found = s.scalar(select(Student).where(Student.student_id == student_id))
    if found is None:
        raise Refused(_("no student {id!r} on this server").format(id=student_id), 404)
    return found


def submission_of(db: Database, submission_id: int, viewer: Student) -> SubmissionView:
    """One submission, if `viewer` may see it (its student, or an instructor); else Refused 404."""
    return status_of(db, submission_id, viewer)[0]


def counting_of(db: Database, submission_id: int, viewer: Student) -> int | None:
    """The id of the submission that counts for the student and the assignment of `submission_id` (as `viewer`
    sees them); None while none of their final submissions is graded."""
    return status_of(db, submission_id, viewer)[1]


def status_of(db: Database, submission_id: int, viewer: Student) -> tuple[SubmissionView, int | None]:
    """submission_of and counting_of from one reading of its siblings (a status poll asks for both)."""
    siblings = _siblings(db, submission_id, viewer)
    return next(v for v in siblings if v.id == submission_id), next((v.id for v in siblings if v.counts), None)


def choose(db: Database, submission_id: int, student: Student) -> None:
    """`student` chooses their graded final submission `submission_id` to count (an assignment whose policy is
    `chosen`); else Refused, saying why."""
    view = submission_of(db, submission_id, student)
    if student.role == "instructor" or view.student_id != student.student_id:
        raise Refused(_("only its student chooses which submission counts"), 403)
    if view.policy != "chosen":
        raise Refused(_("for {name}, {policy}: there is nothing to choose").format(
            name=view.assignment, policy=_(POLICY_WORDS[view.policy])), 409)
    if view.mode != "final" or not view.graded:
        raise Refused(_("only a graded final submission can count"), 409)
    with db.session() as s:
        found = s.get(Submission, submission_id)
        assert found is not None
        found.chosen_at = now()


def result_of(db: Database, submission_id: int, viewer: Student, lang: str | None = None) -> tuple[str, str]:
    """(results JSON, report HTML) of a graded submission as `viewer` may see it (before the deadline, a
    student's without the hidden cases), the report in `lang` when given (drawn again from the stored result when
    it was graded in another language); else Refused 404."""
    from grader.orchestration.job import report_html

    submission_of(db, submission_id, viewer)
    with db.session() as s:
        row = s.execute(select(Result, Assignment).join(Submission, Result.submission_pk == Submission.id)
                        .join(Assignment, Submission.assignment_pk == Assignment.id)
                        .where(Result.submission_pk == submission_id)).first()
    if row is None:
        raise Refused(_("not graded yet"), 404)
    result, assignment = row
    # drawn again from the stored result: in the viewer's language and the course's time zone (the stored HTML is
    # the worker's, in UTC)
    if not hides_cases(assignment, viewer):
        return result.document, report_html(GradeResult.from_json(result.document), lang, course_zone())
    shown = _shown_result(result.document, assignment, viewer)
    return shown.to_json(), report_html(shown, lang, course_zone())


def grading_history(db: Database, submission_id: int, viewer: Student) -> list[dict]:
    """Every committed grading of a submission, oldest first (the results its regrades superseded, then the one
    that counts): generation, verdict, score, when committed, the replay engine it was asked for. An instructor's (before the release, a student's
    view of a result hides cases: this list shows none to them)."""
    submission_of(db, submission_id, viewer)
    if viewer.role != "instructor":
        raise Refused(_("instructors only"), 403)
    with db.session() as s:
        rows = [(r.generation, r.document, r.committed_at, False, r.replay_engine) for r in s.scalars(
            select(SupersededResult).where(SupersededResult.submission_pk == submission_id)
            .order_by(SupersededResult.generation))]
        current = s.scalar(select(Result).where(Result.submission_pk == submission_id))
        if current is not None:
            rows.append((current.generation, current.document, current.committed_at, True, current.replay_engine))
    history = []
    for generation, document, committed_at, counts, engine in rows:
        result = GradeResult.from_json(document)
        history.append({"generation": generation, "verdict": str(result.verdict), "score": result.score,
                        "max_score": result.max_score, "committed_at": committed_at, "counts": counts,
                        "replay_engine": engine})  # asked for: None the default, "native" after review
    return history


@dataclass
class AssignmentView:
    name: str
    open: bool
    deadline: float | None
    late_until: float | None
    late_penalty: float
    per_hour: int | None
    seed_checked: bool  # the reference-seed guard passed on its seed (never the seed itself)
    seed_failures: str | None
    device_type: str  # what its submissions ask for unless they say otherwise
    has_hidden: bool  # it has after_deadline groups
    released_at: float | None  # when the instructor released them (or closed it)
    released: bool  # students see them now (released, or the deadline passed)
    policy: str = "latest"  # which final submission counts (counting.POLICIES)
    late_now: bool = False  # an upload now is taken late (the penalty taken off a final's score)
    closed_now: bool = False  # an upload now is refused (closed, or past the deadline's late window)
    deadline_text: str = ""  # the deadline in the course's time zone, with its offset
    closes_text: str = ""  # when uploads close (the late window's end), likewise

    # what a student is told of an assignment (grade submit --server --list, the late warning)
    STUDENT_FIELDS = ("name", "open", "deadline", "late_until", "late_penalty", "per_hour", "device_type", "has_hidden",
                      "released", "policy", "late_now", "closed_now", "deadline_text", "closes_text")

    def as_json(self) -> dict:
        return self.__dict__.copy()

    def student_json(self) -> dict:
        return {k: getattr(self, k) for k in self.STUDENT_FIELDS}


def _assignment_view(a: Assignment) -> AssignmentView:
    from grader.server.visibility import hidden_groups

    at = now()
    closes = a.late_until if a.late_until is not None else a.deadline
    return AssignmentView(a.name, a.is_open, a.deadline, a.late_until, a.late_penalty, a.per_hour,
                          a.seed_checked is not None, a.seed_failures, device_type(a.device),
                          bool(hidden_groups(a.name)), a.released_at, released(a), policy=policy_of(a),
                          late_now=a.deadline is not None and at > a.deadline and not (closes and at > closes),
                          closed_now=not a.is_open or bool(a.seed_failures) or (closes is not None and at > closes),
                          deadline_text=course_time(a.deadline) if a.deadline is not None else "",
                          closes_text=course_time(closes) if closes is not None else "")


def assignments(db: Database) -> list[AssignmentView]:
    """Every assignment's state (the instructor's; a student is shown its student_json)."""
    with db.session() as s:
        return [_assignment_view(a) for a in s.scalars(select(Assignment).order_by(Assignment.name))]


def hidden_notices(db: Database) -> list[str]:
    """For a student's page: one line per assignment some of whose cases are hidden from students now."""
    with db.session() as s:
        return [hidden_note(a) for a in s.scalars(select(Assignment).order_by(Assignment.name))
                if hides_cases(a, Student(role="student"))]


@dataclass
class BoardRow:
    pseudonym: str
    median_us: float
    time_source: str  # modelled (emulator) or measured (card)
    device: str
    rank: int = 0  # equal times share a rank, so the order among them says nothing
    mine: bool = False  # the viewer's own row


def ranked(stage: StageResult) -> bool:
    """Whether a stage's time goes on the board: correct, timed, and every requirement of the stage met (a
    one-core kernel never ranks on a multicore stage)."""
    return stage.correct and stage.timing is not None and all(r.passed for r in stage.requirements)


def leaderboard(db: Database, assignment: str, viewer: Student | None) -> dict[str, list[BoardRow]]:
    """Stage -> the opted-in students' times, fastest first, from each one's `final` submission that counts
    (counting.py), where the stage ranks (`ranked`), as `viewer` may see it: until the hidden groups are
    released, anyone but an instructor gets it computed from each result as its student sees it (visible groups
    only), so a hidden failure moves nobody, in rank, row count or time. Ties are ordered by pseudonym and share
    their rank; the viewer's own row is marked."""
    seen_as = viewer if viewer is not None else Student(role="student")
    with db.session() as s:
        found = s.scalar(select(Assignment).where(Assignment.name == assignment))
        if found is None:
            raise Refused(_("no assignment {name!r} on this server").format(name=assignment), 404)
    counts = set(counting_ids(db, found, lambda _sub, document: _shown_result(document, found, seen_as).score).values())
    with db.session() as s:
        rows = s.execute(select(Result.document, Student.pseudonym, Student.id)
                         .join(Submission, Result.submission_pk == Submission.id)
                         .join(Student, Submission.student_pk == Student.id)
                         .where(Submission.id.in_(counts), Student.on_leaderboard.is_(True))).all()
    board: dict[str, list[BoardRow]] = {}
    for document, pseudonym, student_pk in rows:
        result = _shown_result(document, found, seen_as)
        for stage in result.stages:
            if ranked(stage):
                board.setdefault(stage.name, []).append(BoardRow(
                    pseudonym, stage.timing.median_us,  # type: ignore[union-attr]
                    "modelled" if result.time_is_modelled else "measured", result.device_profile,
                    mine=viewer is not None and student_pk == viewer.id))
    for held in board.values():
        held.sort(key=lambda r: (r.median_us, r.pseudonym))
        for i, row in enumerate(held):
            row.rank = held[i - 1].rank if i and row.median_us == held[i - 1].median_us else i + 1
    return board


def change_stamp(db: Database, student: Student | None = None) -> str:
    """Changes whenever a submission of `student` (None: anybody's) is added, moves a phase, is cancelled or
    regraded, whenever the queues move or a worker joins or leaves (a queued job's place and estimate), an
    assignment's hidden cases are released (by the instructor or its deadline), or an instructor's background
    job moves: what the pages' live refresh watches."""
    columns = [func.coalesce(getattr(Submission, f"{p}_at"), 0) for p in PHASES]
    with db.session() as s:
        query = select(func.count(), func.max(Submission.id), func.sum(sum(columns[1:], columns[0])),
                       func.sum(Submission.grade_runs), func.count(Submission.in_flight),
                       func.sum(Submission.generation), func.count(Submission.regrade_failed))
        if student is not None:
            query = query.where(Submission.student_pk == student.id)
        released = s.scalar(select(func.count()).select_from(Assignment).where(
            or_(Assignment.released_at.is_not(None), Assignment.deadline < now())))
        moving = s.execute(select(func.count(), func.max(Submission.started_at))
                           .where(Submission.status.in_(("queued", "running")))).one()
        workers = s.scalar(select(func.count()).select_from(Worker).where(
            Worker.seen_at > now() - WORKER_STALE_SECONDS))
        jobs = s.execute(select(func.count(), func.max(AdminJob.updated_at))
                         .where(AdminJob.started_at > now() - 86400)).one() if student is None else ()
        return ":".join(str(v) for v in (*s.execute(query).one(), released, *moving, workers, *jobs))


def code_of(db: Database, submission_id: int, viewer: Student) -> tuple[list[tuple[str, str]], list[str]]:
    """The source files of a submission `viewer` may see (its student's own, or an instructor): (path, text)
    pairs as the similarity step reads them (links never followed, size caps, binaries skipped), and notes."""
    from grader.batch.similarity import read_sources
    from grader.server.uploads import unpack_upload

    submission_of(db, submission_id, viewer)
    with db.session() as s:
        archive = upload_of(s, submission_id)
    with tempfile.TemporaryDirectory(prefix="code-") as scratch:
        files, notes = read_sources(unpack_upload(archive, Path(scratch)))
    return [(f.rel, f.text) for f in files], notes
