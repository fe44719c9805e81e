"""The queues and the workers that serve them: each worker slot's heartbeat row (queue.py beats it), the
live workers and the device types they serve (an upload for another type is refused), what waits on each queue
and who serves it (the instructor's dashboard), and a submission's place in its queue: its position, an
estimate of its wait, the device type it waits for when no live worker serves its queue any more, and when its
follower should ask again."""

from __future__ import annotations

import math
from dataclasses import dataclass

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from grader.server.db import Database, Submission, Worker, now
from grader.server.devices import queue_name

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


def queue_depth(db: Database) -> int:
    with db.session() as s:
        return s.scalar(select(func.count()).select_from(Submission).where(Submission.status == "queued")) or 0


def served_types(db: Database, backend: str) -> list[str]:
    """The device types of `backend` that a live worker serves now (what an upload may ask for)."""
    prefix = queue_name(backend, "")
    return sorted({w.device_type for w in live_workers(db) if w.queue.startswith(prefix)})


# How many of a queue's latest gradings its estimate averages.
RECENT_GRADINGS = 20


# How long a follower of a submission (grade submit --server) waits before it asks again (QueuePlace.poll_seconds):
# a quarter of the estimated wait, between these bounds (the least without an estimate). Every student asking
# every half second while their job waits behind the class's cost the server's CPU the slots grade with; at most
# every 5 s, a class of 50 queued behind 3 slots still asked ten times a second, each poll ~4 queries and a request
# (stop 52: grade serve 0.39 CPU-s per graded submission at 200/50, the clients 0.10). A job a minute or more away
# asks every 15 s; one about to be graded or graded now asks as often as before (its estimate is short).
POLL_SECONDS = (0.5, 15.0)


@dataclass
class QueuePlace:
    """Where a submission stands in its queue, as its student is told (the page, the CLI's poll): how many jobs
    of its queue are ahead (0: next or being graded; None once graded or cancelled), how many live workers serve
    the queue, about how long until its result (from the queue's recent gradings; None: no worker, or no grading
    yet to tell from), and the device type it waits for when no live worker serves its queue."""

    position: int | None = None
    workers: int = 0
    estimate_seconds: float | None = None
    waiting_for: str | None = None
    poll_seconds: float = POLL_SECONDS[0]  # when to ask again (POLL_SECONDS)

    def as_json(self) -> dict:
        return self.__dict__.copy()


def grading_seconds(s: Session, queue: str) -> float | None:
    """The mean grading time (started to reported) of `queue`'s latest RECENT_GRADINGS gradings; None: none yet."""
    spans = s.execute(select(Submission.started_at, Submission.reported_at).where(
        Submission.queue == queue, Submission.status == "done", Submission.started_at.is_not(None),
        Submission.reported_at.is_not(None)).order_by(Submission.reported_at.desc())
        .limit(RECENT_GRADINGS)).all()
    spans = [done - started for started, done in spans if done >= started]
    return sum(spans) / len(spans) if spans else None


def queue_place(db: Database, submission_id: int) -> QueuePlace:
    """Submission `submission_id`'s place in its queue (QueuePlace). The estimate: the jobs being graded and the
    ones ahead shared among the queue's live workers, each taking the queue's mean grading time. One reading (a
    follower polls this): never the upload itself."""
    with db.session() as s:
        sub = s.execute(select(Submission.status, Submission.queue, Submission.device_type, Submission.started_at)
                        .where(Submission.id == submission_id)).first()
        if sub is None or sub.status not in ("queued", "running"):
            return QueuePlace()
        status, queue, kind, started = sub
        ahead = running = 0
        if status == "queued":
            ahead, running = s.execute(select(
                func.count().filter(Submission.status == "queued", Submission.id < submission_id),
                func.count().filter(Submission.status == "running"))
                .where(Submission.queue == queue, Submission.status.in_(("queued", "running")))).one()
        workers = s.scalar(select(func.count()).select_from(Worker).where(
            Worker.queue == queue, Worker.seen_at > now() - WORKER_STALE_SECONDS)) or 0
        mean = grading_seconds(s, queue) if workers else None
    place = QueuePlace(position=ahead, workers=workers)
    if not workers:
        place.waiting_for = kind or queue
        place.poll_seconds = POLL_SECONDS[1]  # nothing moves until a worker joins
        return place
    if mean is not None:
        if status == "running":
            place.estimate_seconds = max(0.0, mean - (now() - (started or now())))
        else:
            place.estimate_seconds = math.ceil((ahead + running + 1) / workers) * mean
        place.poll_seconds = min(max(place.estimate_seconds / 4, POLL_SECONDS[0]), POLL_SECONDS[1])
    return place
