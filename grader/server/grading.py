"""Grading one uploaded submission on a worker, and committing its result: the body of the queue's task.

The grading is the one job entry every front door uses (grader.orchestration.job.run_job): the batch's
sandbox, build cache and secret seed handling, and a grader failure becomes the job's internal_error result.
What differs is where the input comes from (the upload, stored in the database) and where the result goes:
one transaction writing the `results` row (the document; the report is drawn from it on each fetch), unique
per submission and stamped with the grading's generation, so a job delivered twice (its first worker SIGKILLed
before the broker had the acknowledgement) is graded again and counted once, and a regrade's result replaces
the one before only when it is committed (a failed regrade keeps it). A cancelled job is never graded. The task
returns, and the broker gets its acknowledgement, only after that commit.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from pathlib import Path

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError

from grader.drivers.batch import sweep_dead_workers_containers
from grader.i18n import resolve_language
from grader.orchestration.build_cache import default_build_cache
from grader.orchestration.options import GradeEnvironment, GradeObserver, GradeRequest, sandbox_name
from grader.results import GradeResult, Verdict
from grader.results import Student as RosterStudent
from grader.server.db import (
    Assignment,
    Database,
    Result,
    Student,
    Submission,
    SupersededResult,
    now,
    upload_of,
)
from grader.server.devices import grading_device
from grader.server.uploads import unpack_upload

log = logging.getLogger(__name__)

# The progress fractions grade_submission reports (orchestration.policy): past the build at the probe round
# (0.3), past the runs when scoring starts (0.9). Fractions, not step texts, since those are translated.
BUILT_FRACTION = 0.3
RAN_FRACTION = 0.9


def mode_stages(assignment: str, mode: str) -> tuple[str, ...] | None:
    """`test`: correctness with the first stage only (fast, never ranked); `benchmark` and `final`: every stage."""
    if mode != "test":
        return None
    from grader.spec import load_assignment

    return (load_assignment(assignment).stages[0].name,)


def stamp(db: Database, submission_id: int, phase: str) -> None:
    """Records the first time `submission_id` reached `phase` in this grading run."""
    column = getattr(Submission, f"{phase}_at")
    with db.session() as s:
        s.execute(update(Submission).where(Submission.id == submission_id, column.is_(None)).values({column: now()}))


def grade_uploaded(db: Database, submission_id: int, *, worker: str, work_root: Path, sandbox: str = "auto",
                   lang: str | None = None, slot_device: str | None = None, slot_type: str | None = None) -> str:
    """Grades submission `submission_id` on this slot's device (`slot_device`: an emulator profile or a card;
    default the device type the submission asked for) and commits its result; returns what happened
    ("committed", "already committed" for a redelivered job another worker finished). `slot_type` is the device
    type the slot states, recorded with the worker. Raises only for what the broker should redeliver (the
    database unreachable)."""
    with db.session() as s:
        sub = s.get(Submission, submission_id)
        if sub is None:
            return "no such submission"
        generation = sub.generation
        if s.scalar(select(Result.id).where(Result.submission_pk == submission_id,
                                            Result.generation >= generation)) is not None:
            return "already committed"
        # claimed only while queued (or running: a redelivery); a cancelled job is never graded
        if not s.execute(update(Submission).where(Submission.id == submission_id,
                                                  Submission.status.in_(("queued", "running")))
                         .values(status="running")).rowcount:
            return "cancelled"
        assignment = s.get(Assignment, sub.assignment_pk)
        student = s.get(Student, sub.student_pk)
        assert assignment is not None and student is not None
        # A redelivered job starts its phases again: they describe the grading that counts.
        # the slot's card or profile, as a batch worker's --device
        device = slot_device or grading_device(assignment.backend, sub.device_type or assignment.device)
        sub.worker, sub.grade_runs = worker, sub.grade_runs + 1
        sub.graded_type, sub.graded_device = slot_type, device
        sub.started_at, sub.built_at, sub.ran_at, sub.scored_at = now(), None, None, None
        archive, mode, engine = upload_of(s, sub.id), sub.mode, sub.replay_engine
        lang = lang or sub.lang  # the language its student asked in: the report and messages are theirs
        job_spec = (assignment.name, assignment.backend, assignment.seed, student.student_id, student.name)
    name, backend, seed, student_id, student_name = job_spec
    work_root.mkdir(parents=True, exist_ok=True)
    sweep_dead_workers_containers()  # the sandboxes of a grading process killed before this one, as a batch does
    unpack_dir = Path(tempfile.mkdtemp(prefix=f"upload-{submission_id}-", dir=work_root))
    try:
        result = _grade(db, submission_id, archive, unpack_dir, name=name, backend=backend, device=device,
                        seed=seed, student_id=student_id, student_name=student_name, mode=mode,
                        sandbox=sandbox, lang=lang, replay_engine=engine)
    finally:
        shutil.rmtree(unpack_dir, ignore_errors=True)
    stamp(db, submission_id, "scored")
    return commit_result(db, submission_id, result, generation, replay_engine=engine)


def _grade(db: Database, submission_id: int, archive: bytes, unpack_dir: Path, *, name: str, backend: str,
           device: str | None, seed: str, student_id: str, student_name: str, mode: str, sandbox: str,
           lang: str | None, replay_engine: str | None = None) -> GradeResult:
    """`replay_engine`: the trusted replay's engine the submission asks for (None: the default; "native": an
    instructor's regrade after reviewing a result held for review, admin.regrade), GradeEnvironment's."""
    from grader.drivers.batch import assignment_fingerprint
    from grader.orchestration.job import run_job

    root = unpack_upload(archive, unpack_dir)
    request = GradeRequest(assignment=name, stages=mode_stages(name, mode), seed_mode="secret", seed=seed,
                           lang=resolve_language(lang, assignment_fingerprint(name).lang))
    environment = GradeEnvironment(backend=backend, device=device, sandbox=sandbox_name(sandbox),
                                   build_cache=default_build_cache(), batch=True, replay_engine=replay_engine)
    reached = {"built": False, "ran": False}

    def progress(_step: str, fraction: float) -> None:
        for phase, at in (("built", BUILT_FRACTION), ("ran", RAN_FRACTION)):
            if fraction >= at and not reached[phase]:
                reached[phase] = True
                stamp(db, submission_id, phase)

    # no folder: the database holds what counts (commit_result)
    return run_job(root, request, environment, GradeObserver(progress=progress),
                   student=RosterStudent(id=student_id, name=student_name or student_id)).result


def commit_result(db: Database, submission_id: int, result: GradeResult, generation: int = 0,
                  replay_engine: str | None = None) -> str:
    """The commit point: the submission's result row (one per submission) holding grading `generation` (0 the
    first, each regrade one more; `replay_engine` the engine its grading was asked to replay on, None the
    default) and the submission's verdict, in one transaction. A second commit of the same
    generation changes nothing (a redelivered job); a regrade's replaces the one before only now, so the old
    result is shown until this commit; a regrade the grader failed on (internal error) keeps the old result and
    is recorded as failed. Returns what happened."""
    try:
        with db.session() as s:
            sub = s.get(Submission, submission_id, with_for_update=True)
            assert sub is not None
            held = s.scalar(select(Result).where(Result.submission_pk == submission_id).with_for_update())
            if held is not None and held.generation >= generation:
                return "already committed"
            sub.status, sub.in_flight, sub.reported_at = "done", None, now()
            if held is not None and result.verdict is Verdict.INTERNAL_ERROR:
                sub.regrade_failed = (result.message or str(result.verdict)).splitlines()[0][:500]
                log.warning("regrade of submission %s failed; its result before stays: %s", submission_id,
                            sub.regrade_failed)
                return "regrade failed"
            if held is None:
                s.add(Result(submission_pk=submission_id, document=result.to_json(),
                             committed_at=now(), generation=generation, replay_engine=replay_engine))
                s.flush()  # the unique constraint decides a race between two deliveries here
            else:  # the result before is kept among the superseded ones
                s.add(SupersededResult(submission_pk=submission_id, generation=held.generation,
                                       document=held.document, committed_at=held.committed_at, superseded_at=now(),
                                       replay_engine=held.replay_engine))
                held.document, held.committed_at = result.to_json(), now()
                held.generation, held.replay_engine = generation, replay_engine
            sub.verdict, sub.score, sub.max_score = str(result.verdict), result.score, result.max_score
            sub.regrade_failed = None
    except IntegrityError:
        return "already committed"
    return "committed"
