"""Starting the server's processes: the broker (a private redis-server when no URL is given), one Celery
worker per device slot, and uvicorn serving the app. `grade serve` and the tests call these."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from grader.i18n import _
from grader.server.devices import queue_name
from grader.server.queue import (
    ENV_BROKER,
    ENV_DB,
    ENV_NODE,
    ENV_QUEUE,
    ENV_SANDBOX,
    ENV_SLOT_DEVICE,
    ENV_SLOT_TYPE,
    ENV_WORK,
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_port(port: int, timeout: float = 30.0, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{proc.args[0]} exited with {proc.returncode} before listening")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout:.0f} s")


class BrokerUnavailable(RuntimeError):
    """No broker URL given and no redis-server to start one."""


def start_redis(data_dir: Path, port: int | None = None) -> tuple[subprocess.Popen, str]:
    """A private redis-server on loopback, persisting to `data_dir` (append-only file: a restarted broker
    still holds the queued jobs). Returns the process and its URL."""
    exe = shutil.which("redis-server")
    if exe is None:
        raise BrokerUnavailable("redis-server is not installed (sudo ./grade setup, or apt-get install "
                                "redis-server; or pass --broker redis://HOST:PORT/0)")
    port = port or free_port()
    data_dir.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen([exe, "--bind", "127.0.0.1", "--port", str(port), "--dir", str(data_dir),
                             "--appendonly", "yes", "--save", "", "--protected-mode", "yes"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    wait_for_port(port, proc=proc)
    return proc, f"redis://127.0.0.1:{port}/0"


def worker_command(queue: str, name: str) -> list[str]:
    return [sys.executable, "-m", "celery", "-A", "grader.server.queue", "worker", "-Q", queue, "--concurrency", "1",
            "--pool", "prefork", "-n", f"{name}@%h", "--without-gossip", "--without-mingle", "--loglevel", "INFO"]


def start_worker(backend: str, device_type: str, name: str, *, broker: str, db_url: str, work_dir: Path,
                 sandbox: str = "auto", device: str | None = None, log: Path | None = None) -> subprocess.Popen:
    """One Celery node with one grading process: a device slot of `device_type` (a device table key), consuming
    that type's queue and grading on `device` (a card; an emulator slot's device is its type). Its own process
    group, so stopping it stops its pool child too."""
    queue = queue_name(backend, device_type)
    env = {**os.environ, ENV_BROKER: broker, ENV_DB: db_url, ENV_WORK: str(work_dir), ENV_SANDBOX: sandbox,
           ENV_SLOT_TYPE: device_type, ENV_SLOT_DEVICE: device or device_type, ENV_QUEUE: queue,
           ENV_NODE: f"{name}@{socket.gethostname()}"}
    out = open(log, "ab") if log is not None else subprocess.DEVNULL  # noqa: SIM115 - the child keeps it
    return subprocess.Popen(worker_command(queue, name), env=env, stdout=out, stderr=subprocess.STDOUT,
                            start_new_session=True)


def stop(proc: subprocess.Popen, timeout: float = 15.0) -> None:
    """SIGTERM to the process group (Celery finishes nothing new, redis saves), SIGKILL after `timeout`."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    except ProcessLookupError:
        pass


@dataclass
class Cluster:
    """The processes `grade serve` started besides the web server, stopped together."""

    broker: str
    procs: list[subprocess.Popen] = field(default_factory=list)

    def stop(self) -> None:
        for proc in reversed(self.procs):
            stop(proc)


def slot_types(backend: str, device: str | None, workers: int | None,
               device_type: str | None = None) -> list[tuple[str, str | None]]:
    """(device type, device) of each worker slot of `backend` here (drivers.batch.device_slots, as
    `grade batch`). An emulator slot's type is its profile: `device_type`, else `device`, else the table's
    default. A card's type is read from the card (grader.server.devices.card_type) unless `device_type`
    states it. Raises DeviceTypeError (or BatchError: no slot can run)."""
    from grader.backends import get_backend
    from grader.batch.pool import Slot
    from grader.drivers.batch import BatchError, device_slots
    from grader.sandbox.pod_runner import in_cluster
    from grader.server.devices import DeviceTypeError, card_type
    from grader.server.devices import device_type as spelled

    if get_backend(backend).devices_are_profiles:
        kind = spelled(device_type or device)
        if device is not None and device_type is not None and spelled(device) != kind:
            raise DeviceTypeError(_("--device {device} and --device-type {kind} differ: an emulator slot grades on "
                                    "its device type's profile").format(device=device, kind=device_type))
        return [(kind, kind)] * len(device_slots(backend, workers, kind))
    try:
        slots = device_slots(backend, workers, device)
    except BatchError:
        if not in_cluster()[0]:
            raise
        # a worker pod (deploy/k8s): no card here; each run pod it starts requests one (the backend's
        # pod_resources), and there that card is `device`
        slots = [Slot(i, device or "0") for i in range(workers or 1)]
    kind = spelled(device_type) if device_type is not None else None
    return [(kind or card_type(str(slot.device)), slot.device) for slot in slots]


def start_slots(backend: str, device: str | None, workers: int | None, *, broker: str, db_url: str,
                data_dir: Path, sandbox: str = "auto", device_type: str | None = None) -> list[subprocess.Popen]:
    """One worker per device slot of `backend` (slot_types), each consuming its device type's queue."""
    return [start_worker(backend, kind, f"{backend}-{kind}-slot{index}", broker=broker, db_url=db_url,
                         work_dir=data_dir / "work", sandbox=sandbox, device=slot_device,
                         log=data_dir / f"worker-{index}.log")
            for index, (kind, slot_device) in enumerate(slot_types(backend, device, workers, device_type))]


# The demo's assignments: the README's examples (matmul's reference_kernels/matmul/..., sigmoid's) can be submitted.
DEMO_ASSIGNMENTS = ("sigmoid", "matmul")


def secret_key(data_dir: Path) -> str:
    """The session cookies' signing key, made once per data folder (0600)."""
    import secrets

    from grader.atomic_file import atomic_write_text

    path = data_dir / "secret_key"
    if not path.exists():
        atomic_write_text(path, secrets.token_hex(32), mode=0o600)
    return path.read_text().strip()


def demo_class(db_url: str) -> dict[str, str]:
    """The demo: its assignments (DEMO_ASSIGNMENTS) on the emulator, an instructor and two students; their
    tokens."""
    from grader.server.accounts import add_account
    from grader.server.admin import ensure_assignment
    from grader.server.db import Database

    db = Database(db_url)
    for name in DEMO_ASSIGNMENTS:
        ensure_assignment(db, name)
    return {"instructor": add_account(db, "demo-instructor", "Demo Instructor", role="instructor"),
            "demo-alice": add_account(db, "demo-alice", "Alice (demo)"),
            "demo-bob": add_account(db, "demo-bob", "Bob (demo)")}


def serve(*, host: str, port: int, data_dir: Path, db_url: str | None, broker: str | None, workers: int | None,
          backend: str, device: str | None, sandbox: str, start_workers: bool, demo: bool,
          device_type: str | None = None, log: Callable[[str], None] = print,
          reference_root: Path | None = None) -> None:
    """Runs the server until interrupted: migrates the database, starts the broker (if no URL) and one worker
    per device slot, then serves HTTP on host:port."""
    import uvicorn

    from grader.server.app import create_app
    from grader.server.db import Database, migrate, sqlite_url
    from grader.server.queue import app as celery_app
    from grader.server.queue import enqueue

    data_dir.mkdir(parents=True, exist_ok=True)
    db_url = db_url or sqlite_url(data_dir)
    migrate(db_url)
    cluster = Cluster(broker or "")
    try:
        if not broker:
            proc, cluster.broker = start_redis(data_dir / "redis")
            cluster.procs.append(proc)
        celery_app.conf.broker_url = cluster.broker
        from grader.server.intake import requeue_stranded

        if moved := requeue_stranded(Database(db_url), enqueue):
            log(f"{moved} queued submission(s) moved to their device type's queue")
        from grader.server.admin import open_assignment
        from grader.server.jobs import interrupt_stale, start_open

        if stale := interrupt_stale(Database(db_url)):
            log(f"{stale} background job(s) of the last run interrupted (start them again from the dashboard)")
        if demo:
            tokens = demo_class(db_url)
            for name in DEMO_ASSIGNMENTS:  # in the background: the server answers meanwhile
                start_open(Database(db_url), name, open_assignment, sandbox, reference_root=reference_root)
            log(f"opening {', '.join(DEMO_ASSIGNMENTS)} in the background: each opens once its reference kernels "
                "pass on its seed (the dashboard shows the progress)")
        if start_workers:
            cluster.procs += start_slots(backend, device, workers, broker=cluster.broker, db_url=db_url,
                                         data_dir=data_dir, sandbox=sandbox, device_type=device_type)
        url = f"http://{host}:{port}/"
        log(f"bang-grader server: {url} (database {db_url.split('@')[-1]}, broker {cluster.broker})")
        if demo:
            log(f"demo tokens: student demo-alice {tokens['demo-alice']}  student demo-bob {tokens['demo-bob']}")
            log(f"             instructor {tokens['instructor']}")
            log(f"try: BANG_GRADER_TOKEN={tokens['demo-alice']} ./grade submit --server {url} "
                f"reference_kernels/example")
        app = create_app(Database(db_url), enqueue, secret_key(data_dir), sandbox=sandbox,
                         reference_root=reference_root)
        # open event streams (live pages) must not hold a stopping server: they reconnect to the next one
        uvicorn.run(app, host=host, port=port, log_level="warning", timeout_graceful_shutdown=5)
    finally:
        cluster.stop()
