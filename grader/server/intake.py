"""Taking in an upload: the intake policy's decisions (policy.py) asked in order of the assignment's row, the
student's uploads (and refused uploads) of the last hour and the live workers' device types, then the archive
inspected, the submission stored (one in flight per student) and queued on its device type's queue; a refused
upload recorded (it counts against the rate); a queued submission cancelled; and queued submissions routed
again to their type's queue (requeue_stranded)."""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError

from grader.i18n import _
from grader.server.db import Assignment, Database, Refusal, Result, Student, Submission, Upload, now
from grader.server.devices import DeviceTypeError, device_type, queue_name
from grader.server.jobs import is_opening
from grader.server.policy import (
    RATE_WINDOW_SECONDS,
    Refused,
    check_mode,
    check_open,
    check_rate,
    check_refused,
    check_served,
    device_for,
    lateness,
    refused_upload,
)
from grader.server.uploads import UploadError, inspect_upload
from grader.server.workers import served_types

Enqueue = Callable[[int, str], None]  # (submission id, queue name)


def take_submission(db: Database, student: Student, assignment: str, mode: str, data: bytes,
                    enqueue: Enqueue, device: str | None = None, lang: str | None = None) -> Submission:
    """Checks an upload and queues it on its device type's queue (`device`, else the assignment's); raises
    Refused (nothing stored, no attempt counted) for a bad mode, an unknown or closed assignment, an upload after
    the deadline's late window, one over the hourly rate (429; refused uploads count), a device type the table
    lacks or no live worker serves (409), a bad upload, or a submission of this student still in flight (409).
    One inside the late window is taken and marked late. The cheap decisions come first, the archive's
    inspection (the costly one) last; the caller runs it off the event loop. `lang`: the student's language,
    which the worker grades in (its messages are then theirs)."""
    check_mode(mode)
    with db.session() as s:
        found = s.scalar(select(Assignment).where(Assignment.name == assignment))
        if found is None:
            raise Refused(_("no assignment {name!r} on this server").format(name=assignment), 404)
        check_open(assignment, is_open=found.is_open, guard_failed=bool(found.seed_failures),
                   opening=not found.is_open and is_opening(db, assignment))
        at = now()
        late = lateness(assignment, at, found.deadline, found.late_until)
        if found.per_hour:
            since = at - RATE_WINDOW_SECONDS
            recent = [*s.scalars(select(Submission.submitted_at).where(
                Submission.student_pk == student.id, Submission.assignment_pk == found.id,
                Submission.submitted_at > since)),
                *s.scalars(select(Refusal.at).where(Refusal.student_pk == student.id,
                                                    Refusal.assignment == assignment, Refusal.at > since))]
            check_rate(assignment, at, found.per_hour, sorted(recent))
        asked = device_for(assignment, mode, device, found.device, lambda kind: _calibrated(found, kind))
        assignment_pk, backend, queue = found.id, found.backend, queue_name(found.backend, asked)
    check_served(asked, served_types(db, backend))
    try:
        digest = inspect_upload(data)
    except UploadError as exc:
        raise refused_upload(exc) from exc
    try:
        with db.session() as s:
            sub = Submission(student_pk=student.id, assignment_pk=assignment_pk, mode=mode,
                             content_hash=digest, queue=queue, device_type=asked, status="queued", in_flight=True,
                             grade_runs=0, submitted_at=at, late=late, lang=lang)
            s.add(sub)
            s.flush()  # its id, for its upload's row (the same transaction: both or neither)
            s.add(Upload(submission_pk=sub.id, archive=data))
    except IntegrityError as exc:  # the partial unique index: one in flight per student
        raise Refused(_("you already have a submission being graded; wait for its result or cancel it"),
                      409) from exc
    enqueue(sub.id, queue)
    with db.session() as s:
        s.get(Submission, sub.id).queued_at = now()  # type: ignore[union-attr]
    return sub


def check_refusals(db: Database, student: Student) -> None:
    """Before an upload is read: Refused (429) once `student`'s refused uploads of the last hour reached
    policy.REFUSED_PER_HOUR."""
    at = now()
    with db.session() as s:
        refused = sorted(s.scalars(select(Refusal.at).where(Refusal.student_pk == student.id,
                                                            Refusal.at > at - RATE_WINDOW_SECONDS)))
    check_refused(at, refused)


def record_refusal(db: Database, student: Student, assignment: str | None, refused: Refused) -> None:
    """An upload refused after it was read counts against `student`'s rate (a 429 was not read: it does not)."""
    if refused.status == 429:
        return
    with db.session() as s:
        s.add(Refusal(student_pk=student.id, assignment=(assignment or None) and assignment[:64],
                      status=refused.status, at=now()))


def cancel_submission(db: Database, submission_id: int, viewer: Student) -> str:
    """Cancels a queued submission: its student's own, or any for an instructor (another's id is a 404, as a
    missing one). A first grading becomes `cancelled` (final; the student's slot is free at once); a queued
    regrade is dropped and the result before it stays. A job already being graded is not cancelled (409).
    Returns the submission's status after it."""
    with db.session() as s:
        sub = s.get(Submission, submission_id)
        if sub is None or (viewer.role != "instructor" and sub.student_pk != viewer.id):
            raise Refused(_("no such submission"), 404)
        graded = s.scalar(select(Result.id).where(Result.submission_pk == submission_id)) is not None
        status = "done" if graded else "cancelled"
        # only while still queued: a worker that took it in between wins (grading.grade_uploaded claims it)
        taken = s.execute(update(Submission).where(Submission.id == submission_id, Submission.status == "queued")
                          .values(status=status, in_flight=None, cancelled_at=now())).rowcount
        if not taken:
            raise Refused(_("submission #{id} is not waiting in the queue any more: it cannot be cancelled").format(
                id=submission_id), 409)
    return status


def _calibrated(assignment: Assignment, kind: str) -> bool:
    """Whether a timed grading of `assignment` on device type `kind` can score speed: a profile's thresholds are
    per profile (grade calibrate --device TYPE); a card's are per card and checked where it grades."""
    from grader.backends import get_backend
    from grader.scoring.thresholds import thresholds_path
    from grader.spec import load_assignment

    return not get_backend(assignment.backend).devices_are_profiles or \
        thresholds_path(load_assignment(assignment.name), assignment.backend, kind).is_file()


def requeue_stranded(db: Database, enqueue: Enqueue) -> int:
    """Queued submissions whose queue no worker consumes any more (queued before queues were named by device
    type: grade.emu.default, grade.mlu.0) are queued again on their type's queue; returns how many. A copy
    left in the old queue is never taken (and would be counted once if it were: grading.commit_result)."""
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
