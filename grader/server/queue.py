"""The job queue: Celery on Redis (Debian's redis-server), one task per submission.

Why Celery: acks_late + reject_on_worker_lost give "acknowledged only after the commit" with the least code
of ours; a worker joins from any machine with the broker's URL (and the database's); queues route a job to
the workers of its backend and device type. The task message carries the submission's id only: the upload and
the secret seed stay in the database, which the server and the workers share, never on the broker.

Redelivery: a grading process killed mid-job (SIGKILL, OOM) is seen by its Celery node, which rejects the
message back to the queue at once (reject_on_worker_lost); a whole node that vanishes leaves its message
unacknowledged, and Redis hands it out again after the visibility timeout (BANG_GRADER_VISIBILITY_TIMEOUT,
default one hour, longer than any grading). Either way grading.commit_result counts it once.

    celery -A grader.server.queue worker -Q grade.emu.mlu370-x8 --concurrency 1 -n emu-mlu370-x8-slot0@%h
is what `grade serve` (and `grade serve --worker-only` on another machine) starts per device slot. Queues are
named by backend and device TYPE (grader.server.devices), never by card: any slot of the type takes the job.
Each slot's grading process records itself in the database's `workers` table every few seconds (heartbeat),
so the dashboard tells a type that no live worker serves from one that is only busy.
"""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path

from celery import Celery
from celery.signals import worker_process_init, worker_process_shutdown

from grader.cache_home import cache_home

ENV_BROKER = "BANG_GRADER_BROKER"
ENV_DB = "BANG_GRADER_DB"
ENV_WORK = "BANG_GRADER_WORK"  # a worker's scratch folder
ENV_SANDBOX = "BANG_GRADER_SANDBOX"
ENV_SLOT_DEVICE = "BANG_GRADER_SLOT_DEVICE"  # the card (or profile) a worker slot grades on
ENV_SLOT_TYPE = "BANG_GRADER_SLOT_TYPE"  # the device type it states (the queue it consumes)
ENV_NODE = "BANG_GRADER_NODE"  # the Celery node's name, as the workers table lists it
ENV_QUEUE = "BANG_GRADER_QUEUE"  # the queue it consumes
HEARTBEAT_SECONDS = 5.0
DEFAULT_BROKER = "redis://127.0.0.1:6379/0"

app = Celery("bang_grader", broker=os.environ.get(ENV_BROKER, DEFAULT_BROKER))
app.conf.update(
    task_acks_late=True,
    task_reject_on_worker_lost=True,
    worker_prefetch_multiplier=1,  # a slot holds one job: the others stay on the queue for other slots
    task_serializer="json",
    accept_content=["json"],
    task_ignore_result=True,  # results go to the database, not to a Celery backend
    broker_connection_retry_on_startup=True,
    broker_transport_options={"visibility_timeout": int(os.environ.get("BANG_GRADER_VISIBILITY_TIMEOUT", "3600"))},
    worker_hijack_root_logger=False,
)

_db = None


def database():  # noqa: ANN201 - grader.server.db.Database, imported late (the server's and the worker's)
    global _db
    if _db is None:
        from grader.server.db import Database

        _db = Database(os.environ[ENV_DB])
    return _db


_beating = threading.Event()


@worker_process_init.connect
def _fresh_connections(**_kwargs: object) -> None:
    global _db
    _db = None  # a forked pool process never shares its parent's database connections
    if os.environ.get(ENV_SLOT_TYPE) and os.environ.get(ENV_DB):
        threading.Thread(target=_heartbeat, name="heartbeat", daemon=True).start()


def _heartbeat() -> None:
    """The slot's row in `workers`, refreshed until the process ends (a killed one just stops refreshing)."""
    from grader.server.workers import worker_seen

    name = os.environ.get(ENV_NODE) or f"{os.getpid()}@{socket.gethostname()}"
    while not _beating.is_set():
        try:
            worker_seen(database(), name, queue=os.environ.get(ENV_QUEUE, ""), device_type=os.environ[ENV_SLOT_TYPE],
                        device=os.environ.get(ENV_SLOT_DEVICE))
        except Exception:  # noqa: BLE001 - the database away for a moment: the next beat tries again
            pass
        _beating.wait(HEARTBEAT_SECONDS)


@worker_process_shutdown.connect
def _gone(**_kwargs: object) -> None:
    from grader.server.workers import worker_gone

    _beating.set()
    if os.environ.get(ENV_NODE) and os.environ.get(ENV_DB):
        try:
            worker_gone(database(), os.environ[ENV_NODE])
        except Exception:  # noqa: BLE001 - stale rows age out anyway
            pass


@app.task(name="grader.grade", bind=True)
def grade(self, submission_id: int) -> str:  # noqa: ANN001 - Celery's bound task
    from grader.server.grading import grade_uploaded

    work = Path(os.environ.get(ENV_WORK) or cache_home() / "server-work")
    return grade_uploaded(database(), submission_id, worker=self.request.hostname or socket.gethostname(),
                          work_root=work / str(os.getpid()), sandbox=os.environ.get(ENV_SANDBOX, "auto"),
                          slot_device=os.environ.get(ENV_SLOT_DEVICE) or None,
                          slot_type=os.environ.get(ENV_SLOT_TYPE) or None)


def enqueue(submission_id: int, queue: str) -> None:
    grade.apply_async(args=[submission_id], queue=queue)
