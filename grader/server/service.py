"""What the server does, apart from HTTP: accounts and tokens, taking in a submission, queue positions,
regrades, and the views the pages and the API show. The routes (app.py) only translate to and from HTTP."""

from __future__ import annotations

import secrets
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import delete, func, or_, select
from sqlalchemy.exc import IntegrityError

from grader.backends import DEFAULT_BACKEND
from grader.batch.intake import IntakeError, read_roster
from grader.batch.store import BatchManifest
from grader.i18n import _
from grader.results import GradeResult
from grader.server.db import (
    MODES,
    PHASES,
    Assignment,
    Database,
    Result,
    Student,
    Submission,
    Worker,
    hash_token,
    new_token,
    now,
)
from grader.server.devices import DeviceTypeError, device_type, grading_device
from grader.server.uploads import UploadError, inspect_upload

Enqueue = Callable[[int, str], None]  # (submission id, queue name)


class Refused(Exception):
    """A request the server refuses, worded for the student; `status` is the HTTP status it maps to.
    Nothing was stored: it does not count as an attempt."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def ensure_assignment(db: Database, name: str, backend: str = DEFAULT_BACKEND, device: str | None = None) -> Assignment:
    """The assignment `name` (a spec under assignments/), created with a fresh secret seed the first time.
    `device`: the device type its submissions ask for unless they say otherwise (given: changed)."""
    from grader.spec import SpecError, load_assignment

    try:
        load_assignment(name)
        device = None if device is None else device_type(device)
    except (SpecError, DeviceTypeError) as exc:
        raise Refused(str(exc).splitlines()[0]) from exc
    with db.session() as s:
        found = s.scalar(select(Assignment).where(Assignment.name == name))
        if found is not None and device is not None:
            found.device = device
        if found is None:
            # closed until the reference-seed guard passes on the seed drawn here (open_assignment); the upload
            # policy starts as the spec's [submission] (set_policy changes it)
            policy = load_assignment(name).submission
            due = policy.due.timestamp() if policy.due else None
            found = Assignment(name=name, backend=backend, device=device, seed=BatchManifest.new_seed(), is_open=False,
                               deadline=due, late_until=None if due is None else due + policy.late_hours * 3600,
                               late_penalty=policy.late_penalty, per_hour=policy.per_hour)
            s.add(found)
        return found


def set_policy(db: Database, name: str, *, due: float | None = None, late_hours: float | None = None,
               late_penalty: float | None = None, per_hour: int | None = None) -> None:
    """Changes an assignment's upload policy (each value given): the deadline (a UNIX time), the late window
    after it, the late penalty, the uploads per student per hour."""
    with db.session() as s:
        found = s.scalar(select(Assignment).where(Assignment.name == name))
        if found is None:
            raise Refused(_("no assignment {name!r} on this server").format(name=name), 404)
        window = (found.late_until - found.deadline) / 3600 if found.late_until and found.deadline else 0.0
        if due is not None:
            found.deadline = due
        if late_hours is not None:
            window = late_hours
        if found.deadline is not None:
            found.late_until = found.deadline + window * 3600
        if late_penalty is not None:
            if not 0 <= late_penalty <= 1:
                raise Refused(_("the late penalty is a share of the score, from 0 to 1"))
            found.late_penalty = late_penalty
        if per_hour is not None:
            found.per_hour = per_hour or None  # 0: no limit but one in flight


def _when(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(t))


def add_account(db: Database, student_id: str, name: str = "", role: str = "student") -> str:
    """Creates (or re-keys) an account; returns its new token, the only time it is seen in clear."""
    token = new_token()
    with db.session() as s:
        found = s.scalar(select(Student).where(Student.student_id == student_id))
        if found is None:
            s.add(Student(student_id=student_id, name=name, role=role, token_hash=hash_token(token),
                          pseudonym=f"kernel-{secrets.token_hex(3)}", on_leaderboard=False))
        else:
            found.token_hash, found.name, found.role = hash_token(token), name or found.name, role
    return token


def import_roster(db: Database, roster: Path) -> dict[str, str]:
    """Accounts for every student of a roster CSV in the intake's formats (grader.batch.intake.read_roster);
    returns student id -> new token for the students it added (existing ones keep theirs)."""
    with tempfile.TemporaryDirectory(prefix="roster-") as scratch:
        try:
            rows = read_roster(roster, Path(scratch))
        except IntakeError as exc:
            raise Refused(str(exc)) from exc
    tokens = {}
    for row in rows:
        with db.session() as s:
            exists = s.scalar(select(Student.id).where(Student.student_id == row.student_id)) is not None
        if not exists:
            tokens[row.student_id] = add_account(db, row.student_id, row.name)
    return tokens


def authenticate(db: Database, token: str) -> Student | None:
    if not token:
        return None
    with db.session() as s:
        return s.scalar(select(Student).where(Student.token_hash == hash_token(token)))


def take_submission(db: Database, student: Student, assignment: str, mode: str, data: bytes,
                    enqueue: Enqueue, device: str | None = None) -> Submission:
    """Checks an upload and queues it on its device type's queue (`device`, else the assignment's); raises
    Refused (nothing stored, no attempt counted) for a bad upload, an unknown or closed assignment, a bad mode
    or device type, an upload after the deadline's late window, one over the hourly rate (429), or a
    submission of this student still in flight (409). One inside the late window is taken and marked late."""
    from grader.server.queue import queue_name

    if mode not in MODES:
        raise Refused(_("unknown mode {mode!r}: one of {modes}").format(mode=mode, modes=", ".join(MODES)))
    try:
        digest = inspect_upload(data)
    except UploadError as exc:
        raise Refused(str(exc), 413 if exc.too_large else 400) from exc
    with db.session() as s:
        found = s.scalar(select(Assignment).where(Assignment.name == assignment))
        if found is None:
            raise Refused(_("no assignment {name!r} on this server").format(name=assignment), 404)
        if found.seed_failures:
            raise Refused(_("assignment {name!r} is closed: the grader is being fixed; your instructor has been "
                            "told").format(name=assignment), 403)
        if not found.is_open:
            raise Refused(_("assignment {name!r} is closed").format(name=assignment), 403)
        at = now()
        closes = found.late_until if found.late_until is not None else found.deadline
        if closes is not None and at > closes:
            raise Refused(_("the deadline of {name!r} has passed ({when}): uploads are closed").format(
                name=assignment, when=_when(closes)), 403)
        late = found.deadline is not None and at > found.deadline
        if found.per_hour:
            recent = s.scalars(select(Submission.submitted_at).where(
                Submission.student_pk == student.id, Submission.assignment_pk == found.id,
                Submission.submitted_at > at - 3600).order_by(Submission.submitted_at)).all()
            if len(recent) >= found.per_hour:
                raise Refused(_("at most {n} uploads an hour for {name!r}: the next one is accepted from {when}")
                              .format(n=found.per_hour, name=assignment,
                                      when=_when(recent[-found.per_hour] + 3600)), 429)
        try:
            asked = device_type(device or found.device)
        except DeviceTypeError as exc:
            raise Refused(str(exc)) from exc
        if mode != "test" and asked != device_type(found.device) and not _calibrated(found, asked):
            raise Refused(_("{name!r} has no speed thresholds for device type {type} yet (your instructor calibrates "
                            "them with `grade calibrate --device {type}`): submit for {default}, or in test "
                            "mode").format(name=assignment, type=asked, default=device_type(found.device)))
        assignment_pk, queue = found.id, queue_name(found.backend, asked)
    try:
        with db.session() as s:
            sub = Submission(student_pk=student.id, assignment_pk=assignment_pk, mode=mode, archive=data,
                             content_hash=digest, queue=queue, device_type=asked, status="queued", in_flight=True,
                             grade_runs=0, submitted_at=at, late=late)
            s.add(sub)
    except IntegrityError as exc:  # the partial unique index: one in flight per student
        raise Refused(_("you already have a submission being graded; wait for its result"), 409) from exc
    enqueue(sub.id, queue)
    with db.session() as s:
        s.get(Submission, sub.id).queued_at = now()  # type: ignore[union-attr]
    return sub


def requeue_stranded(db: Database, enqueue: Enqueue) -> int:
    """Queued submissions whose queue no worker consumes any more (queued before queues were named by device
    type: grade.emu.default, grade.mlu.0) are queued again on their type's queue; returns how many. A copy
    left in the old queue is never taken (and would be counted once if it were: grading.commit_result)."""
    from grader.server.queue import queue_name

    moved = []
    with db.session() as s:
        rows = s.execute(select(Submission, Assignment).join(Assignment, Submission.assignment_pk == Assignment.id)
                         .where(Submission.status == "queued")).all()
        for sub, assignment in rows:
            try:
                kind = device_type(sub.device_type or assignment.device)
            except DeviceTypeError:
                kind = device_type(None)
            if sub.queue != queue_name(assignment.backend, kind):
                sub.device_type, sub.queue = kind, queue_name(assignment.backend, kind)
                moved.append((sub.id, sub.queue))
    for submission_id, queue in moved:
        enqueue(submission_id, queue)
    return len(moved)


def _calibrated(assignment: Assignment, kind: str) -> bool:
    """Whether a timed grading of `assignment` on device type `kind` can score speed: a profile's thresholds are
    per profile (grade calibrate --device TYPE); a card's are per card and checked where it grades."""
    from grader.backends import get_backend
    from grader.scoring.thresholds import thresholds_path
    from grader.spec import load_assignment

    return not get_backend(assignment.backend).devices_are_profiles or \
        thresholds_path(load_assignment(assignment.name), assignment.backend, kind).is_file()


def queue_position(db: Database, submission_id: int) -> int | None:
    """How many submissions of the same queue are ahead of this one (0: next or grading); None once done."""
    with db.session() as s:
        sub = s.get(Submission, submission_id)
        if sub is None or sub.status != "queued":
            return None if sub is None or sub.status == "done" else 0
        return s.scalar(select(func.count()).select_from(Submission).where(
            Submission.queue == sub.queue, Submission.status == "queued", Submission.id < sub.id)) or 0


def regrade(db: Database, submission_id: int, enqueue: Enqueue) -> None:
    """Grades a submission again (the instructor's; not the student's attempt): its result is dropped when
    the job is queued again, and the next commit is its only result."""
    with db.session() as s:
        sub = s.get(Submission, submission_id)
        if sub is None:
            raise Refused(_("no such submission"), 404)
        if sub.in_flight:
            raise Refused(_("this submission is being graded already"), 409)
        s.execute(delete(Result).where(Result.submission_pk == submission_id))
        sub.status, sub.in_flight, sub.verdict, sub.score = "queued", True, None, None
        for phase in PHASES[1:]:
            setattr(sub, f"{phase}_at", None)
        queue = sub.queue
    enqueue(submission_id, queue)
    with db.session() as s:
        s.get(Submission, submission_id).queued_at = now()  # type: ignore[union-attr]


@dataclass
class SubmissionView:
    id: int
    student_id: str
    assignment: str
    mode: str
    status: str
    verdict: str | None
    score: float | None
    max_score: float | None
    worker: str | None
    grade_runs: int
    late: bool
    phases: dict[str, float | None]
    device_type: str | None  # asked for
    graded_type: str | None  # what the worker that graded it stated, and its device (profile or card)
    graded_device: str | None

    def as_json(self) -> dict:
        return self.__dict__.copy()


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
                     name=assignment.name, when=_when(assignment.deadline))
    return _("Some cases of {name} are hidden: they, and the stage points that depend on them, are shown when "
             "your instructor releases them.").format(name=assignment.name)


def _shown_result(document: str, assignment: Assignment, viewer: Student | None) -> GradeResult:
    from grader.server.visibility import hidden_groups, redact_hidden

    result = GradeResult.from_json(document)
    if not hides_cases(assignment, viewer):
        return result
    return redact_hidden(result, hidden_groups(assignment.name), hidden_note(assignment))


def _view(sub: Submission, student: Student, assignment: Assignment, document: str | None = None,
          viewer: Student | None = None) -> SubmissionView:
    verdict, score, max_score = sub.verdict, sub.score, sub.max_score
    if document is not None and hides_cases(assignment, viewer):
        shown = _shown_result(document, assignment, viewer)
        verdict, score, max_score = str(shown.verdict), shown.score, shown.max_score
    return SubmissionView(sub.id, student.student_id, assignment.name, sub.mode, sub.status, verdict, score,
                          max_score, sub.worker, sub.grade_runs, bool(sub.late),
                          {p: getattr(sub, f"{p}_at") for p in PHASES}, sub.device_type, sub.graded_type,
                          sub.graded_device)


def _rows():  # noqa: ANN202 - a SQLAlchemy select
    return (select(Submission, Student, Assignment, Result.document)
            .join(Student, Submission.student_pk == Student.id)
            .join(Assignment, Submission.assignment_pk == Assignment.id)
            .outerjoin(Result, Result.submission_pk == Submission.id))


def submissions(db: Database, student: Student | None = None) -> list[SubmissionView]:
    """Newest first; one student's (as they may see them), or everybody's (student None: the instructor)."""
    with db.session() as s:
        query = _rows().order_by(Submission.id.desc())
        if student is not None:
            query = query.where(Submission.student_pk == student.id)
        return [_view(*row, viewer=student) for row in s.execute(query).all()]


def waiting_for(db: Database, submission_id: int) -> str | None:
    """The device type a queued submission waits for when no live worker of that type consumes its queue
    (it is graded when one joins); None otherwise."""
    with db.session() as s:
        sub = s.get(Submission, submission_id)
        if sub is None or sub.status != "queued":
            return None
        queue, kind = sub.queue, sub.device_type
    return None if any(w.queue == queue for w in live_workers(db)) else kind or queue


def submission_of(db: Database, submission_id: int, viewer: Student) -> SubmissionView:
    """One submission, if `viewer` may see it (its student, or an instructor); else Refused 404 (a student
    learns nothing about others' ids)."""
    with db.session() as s:
        row = s.execute(_rows().where(Submission.id == submission_id)).first()
    if row is None or (viewer.role != "instructor" and row[1].id != viewer.id):
        raise Refused(_("no such submission"), 404)
    return _view(*row, viewer=viewer)


def result_of(db: Database, submission_id: int, viewer: Student) -> tuple[str, str]:
    """(results JSON, report HTML) of a graded submission as `viewer` may see it (before the deadline, a
    student's without the hidden cases); else Refused 404."""
    from grader.orchestration.job import report_html

    submission_of(db, submission_id, viewer)
    with db.session() as s:
        row = s.execute(select(Result, Assignment).join(Submission, Result.submission_pk == Submission.id)
                        .join(Assignment, Submission.assignment_pk == Assignment.id)
                        .where(Result.submission_pk == submission_id)).first()
    if row is None:
        raise Refused(_("not graded yet"), 404)
    result, assignment = row
    if not hides_cases(assignment, viewer):
        return result.document, result.report_html
    shown = _shown_result(result.document, assignment, viewer)
    return shown.to_json(), report_html(shown)


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

    def as_json(self) -> dict:
        return self.__dict__.copy()


def _assignment_view(a: Assignment) -> AssignmentView:
    from grader.server.visibility import hidden_groups

    return AssignmentView(a.name, a.is_open, a.deadline, a.late_until, a.late_penalty, a.per_hour,
                          a.seed_checked is not None, a.seed_failures, device_type(a.device),
                          bool(hidden_groups(a.name)), a.released_at, released(a))


def assignments(db: Database) -> list[AssignmentView]:
    """Every assignment's state, for the instructor."""
    with db.session() as s:
        return [_assignment_view(a) for a in s.scalars(select(Assignment).order_by(Assignment.name))]


def hidden_notices(db: Database) -> list[str]:
    """For a student's page: one line per assignment some of whose cases are hidden from students now."""
    with db.session() as s:
        return [hidden_note(a) for a in s.scalars(select(Assignment).order_by(Assignment.name))
                if hides_cases(a, Student(role="student"))]


def queue_depth(db: Database) -> int:
    with db.session() as s:
        return s.scalar(select(func.count()).select_from(Submission).where(Submission.status == "queued")) or 0


# A worker slot's heartbeat (queue.py) refreshes its row every few seconds; one not refreshed for this long is
# gone (killed, its machine off) and serves nothing.
WORKER_STALE_SECONDS = 30.0


def worker_seen(db: Database, name: str, *, queue: str, device_type: str, device: str | None) -> None:
    """A worker slot's heartbeat: it is alive and consumes `queue` (its device type's)."""
    with db.session() as s:
        found = s.get(Worker, name)
        if found is None:
            s.add(Worker(name=name, queue=queue, device_type=device_type, device=device, seen_at=now()))
        else:
            found.queue, found.device_type, found.device, found.seen_at = queue, device_type, device, now()
    # two processes of one name racing on the insert: the loser's IntegrityError is retried by the next beat


def worker_gone(db: Database, name: str) -> None:
    with db.session() as s:
        s.execute(delete(Worker).where(Worker.name == name))


def live_workers(db: Database) -> list[Worker]:
    with db.session() as s:
        return list(s.scalars(select(Worker).where(Worker.seen_at > now() - WORKER_STALE_SECONDS)
                              .order_by(Worker.queue, Worker.name)))


@dataclass
class QueueView:
    """One queue (a backend's device type) on the dashboard: what waits, what is graded, who serves it."""

    queue: str
    backend: str
    device_type: str
    queued: int
    running: int
    workers: list[str]

    @property
    def unserved(self) -> bool:
        """Jobs wait here and no live worker of this type will take them."""
        return self.queued + self.running > 0 and not self.workers

    def as_json(self) -> dict:
        return {**self.__dict__, "unserved": self.unserved}


def queues(db: Database) -> list[QueueView]:
    """Every queue that holds jobs or has live workers, by device type (the instructor's dashboard)."""
    found: dict[str, QueueView] = {}

    def view(queue: str) -> QueueView:
        if queue not in found:
            _grade, backend, kind = (queue.split(".", 2) + ["", ""])[:3]
            found[queue] = QueueView(queue, backend, kind, 0, 0, [])
        return found[queue]

    with db.session() as s:
        counts = s.execute(select(Submission.queue, Submission.status, func.count())
                           .where(Submission.status.in_(("queued", "running")))
                           .group_by(Submission.queue, Submission.status)).all()
    for queue, status, n in counts:
        setattr(view(queue), status, n)
    for worker in live_workers(db):
        view(worker.queue).workers.append(worker.name)
    return sorted(found.values(), key=lambda q: q.queue)


@dataclass
class BoardRow:
    pseudonym: str
    median_us: float
    time_source: str  # modelled (emulator) or measured (card)
    device: str


    rank: int = 0  # equal times share a rank, so the order among them says nothing


def leaderboard(db: Database, assignment: str, viewer: Student | None) -> dict[str, list[BoardRow]]:
    """Stage -> the opted-in students' best correct time of a `final` submission, fastest first, as `viewer`
    may see it: until the hidden groups are released, anyone but an instructor gets it computed from each
    result as its student sees it (visible groups only), so a hidden failure moves nobody, in rank, row count
    or time. Ties are ordered by pseudonym and share their rank."""
    best: dict[str, dict[str, BoardRow]] = {}
    with db.session() as s:
        found = s.scalar(select(Assignment).where(Assignment.name == assignment))
        if found is None:
            raise Refused(_("no assignment {name!r} on this server").format(name=assignment), 404)
        rows = s.execute(select(Result.document, Student.pseudonym).join(Submission, Result.submission_pk == Submission.id)
                         .join(Student, Submission.student_pk == Student.id)
                         .where(Submission.assignment_pk == found.id, Submission.mode == "final",
                                Student.on_leaderboard.is_(True))).all()
    for document, pseudonym in rows:
        result = _shown_result(document, found, viewer if viewer is not None else Student(role="student"))
        for stage in result.stages:
            if not stage.correct or stage.timing is None:
                continue
            row = BoardRow(pseudonym, stage.timing.median_us,
                           "modelled" if result.time_is_modelled else "measured", result.device_profile)
            held = best.setdefault(stage.name, {}).get(pseudonym)
            if held is None or row.median_us < held.median_us:
                best[stage.name][pseudonym] = row
    board = {}
    for stage, held in best.items():
        ordered = sorted(held.values(), key=lambda r: (r.median_us, r.pseudonym))
        for i, row in enumerate(ordered):
            row.rank = ordered[i - 1].rank if i and row.median_us == ordered[i - 1].median_us else i + 1
        board[stage] = ordered
    return board


def set_leaderboard(db: Database, student: Student, on: bool) -> None:
    with db.session() as s:
        s.get(Student, student.id).on_leaderboard = on  # type: ignore[union-attr]


def late_penalised(result: GradeResult, penalty: float) -> GradeResult:
    """A late final's result as it counts: `penalty` (a share) of its score taken off, said in its message."""
    if penalty <= 0:
        return result
    note = _("submitted late: {share:.0%} of the score taken off ({before:g} -> {after:g})").format(
        share=penalty, before=result.score, after=round(result.score * (1 - penalty), 2))
    return result.model_copy(update={"score": round(result.score * (1 - penalty), 2),
                                     "message": "\n".join(m for m in (result.message, note) if m)})


def export_finals(db: Database, assignment: str, out_dir: Path) -> list[str]:
    """The batch's exports (gradebook, Canvas, Gradescope, per-student reports; grader.batch.exports) of each
    student's latest graded `final` submission; test and benchmark runs never reach a gradebook. Returns
    the exports' notes."""
    from grader.batch.exports import ClassRow, write_exports
    from grader.batch.intake import StudentSubmission
    from grader.orchestration.batch import assignment_fingerprint
    from grader.orchestration.job import write_report

    info = assignment_fingerprint(assignment)
    latest: dict[str, tuple[Student, Submission, str]] = {}
    with db.session() as s:
        rows = s.execute(select(Student, Submission, Result.document)
                         .join(Submission, Submission.student_pk == Student.id)
                         .join(Result, Result.submission_pk == Submission.id)
                         .join(Assignment, Submission.assignment_pk == Assignment.id)
                         .where(Assignment.name == assignment, Submission.mode == "final")
                         .order_by(Submission.id)).all()
    for student, sub, document in rows:
        latest[student.student_id] = (student, sub, document)  # ordered by id: the last one wins
    with db.session() as s:
        penalty = s.scalar(select(Assignment.late_penalty).where(Assignment.name == assignment)) or 0.0
    class_rows = [ClassRow(StudentSubmission(student.student_id, student.name, f"submission #{sub.id}", None,
                                             content_hash=sub.content_hash),
                           late_penalised(GradeResult.from_json(document), penalty if sub.late else 0.0),
                           stored_as=f"submission-{sub.id}")
                  for student, sub, document in latest.values()]
    out_dir.mkdir(parents=True, exist_ok=True)
    return write_exports(class_rows, out_dir, info.title or assignment, write_report, info.columns)


def set_open(db: Database, assignment: str, is_open: bool) -> None:
    """Opens or closes an assignment: a closed one refuses uploads (a 403 that is no attempt). The guard's
    closing; the instructor's is close_assignment."""
    with db.session() as s:
        found = s.scalar(select(Assignment).where(Assignment.name == assignment))
        if found is None:
            raise Refused(_("no assignment {name!r} on this server").format(name=assignment), 404)
        found.is_open = is_open


def release(db: Database, assignment: str) -> None:
    """The instructor releases `assignment`'s after_deadline groups: every student sees them from now on (a
    release is recorded once and stays, reopening or a later deadline does not hide them again)."""
    with db.session() as s:
        found = s.scalar(select(Assignment).where(Assignment.name == assignment))
        if found is None:
            raise Refused(_("no assignment {name!r} on this server").format(name=assignment), 404)
        if found.released_at is None:
            found.released_at = now()


def close_assignment(db: Database, assignment: str) -> None:
    """The instructor closes `assignment`: no more uploads, and its hidden groups are released (the marking
    is over, as after a deadline)."""
    set_open(db, assignment, False)
    release(db, assignment)


def seed_check_key(seed: str, spec_hash: str, backend: str, device: str | None) -> str:
    """What a passed reference check holds for: the seed, the assignment's files, the grader, the device (as
    the batch's guard keys it)."""
    from grader import __version__
    from grader.batch.store import seed_digest

    return f"{seed_digest(seed)}:{spec_hash}:{__version__}:{backend}:{device}"


@dataclass
class SeedCheck:
    ran: bool  # False: this seed passed before (recorded), nothing graded
    failures: list[str]
    message: str = ""  # for the instructor, when it failed


def check_seed(db: Database, assignment: str, sandbox: str = "auto", reference_root: Path | None = None,
               announce: Callable[[str], None] | None = None) -> SeedCheck:
    """The batch's reference-seed guard (issue 27, orchestration.reference_check) on the secret seed the server
    drew for `assignment`: its reference kernels graded on it before anyone is. A failure keeps the assignment
    closed (nobody is graded on a seed its own references fail) and is recorded with the instructor's message;
    a pass is recorded in the database, so each seed is checked once. `announce` hears, before the grading,
    what is being done (it takes a while)."""
    from grader.batch.store import seed_digest
    from grader.orchestration.batch import assignment_fingerprint
    from grader.orchestration.build_cache import default_build_cache
    from grader.orchestration.calibrate import REFERENCE_ROOT
    from grader.orchestration.options import GradeEnvironment, GradeRequest, sandbox_name
    from grader.orchestration.reference_check import check_references

    with db.session() as s:
        found = s.scalar(select(Assignment).where(Assignment.name == assignment))
        if found is None:
            raise Refused(_("no assignment {name!r} on this server").format(name=assignment), 404)
        seed, backend, device, checked = found.seed, found.backend, found.device, found.seed_checked
    key = seed_check_key(seed, assignment_fingerprint(assignment).spec_hash, backend, device)
    if checked == key:
        return SeedCheck(ran=False, failures=[])
    request = GradeRequest(assignment=assignment, seed_mode="secret", seed=seed)
    environment = GradeEnvironment(backend=backend, device=grading_device(backend, device),
                                   sandbox=sandbox_name(sandbox), build_cache=default_build_cache(),
                                   batch=True)
    if announce is not None:
        announce(_("{name}: grading its reference kernels on its secret seed before it opens (once per "
                   "seed)").format(name=assignment))
    check = check_references(assignment, request, environment, reference_root or REFERENCE_ROOT)
    with db.session() as s:
        found = s.scalar(select(Assignment).where(Assignment.name == assignment))
        assert found is not None
        if check.failures:
            found.is_open, found.seed_checked = False, None
            found.seed_failures = "\n".join(check.failures)
        else:
            found.seed_checked, found.seed_failures = key, None
    if not check.failures:
        return SeedCheck(ran=True, failures=[], message=_("{name}: the reference kernels pass on its seed; "
                                                          "open").format(name=assignment))
    head = _("{name} stays closed: its own reference kernels fail on the secret seed this server drew for it "
             "(digest {digest}), so every student would lose the same points:").format(
                 name=assignment, digest=seed_digest(seed))
    advice = _("This is a defect of the grader or of the assignment's tolerances, never of a student; please "
               "report it with the lines above. `grade serve --new-seed {name}` draws another seed (checked "
               "again before the assignment opens).").format(name=assignment)
    return SeedCheck(ran=True, failures=check.failures,
                     message="\n".join([head, *(f"  {line}" for line in check.failures), advice]))


def open_assignment(db: Database, assignment: str, sandbox: str = "auto", *, trust_seed: bool = False,
                    reference_root: Path | None = None, announce: Callable[[str], None] | None = None) -> SeedCheck:
    """Opens `assignment` to uploads once its reference kernels pass on its seed (check_seed; once per seed).
    `trust_seed`: open without grading them (the instructor vouches for the seed; tests)."""
    if trust_seed:
        check = SeedCheck(ran=False, failures=[])
    else:
        check = check_seed(db, assignment, sandbox, reference_root, announce)
    if not check.failures:
        set_open(db, assignment, True)
    return check


def new_seed(db: Database, assignment: str) -> None:
    """Draws another secret seed for `assignment` and closes it until the guard passes on the new one."""
    with db.session() as s:
        found = s.scalar(select(Assignment).where(Assignment.name == assignment))
        if found is None:
            raise Refused(_("no assignment {name!r} on this server").format(name=assignment), 404)
        found.seed, found.seed_checked, found.seed_failures, found.is_open = BatchManifest.new_seed(), None, None, False


def change_stamp(db: Database, student: Student | None = None) -> str:
    """Changes whenever a submission of `student` (None: anybody's) is added or moves a phase, or an
    assignment's hidden cases are released (by the instructor or its deadline): what the pages' live refresh
    watches."""
    columns = [func.coalesce(getattr(Submission, f"{p}_at"), 0) for p in PHASES]
    with db.session() as s:
        query = select(func.count(), func.max(Submission.id), func.sum(sum(columns[1:], columns[0])),
                       func.sum(Submission.grade_runs))
        if student is not None:
            query = query.where(Submission.student_pk == student.id)
        released = s.scalar(select(func.count()).select_from(Assignment).where(
            or_(Assignment.released_at.is_not(None), Assignment.deadline < now())))
        return ":".join(str(v) for v in (*s.execute(query).one(), released))


def code_of(db: Database, submission_id: int, viewer: Student) -> tuple[list[tuple[str, str]], list[str]]:
    """The source files of a submission `viewer` may see (its student's own, or an instructor): (path, text)
    pairs as the similarity step reads them (links never followed, size caps, binaries skipped), and notes."""
    from grader.batch.similarity import read_sources
    from grader.server.uploads import unpack_upload

    submission_of(db, submission_id, viewer)
    with db.session() as s:
        archive = s.scalar(select(Submission.archive).where(Submission.id == submission_id))
    with tempfile.TemporaryDirectory(prefix="code-") as scratch:
        files, notes = read_sources(unpack_upload(archive, Path(scratch)))
    return [(f.rel, f.text) for f in files], notes


def similarity(db: Database, assignment: str):  # noqa: ANN201 - grader.batch.similarity.SimilarityReport
    """The batch's code-similarity comparison (grader.batch.similarity) over each student's latest `final`
    upload of `assignment`, graded or not, with the assignment's settings and starter template."""
    from grader.batch.similarity import Member, compare_submissions, settings_for
    from grader.server.uploads import unpack_upload

    latest: dict[str, tuple[Student, Submission]] = {}
    with db.session() as s:
        rows = s.execute(select(Student, Submission).join(Submission, Submission.student_pk == Student.id)
                         .join(Assignment, Submission.assignment_pk == Assignment.id)
                         .where(Assignment.name == assignment, Submission.mode == "final")
                         .order_by(Submission.id)).all()
    for student, sub in rows:
        latest[student.student_id] = (student, sub)  # ordered by id: the last one wins
    settings, templates = settings_for(assignment)
    with tempfile.TemporaryDirectory(prefix="similarity-") as scratch:
        members = [Member(student.student_id, student.name or student.student_id, f"submission-{sub.id}",
                          unpack_upload(sub.archive, Path(scratch) / str(sub.id)), sub.content_hash)
                   for student, sub in latest.values()]
        return compare_submissions(members, [t for t in templates if t.is_dir()], settings)
