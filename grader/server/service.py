"""What the server does, apart from HTTP: accounts and tokens, taking in a submission, queue positions,
regrades, and the views the pages and the API show. The routes (app.py) only translate to and from HTTP."""

from __future__ import annotations

import json
import secrets
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import delete, func, select
from sqlalchemy.exc import IntegrityError

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
    hash_token,
    new_token,
    now,
)
from grader.server.uploads import UploadError, inspect_upload

Enqueue = Callable[[int, str], None]  # (submission id, queue name)


class Refused(Exception):
    """A request the server refuses, worded for the student; `status` is the HTTP status it maps to.
    Nothing was stored: it does not count as an attempt."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def ensure_assignment(db: Database, name: str, backend: str = "emu", device: str | None = None) -> Assignment:
    """The assignment `name` (a spec under assignments/), created with a fresh secret seed the first time."""
    from grader.spec import SpecError, load_assignment

    try:
        load_assignment(name)
    except SpecError as exc:
        raise Refused(str(exc).splitlines()[0]) from exc
    with db.session() as s:
        found = s.scalar(select(Assignment).where(Assignment.name == name))
        if found is None:
            found = Assignment(name=name, backend=backend, device=device, seed=BatchManifest.new_seed(), is_open=True)
            s.add(found)
        return found


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
                    enqueue: Enqueue) -> Submission:
    """Checks an upload and queues it; raises Refused (nothing stored, no attempt counted) for a bad upload,
    an unknown or closed assignment, a bad mode, or a submission of this student still in flight."""
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
        if not found.is_open:
            raise Refused(_("assignment {name!r} is closed").format(name=assignment), 403)
        assignment_pk, queue = found.id, queue_name(found.backend, found.device)
    try:
        with db.session() as s:
            sub = Submission(student_pk=student.id, assignment_pk=assignment_pk, mode=mode, archive=data,
                             content_hash=digest, queue=queue, status="queued", in_flight=True, grade_runs=0,
                             submitted_at=now())
            s.add(sub)
    except IntegrityError as exc:  # the partial unique index: one in flight per student
        raise Refused(_("you already have a submission being graded; wait for its result"), 409) from exc
    enqueue(sub.id, queue)
    with db.session() as s:
        s.get(Submission, sub.id).queued_at = now()  # type: ignore[union-attr]
    return sub


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
    phases: dict[str, float | None]

    def as_json(self) -> dict:
        return self.__dict__.copy()


def _view(sub: Submission, student: Student, assignment: Assignment) -> SubmissionView:
    return SubmissionView(sub.id, student.student_id, assignment.name, sub.mode, sub.status, sub.verdict, sub.score,
                          sub.max_score, sub.worker, sub.grade_runs,
                          {p: getattr(sub, f"{p}_at") for p in PHASES})


def submissions(db: Database, student: Student | None = None) -> list[SubmissionView]:
    """Newest first; one student's, or everybody's (student None: the instructor)."""
    with db.session() as s:
        query = select(Submission, Student, Assignment).join(Student, Submission.student_pk == Student.id).join(
            Assignment, Submission.assignment_pk == Assignment.id).order_by(Submission.id.desc())
        if student is not None:
            query = query.where(Submission.student_pk == student.id)
        return [_view(*row) for row in s.execute(query).all()]


def submission_of(db: Database, submission_id: int, viewer: Student) -> SubmissionView:
    """One submission, if `viewer` may see it (its student, or an instructor); else Refused 404 (a student
    learns nothing about others' ids)."""
    with db.session() as s:
        row = s.execute(select(Submission, Student, Assignment).join(Student, Submission.student_pk == Student.id)
                        .join(Assignment, Submission.assignment_pk == Assignment.id)
                        .where(Submission.id == submission_id)).first()
    if row is None or (viewer.role != "instructor" and row[1].id != viewer.id):
        raise Refused(_("no such submission"), 404)
    return _view(*row)


def result_of(db: Database, submission_id: int, viewer: Student) -> tuple[str, str]:
    """(results JSON, report HTML) of a graded submission `viewer` may see; else Refused 404."""
    submission_of(db, submission_id, viewer)
    with db.session() as s:
        row = s.scalar(select(Result).where(Result.submission_pk == submission_id))
    if row is None:
        raise Refused(_("not graded yet"), 404)
    return row.document, row.report_html


def queue_depth(db: Database) -> int:
    with db.session() as s:
        return s.scalar(select(func.count()).select_from(Submission).where(Submission.status == "queued")) or 0


@dataclass
class BoardRow:
    pseudonym: str
    median_us: float
    time_source: str  # modelled (emulator) or measured (card)
    device: str


def leaderboard(db: Database, assignment: str) -> dict[str, list[BoardRow]]:
    """Stage -> the opted-in students' best correct time of a `final` submission, fastest first."""
    best: dict[str, dict[str, BoardRow]] = {}
    with db.session() as s:
        rows = s.execute(select(Result.document, Student.pseudonym).join(Submission, Result.submission_pk == Submission.id)
                         .join(Student, Submission.student_pk == Student.id)
                         .join(Assignment, Submission.assignment_pk == Assignment.id)
                         .where(Assignment.name == assignment, Submission.mode == "final",
                                Student.on_leaderboard.is_(True))).all()
    for document, pseudonym in rows:
        result = GradeResult.model_validate(json.loads(document))
        for stage in result.stages:
            if not stage.correct or stage.timing is None:
                continue
            row = BoardRow(pseudonym, stage.timing.median_us,
                           "modelled" if result.time_is_modelled else "measured", result.device_profile)
            held = best.setdefault(stage.name, {}).get(pseudonym)
            if held is None or row.median_us < held.median_us:
                best[stage.name][pseudonym] = row
    return {stage: sorted(rows.values(), key=lambda r: r.median_us) for stage, rows in best.items()}


def set_leaderboard(db: Database, student: Student, on: bool) -> None:
    with db.session() as s:
        s.get(Student, student.id).on_leaderboard = on  # type: ignore[union-attr]


def export_finals(db: Database, assignment: str, out_dir: Path) -> list[str]:
    """The batch's exports (gradebook, Canvas, Gradescope, per-student reports; grader.batch.exports) of each
    student's latest graded `final` submission; test and benchmark runs never reach a gradebook. Returns
    the exports' notes."""
    from grader.batch.exports import ClassRow, write_exports
    from grader.batch.intake import StudentSubmission
    from grader.orchestration.batch import assignment_fingerprint

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
    class_rows = [ClassRow(StudentSubmission(student.student_id, student.name, f"submission #{sub.id}", None,
                                             content_hash=sub.content_hash),
                           GradeResult.from_json(document), stored_as=f"submission-{sub.id}")
                  for student, sub, document in latest.values()]
    out_dir.mkdir(parents=True, exist_ok=True)
    return write_exports(class_rows, out_dir, info.title or assignment, info.columns)


def set_open(db: Database, assignment: str, is_open: bool) -> None:
    """Opens or closes an assignment: a closed one refuses uploads (a 403 that is no attempt)."""
    with db.session() as s:
        found = s.scalar(select(Assignment).where(Assignment.name == assignment))
        if found is None:
            raise Refused(_("no assignment {name!r} on this server").format(name=assignment), 404)
        found.is_open = is_open


def check_seed(db: Database, assignment: str, record_dir: Path, sandbox: str = "auto") -> list[str]:
    """The batch's reference-seed guard (orchestration.reference_check) on the seed the server drew for
    `assignment`: its reference kernels graded on it. On a failure the assignment is closed (nobody is graded
    on a seed its own references fail) and the failures are returned; a seed that passed is not checked again
    (recorded in `record_dir`)."""
    from grader import __version__
    from grader.batch.store import seed_digest
    from grader.orchestration.build_cache import default_build_cache
    from grader.orchestration.options import GradeOptions
    from grader.orchestration.reference_check import check_references, checked_before, record_check

    with db.session() as s:
        found = s.scalar(select(Assignment).where(Assignment.name == assignment))
        if found is None:
            raise Refused(_("no assignment {name!r} on this server").format(name=assignment), 404)
        seed, backend, device = found.seed, found.backend, found.device
    folder = record_dir / assignment
    folder.mkdir(parents=True, exist_ok=True)
    key = f"{seed_digest(seed)}:{__version__}:{backend}:{device}"
    if checked_before(folder, key):
        return []
    options = GradeOptions(assignment=assignment, backend=backend, device=device,  # type: ignore[arg-type]
                           sandbox=sandbox, seed_mode="secret", seed=seed,  # type: ignore[arg-type]
                           build_cache=default_build_cache(), batch=True)
    check = check_references(assignment, options)
    if check.failures:
        set_open(db, assignment, False)
        return check.failures
    record_check(folder, key, check)
    return []
