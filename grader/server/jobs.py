"""The instructor's long actions, run in the background of the server process with their progress in the
database (admin_jobs), so a button returns at once and the dashboard shows how far they are: opening an
assignment (its reference-seed guard grades the reference kernels first, once per seed; matmul's take over a
minute). One runs at a time (they grade in the sandbox, beside the workers); the others wait their turn. A job
the server was stopped in is marked interrupted when it starts again (interrupt_stale)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import select, update

from grader.i18n import _
from grader.server.db import AdminJob, Assignment, Database, now
from grader.server.policy import Refused

log = logging.getLogger(__name__)

_turn = threading.Lock()  # one background job at a time
RUNNING = ("waiting", "running")


@dataclass
class JobView:
    id: int
    kind: str
    assignment: str
    state: str  # waiting | running | done | failed | interrupted
    done: int  # references graded so far
    total: int  # references to grade (0: not known yet)
    current: str  # the one being graded
    message: str | None
    started_at: float
    finished_at: float | None

    @property
    def active(self) -> bool:
        return self.state in RUNNING

    def as_json(self) -> dict:
        return {**self.__dict__, "active": self.active}


def _view(job: AdminJob) -> JobView:
    done, _sep, rest = (job.progress or "0|0|").partition("|")
    total, _sep, current = rest.partition("|")
    return JobView(job.id, job.kind, job.assignment, job.state, int(done or 0), int(total or 0), current,
                   job.message, job.started_at, job.finished_at)


def _update(db: Database, job_id: int, **values: object) -> None:
    with db.session() as s:
        s.execute(update(AdminJob).where(AdminJob.id == job_id).values(updated_at=now(), **values))


# admin.open_assignment (its SeedCheck: .failures, .message), handed in by the caller: admin stands above this
# module (admin -> intake -> jobs)
Opener = Callable[..., Any]


def start_open(db: Database, assignment: str, opener: Opener, sandbox: str = "auto", *,
               reference_root: Path | None = None) -> int:
    """Opens `assignment` in the background with `opener` (admin.open_assignment: its reference-seed guard
    first); returns the job's id at once. Refused 404 for an unknown assignment, 409 while one is opening it
    already."""
    if is_opening(db, assignment):
        raise Refused(_("{name} is being opened already: see its progress on the dashboard").format(
            name=assignment), 409)
    with db.session() as s:
        if s.scalar(select(Assignment.id).where(Assignment.name == assignment)) is None:
            raise Refused(_("no assignment {name!r} on this server").format(name=assignment), 404)
        job = AdminJob(kind="open", assignment=assignment, state="waiting", progress="0|0|", started_at=now(),
                       updated_at=now())
        s.add(job)
        s.flush()
        job_id = job.id
    threading.Thread(target=_run_open, args=(db, job_id, assignment, opener, sandbox, reference_root),
                     name=f"open-{assignment}", daemon=True).start()
    return job_id


def _run_open(db: Database, job_id: int, assignment: str, opener: Opener, sandbox: str,
              reference_root: Path | None) -> None:
    with _turn:
        _update(db, job_id, state="running")

        def progress(done: int, total: int, current: str) -> None:
            _update(db, job_id, progress=f"{done}|{total}|{current}")

        try:
            check = opener(db, assignment, sandbox, reference_root=reference_root, progress=progress)
        except Exception as exc:  # noqa: BLE001 - the job says what went wrong; the server goes on
            log.exception("opening %s failed", assignment)
            _update(db, job_id, state="failed", message=str(exc) or type(exc).__name__, finished_at=now())
            return
        with db.session() as s:
            done = s.scalar(select(AdminJob.progress).where(AdminJob.id == job_id)) or "0|0|"
        total = done.split("|")[1]
        _update(db, job_id, state="failed" if check.failures else "done", message=check.message or None,
                progress=f"{total}|{total}|", finished_at=now())


def is_opening(db: Database, assignment: str) -> bool:
    """Whether a job is opening `assignment` now (waiting or running)."""
    with db.session() as s:
        return s.scalar(select(AdminJob.id).where(AdminJob.assignment == assignment,
                                                  AdminJob.state.in_(RUNNING))) is not None


def job(db: Database, job_id: int) -> JobView:
    with db.session() as s:
        found = s.get(AdminJob, job_id)
        if found is None:
            raise Refused(_("no such job"), 404)
        return _view(found)


def recent_jobs(db: Database, limit: int = 10) -> list[JobView]:
    """The latest jobs, newest first (the dashboard's list)."""
    with db.session() as s:
        return [_view(j) for j in s.scalars(select(AdminJob).order_by(AdminJob.id.desc()).limit(limit))]


def interrupt_stale(db: Database) -> int:
    """At the server's start: the jobs a stopped server left waiting or running are interrupted (the instructor
    starts them again); returns how many."""
    with db.session() as s:
        return s.execute(update(AdminJob).where(AdminJob.state.in_(RUNNING)).values(
            state="interrupted", finished_at=now(), updated_at=now())).rowcount
