"""The queues and the workers that serve them: each worker slot's heartbeat row (queue.py beats it), the
live workers, what waits on each queue and who serves it (the instructor's dashboard), a submission's place
in its queue, and the device type a queued submission waits for when no live worker serves its queue."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import delete, func, select

from grader.server.db import Database, Submission, Worker, now

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


def queue_position(db: Database, submission_id: int) -> int | None:
    """How many submissions of the same queue are ahead of this one (0: next or grading); None once done."""
    with db.session() as s:
        sub = s.get(Submission, submission_id)
        if sub is None or sub.status != "queued":
            return None if sub is None or sub.status == "done" else 0
        return s.scalar(select(func.count()).select_from(Submission).where(
            Submission.queue == sub.queue, Submission.status == "queued", Submission.id < sub.id)) or 0


def waiting_for(db: Database, submission_id: int) -> str | None:
    """The device type a queued submission waits for when no live worker of that type consumes its queue
    (it is graded when one joins); None otherwise."""
    with db.session() as s:
        sub = s.get(Submission, submission_id)
        if sub is None or sub.status != "queued":
            return None
        queue, kind = sub.queue, sub.device_type
    return None if any(w.queue == queue for w in live_workers(db)) else kind or queue
