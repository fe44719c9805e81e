"""The server's real parts, started by the tests on loopback: redis-server, PostgreSQL (initdb + pg_ctl in a
temp dir), `grade serve` as a subprocess (uvicorn), and Celery worker nodes (grader.server.run)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from grader.server.devices import device_type
from grader.server.run import free_port, start_worker, stop, wait_for_port

REPO = Path(__file__).resolve().parents[2]


def missing_redis() -> str | None:
    return None if shutil.which("redis-server") else "redis-server not installed (scripts/setup-system.sh --tests)"


def pg_bin() -> Path | None:
    root = Path("/usr/lib/postgresql")
    found = sorted(root.glob("*/bin/initdb")) if root.is_dir() else []
    return found[-1].parent if found else None


@dataclass
class Postgres:
    url: str
    proc_dir: Path
    bin: Path
    as_user: list[str]

    def stop(self) -> None:
        subprocess.run([*self.as_user, str(self.bin / "pg_ctl"), "-D", str(self.proc_dir), "-m", "immediate", "stop"],
                       capture_output=True, timeout=60)
        shutil.rmtree(self.proc_dir.parent, ignore_errors=True)


def start_postgres(tmp: Path) -> Postgres:
    """A throwaway cluster on a loopback port, trust auth; run as the `postgres` account when we are root
    (PostgreSQL refuses to run as root)."""
    bin_dir = pg_bin()
    assert bin_dir is not None
    as_user: list[str] = []
    if os.geteuid() == 0:
        as_user = ["runuser", "-u", "postgres", "--"]
        tmp = Path(tempfile.mkdtemp(prefix="bang-grader-pg-"))  # pytest's tmp is root-only (0700)
        shutil.chown(tmp, "postgres")
    data = tmp / "pgdata"
    done = subprocess.run([*as_user, str(bin_dir / "initdb"), "-D", str(data), "-A", "trust", "-U", "grader",
                           "--no-sync"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    port = free_port()
    subprocess.run([*as_user, str(bin_dir / "pg_ctl"), "-D", str(data), "-w", "-l", str(tmp / "pg.log"), "-o",
                    f"-p {port} -k {tmp} -c listen_addresses=127.0.0.1 -c fsync=off", "start"],
                   check=True, capture_output=True, timeout=120)
    return Postgres(f"postgresql+psycopg://grader@127.0.0.1:{port}/postgres", data, bin_dir, as_user)


@dataclass
class Server:
    url: str
    proc: subprocess.Popen
    data: Path
    db_url: str
    broker: str
    tokens: dict[str, str]
    startup: str = ""  # what `grade serve` printed before it listened
    workers: list[subprocess.Popen] = field(default_factory=list)
    standbys: dict[str, threading.Event] = field(default_factory=dict)

    def stand_by(self, kind: str | None = None) -> str:
        """A live worker of device type `kind` (default: the table's default type) as the server sees one: its
        heartbeat row (workers.worker_seen, beaten every few seconds from a thread here), with no Celery node
        behind it, so uploads for the type are taken and stay queued. Returns its name (for `leave`)."""
        from grader.server.db import Database
        from grader.server.devices import queue_name
        from grader.server.queue import HEARTBEAT_SECONDS
        from grader.server.workers import worker_seen

        kind = device_type(kind)
        name, stopped, db = f"standby-{kind}@tests", threading.Event(), Database(self.db_url)
        worker_seen(db, name, queue=queue_name("emu", kind), device_type=kind, device=kind)

        def beat() -> None:
            while not stopped.wait(HEARTBEAT_SECONDS):
                worker_seen(db, name, queue=queue_name("emu", kind), device_type=kind, device=kind)

        threading.Thread(target=beat, name=name, daemon=True).start()
        self.standbys[name] = stopped
        return name

    def leave(self, name: str) -> None:
        """The stand-by worker `name` goes away (its row removed, as a stopping worker's is)."""
        from grader.server.db import Database
        from grader.server.workers import worker_gone

        self.standbys.pop(name).set()
        worker_gone(Database(self.db_url), name)

    def client(self, who: str | None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.tokens[who]}"} if who else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30)

    def submit(self, who: str, folder: Path, mode: str = "test", assignment: str = "sigmoid",
               device: str | None = None) -> httpx.Response:
        """`who` uploads `folder` as `grade submit --server` packs it (to be graded on device type `device`)."""
        from grader.server.uploads import pack_folder

        form = {"assignment": assignment, "mode": mode, **({"device": device} if device else {})}
        with self.client(who) as c:
            return c.post("/api/submissions", data=form,
                          files={"archive": ("s.tar.gz", pack_folder(folder), "application/gzip")})

    def graded(self, who: str, sub_id: int, timeout: float = 600) -> dict:
        """`who`'s view of submission `sub_id` once it is graded (its status polled)."""
        deadline = time.monotonic() + timeout
        with self.client(who) as c:
            while (state := c.get(f"/api/submissions/{sub_id}").json())["status"] != "done":
                assert time.monotonic() < deadline, state
                time.sleep(0.5)
        return state

    @contextmanager
    def page_session(self, who: str, lang: str = "en") -> Iterator[httpx.Client]:
        """A browser-like session of `who`, logged in through the login form (cookie + CSRF token) with page
        language `lang`; its `csrf` attribute holds the session's CSRF token for the pages' forms."""
        with httpx.Client(base_url=self.url, timeout=30) as c:
            c.csrf = csrf_of(c.get(f"/login?lang={lang}").text)  # type: ignore[attr-defined]
            r = c.post("/login", data={"token": self.tokens[who], "csrf": c.csrf})  # type: ignore[attr-defined]
            assert r.status_code == 303, r.text
            c.csrf = csrf_of(c.get(r.headers["location"]).text)  # type: ignore[attr-defined]
            yield c

    def add_worker(self, name: str, kind: str | None = None) -> subprocess.Popen:
        """An emulator worker slot of device type `kind` (default: the device table's default type)."""
        proc = start_worker("emu", device_type(kind), name, broker=self.broker, db_url=self.db_url,
                            work_dir=self.data / f"work-{name}", log=self.data / f"{name}.log")
        self.workers.append(proc)
        return proc

    def stop(self) -> None:
        for stopped in self.standbys.values():
            stopped.set()
        for proc in [*self.workers, self.proc]:
            stop(proc)


def iso(t: float) -> str:
    """A UNIX time as the API's ISO 8601 with its offset."""
    from datetime import UTC, datetime

    return datetime.fromtimestamp(t, UTC).isoformat()


def csrf_of(html: str) -> str:
    import re

    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found is not None, html[:300]
    return found.group(1)


def start_server(data: Path, broker: str, students: list[str], db_url: str | None = None,
                 extra: list[str] | None = None, trust_seed: bool = True, standby: bool = True) -> Server:
    """`grade serve` with the sigmoid assignment, a roster of `students` and an instructor (`teacher`), and
    no workers (the tests start theirs); `standby`: a stand-by worker of the default device type (Server.stand_by),
    so uploads for it are taken and stay queued. Its seed is trusted (test_server_seed_guard.py tests the guard)."""
    data.mkdir(parents=True, exist_ok=True)
    roster = data / "roster.csv"
    roster.write_text("student_id,name,path\n" + "".join(f"{s},{s.title()},\n" for s in students))
    port = free_port()
    cmd = [sys.executable, "-m", "grader.cli", "serve", "--data", str(data), "--port", str(port), "--broker", broker,
           "--no-workers", "--roster", str(roster), "--instructor", "teacher", "-a", "sigmoid",
           *(["--trust-seed"] if trust_seed else []), *(extra or [])]
    if db_url:
        cmd += ["--db", db_url]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
                            cwd=REPO)
    tokens: dict[str, str] = {}
    deadline = time.monotonic() + (60 if trust_seed else 900)  # the seed guard grades the references first
    lines = []
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line)
        if line.startswith("bang-grader server:"):
            break
        if "\t" in line:
            who, token = line.strip().split("\t")
            tokens[who] = token
        assert time.monotonic() < deadline, "grade serve did not start"
    else:
        raise AssertionError(f"grade serve exited with {proc.wait()}: {''.join(lines)}")
    wait_for_port(port, proc=proc)
    server = Server(f"http://127.0.0.1:{port}", proc, data, db_url or f"sqlite:///{data / 'server.db'}", broker,
                    tokens, "".join(lines))
    if standby:
        server.stand_by()
    return server


def pool_children(pid: int) -> list[int]:
    """The processes whose parent is `pid` (a Celery node's grading process)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def sigkill(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)


CHROMIUM = "/usr/bin/chromium"


def launch_chromium(pw):  # noqa: ANN001, ANN201 - playwright's objects
    """Debian's Chromium under Playwright, quiet (no background network, no updates)."""
    return pw.chromium.launch(executable_path=CHROMIUM, args=[
        "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync"])


def login(browser, server: Server, who: str, lang: str, errors: list[str]):  # noqa: ANN001, ANN201
    """A fresh browser session of `who` logged in through the form, page language `lang`; page errors are
    collected in `errors` (statuses are asserted where they are expected)."""
    page = browser.new_context().new_page()
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(f"{server.url}/login?lang={lang}")
    page.fill("#token", server.tokens[who])
    page.click("#login")  # waits for the navigation to commit, not for the page it lands on to be parsed
    page.wait_for_load_state()  # so a locator's count() right after sees the whole page
    assert "/login" not in page.url, page.content()[:2000]
    return page
