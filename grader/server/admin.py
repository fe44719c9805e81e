"""The course's administration: an assignment created with its secret seed and upload policy, opened through
the reference-seed guard (once per seed), closed, its hidden cases released, a new seed drawn; a submission
graded again; the exports of the final results (late ones penalised) and the class's code similarity."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from grader.backends import DEFAULT_BACKEND
from grader.batch.store import BatchManifest
from grader.i18n import _
from grader.results import GradeResult
from grader.server.counting import POLICIES, counted, counting_ids
from grader.server.db import PHASES, Assignment, Database, Result, Student, Submission, now, upload_of
from grader.server.devices import DeviceTypeError, device_type, grading_device
from grader.server.intake import Enqueue
from grader.server.policy import Refused

if TYPE_CHECKING:
    from grader.drivers.reference_check import Progress, ReferenceCheck


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
                               late_penalty=policy.late_penalty, per_hour=policy.per_hour, counts=policy.counts)
            s.add(found)
        return found


def set_policy(db: Database, name: str, *, due: float | None = None, late_hours: float | None = None,
               late_penalty: float | None = None, per_hour: int | None = None, counts: str | None = None) -> None:
    """Changes an assignment's upload policy (each value given): the deadline (a UNIX time), the late window
    after it, the late penalty, the uploads per student per hour, which final submission counts."""
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
        if counts is not None:
            if counts not in POLICIES:
                raise Refused(_("what counts is one of {policies}, not {counts!r}").format(
                    policies=", ".join(POLICIES), counts=counts))
            found.counts = counts


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


@dataclass
class SeedCheck:
    ran: bool  # False: this seed passed before (recorded), nothing graded
    failures: list[str]
    message: str = ""  # for the instructor, when it failed


@dataclass
class AssignmentSeedRecord:
    """The server's SeedRecord (drivers.reference_check.guard_seed): the assignment's row. A pass is kept as its
    key; a failure closes the assignment and keeps the failures for the instructor."""

    db: Database
    assignment: str

    def passed_key(self) -> str | None:
        with self.db.session() as s:
            return s.scalar(select(Assignment.seed_checked).where(Assignment.name == self.assignment))

    def save(self, key: str, check: ReferenceCheck) -> None:
        with self.db.session() as s:
            found = s.scalar(select(Assignment).where(Assignment.name == self.assignment))
            assert found is not None
            if check.failures:
                found.is_open, found.seed_checked = False, None
                found.seed_failures = "\n".join(check.failures)
            else:
                found.seed_checked, found.seed_failures = key, None


def check_seed(db: Database, assignment: str, sandbox: str = "auto", reference_root: Path | None = None,
               announce: Callable[[str], None] | None = None, progress: Progress | None = None) -> SeedCheck:
    """The reference-seed guard (issue 27, drivers.reference_check.guard_seed, as the batch runs it) on the
    secret seed the server drew for `assignment`: its reference kernels graded on it before anyone is. A failure
    keeps the assignment closed (nobody is graded on a seed its own references fail) and is recorded with the
    instructor's message; a pass is recorded in the database, so each seed is checked once. `announce` hears,
    before the grading, what is being done (it takes a while); `progress`, each reference before it is graded."""
    from grader.batch.store import seed_digest
    from grader.drivers.batch import assignment_fingerprint
    from grader.drivers.reference_check import failure_message, guard_seed
    from grader.orchestration.build_cache import default_build_cache
    from grader.orchestration.options import GradeEnvironment, GradeRequest, sandbox_name
    from grader.spec import REFERENCE_ROOT

    with db.session() as s:
        found = s.scalar(select(Assignment).where(Assignment.name == assignment))
        if found is None:
            raise Refused(_("no assignment {name!r} on this server").format(name=assignment), 404)
        seed, backend, device = found.seed, found.backend, found.device
    request = GradeRequest(assignment=assignment, seed_mode="secret", seed=seed)
    environment = GradeEnvironment(backend=backend, device=grading_device(backend, device),
                                   sandbox=sandbox_name(sandbox), build_cache=default_build_cache(), batch=True)
    told = None if announce is None else lambda: announce(_(
        "{name}: grading its reference kernels on its secret seed before it opens (once per seed)").format(
            name=assignment))
    check = guard_seed(assignment, request, environment, AssignmentSeedRecord(db, assignment),
                       spec_hash=assignment_fingerprint(assignment).spec_hash, device=device,
                       root=reference_root or REFERENCE_ROOT, announce=told, progress=progress)
    if check is None:
        return SeedCheck(ran=False, failures=[])
    if not check.failures:
        return SeedCheck(ran=True, failures=[], message=_("{name}: the reference kernels pass on its seed; "
                                                          "open").format(name=assignment))
    head = _("{name} stays closed: its own reference kernels fail on the secret seed this server drew for it "
             "(digest {digest}), so every student would lose the same points:").format(
                 name=assignment, digest=seed_digest(seed))
    advice = _("This is a defect of the grader or of the assignment's tolerances, never of a student; please "
               "report it with the lines above. `grade serve --new-seed {name}` draws another seed (checked "
               "again before the assignment opens).").format(name=assignment)
    return SeedCheck(ran=True, failures=check.failures, message=failure_message(head, check, advice))


def open_assignment(db: Database, assignment: str, sandbox: str = "auto", *, trust_seed: bool = False,
                    reference_root: Path | None = None, announce: Callable[[str], None] | None = None,
                    progress: Progress | None = None) -> SeedCheck:
    """Opens `assignment` to uploads once its reference kernels pass on its seed (check_seed; once per seed).
    `trust_seed`: open without grading them (the instructor vouches for the seed; tests). It takes a while
    (matmul's references: over a minute): the server runs it as a background job (jobs.start_open)."""
    if trust_seed:
        check = SeedCheck(ran=False, failures=[])
    else:
        check = check_seed(db, assignment, sandbox, reference_root, announce, progress)
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


# The replay engines a regrade may ask for besides the default: natively, the course staff's resolution of a result
# held for review (Verdict.HELD_FOR_REVIEW: the WebAssembly engine and the native replay disagreed; DESIGN.md "The
# switch-over: which engine decides, and the disagreement policy").
REGRADE_ENGINES = ("native",)


def regrade(db: Database, submission_id: int, enqueue: Enqueue, engine: str | None = None) -> None:
    """Grades a submission again (the instructor's; not the student's attempt) as its next generation: the
    result it has stays shown (report, leaderboard, exports) until the new one is committed
    (grading.commit_result); a regrade that fails keeps it and says so. `engine` "native": its trusted replay
    runs natively (after the course staff reviewed a result held for review), recorded on the submission and
    with the result; None, the default engine again. Refused: another engine (400); while it is in flight,
    while its student has another submission in flight (409), or when no live worker serves its device type."""
    from grader.server.policy import check_served
    from grader.server.workers import served_types

    if engine is not None and engine not in REGRADE_ENGINES:
        raise Refused(_("a regrade replays on the default engine, or natively (engine \"native\", after reviewing "
                        "a result held for review); not on {engine!r}").format(engine=engine))
    with db.session() as s:
        sub = s.get(Submission, submission_id)
        if sub is None:
            raise Refused(_("no such submission"), 404)
        if sub.in_flight:
            raise Refused(_("this submission is being graded already"), 409)
        kind, backend = sub.device_type, s.scalar(select(Assignment.backend).where(
            Assignment.id == sub.assignment_pk))
    check_served(device_type(kind), served_types(db, backend or DEFAULT_BACKEND))
    try:
        with db.session() as s:
            sub = s.get(Submission, submission_id)
            assert sub is not None
            sub.status, sub.in_flight, sub.generation = "queued", True, sub.generation + 1
            sub.regrade_failed, sub.cancelled_at, sub.replay_engine = None, None, engine
            for phase in PHASES[1:]:
                setattr(sub, f"{phase}_at", None)
            queue = sub.queue
    except IntegrityError as exc:  # the partial unique index: its student has another one in flight
        raise Refused(_("its student has another submission in flight: regrade it once that one is graded "
                        "(or cancelled)"), 409) from exc
    enqueue(submission_id, queue)
    with db.session() as s:
        s.get(Submission, submission_id).queued_at = now()  # type: ignore[union-attr]


def late_penalised(result: GradeResult, penalty: float) -> GradeResult:
    """A late final's result as it counts (counting.counted): `penalty` (a share) of its score taken off, said in
    its message."""
    if penalty <= 0:
        return result
    worth = counted(result.score, True, penalty)
    note = _("submitted late: {share:.0%} of the score taken off ({before:g} -> {after:g})").format(
        share=penalty, before=worth.raw, after=worth.score)
    return result.model_copy(update={"score": worth.score,
                                     "message": "\n".join(m for m in (result.message, note) if m)})


def export_finals(db: Database, assignment: str, out_dir: Path) -> list[str]:
    """The batch's exports (gradebook, Canvas, Gradescope, per-student reports; grader.batch.exports) of each
    student's graded `final` submission that counts (counting.py: the assignment's policy, latest, best or the
    student's choice); test and benchmark runs never reach a gradebook. Returns the exports' notes."""
    from grader.batch.exports import ClassRow, write_exports
    from grader.batch.intake import StudentSubmission
    from grader.drivers.batch import assignment_fingerprint
    from grader.orchestration.job import write_report

    info = assignment_fingerprint(assignment)
    with db.session() as s:
        found = s.scalar(select(Assignment).where(Assignment.name == assignment))
    if found is None:
        raise Refused(_("no assignment {name!r} on this server").format(name=assignment), 404)
    counts = set(counting_ids(db, found).values())
    with db.session() as s:
        rows = s.execute(select(Student, Submission, Result.document)
                         .join(Submission, Submission.student_pk == Student.id)
                         .join(Result, Result.submission_pk == Submission.id)
                         .where(Submission.id.in_(counts)).order_by(Student.student_id)).all()
    penalty = found.late_penalty or 0.0
    class_rows = [ClassRow(StudentSubmission(student.student_id, student.name, f"submission #{sub.id}", None,
                                             content_hash=sub.content_hash),
                           late_penalised(GradeResult.from_json(document), penalty if sub.late else 0.0),
                           stored_as=f"submission-{sub.id}")
                  for student, sub, document in rows]
    out_dir.mkdir(parents=True, exist_ok=True)
    return write_exports(class_rows, out_dir, info.title or assignment, write_report, info.columns)


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
        archives = [upload_of(s, sub.id) for _student, sub in latest.values()]
    settings, templates = settings_for(assignment)
    with tempfile.TemporaryDirectory(prefix="similarity-") as scratch:
        members = [Member(student.student_id, student.name or student.student_id, f"submission-{sub.id}",
                          unpack_upload(archive, Path(scratch) / str(sub.id)), sub.content_hash)
                   for (student, sub), archive in zip(latest.values(), archives, strict=True)]
        return compare_submissions(members, [t for t in templates if t.is_dir()], settings)
