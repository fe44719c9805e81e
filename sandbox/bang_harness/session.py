"""`python -m bang_harness run` with /io/rounds/: every round of one submission in one sandbox.

The host decides what each round runs (probe, correctness, timing, re-timing) from the previous round's raw
outputs, as it does with one sandbox per round; only the start-up is shared. Three processes take part:

- the keeper (this module, the sandbox's first process): reads and unlinks /io/trace.key -- the sandbox's
  master key -- before anything else runs, makes itself non-dumpable and a child subreaper, and never imports
  torch or student code. Per round n it waits (bounded) for the host's /io/rounds/n/job.json, runs it only
  if job.mac is the host's MAC under the master key, hands the fork server the job (no key: since issue 26 the
  workers hold none, the host believes only the trusted replay), and when the round is over kills every process
  left under it except the fork server,
  then writes outputs/round.done = protocol.done_mark(master, n), which nothing else in the sandbox can make.
- the fork server (forkserver.py): imports torch once, runs each round's Supervisor and forks its workers.
- the workers: student code and no key, forked after the previous round's processes are gone.

So a student's process never holds the master key, cannot make the keeper run a job
the host did not write, and is dead before the host writes the next round. When the keeper dies, or the host's
round deadline passes, the host ends the sandbox and runs the remaining rounds in a fresh one.
"""

from __future__ import annotations

import ctypes
import hmac
import os
import shutil
import signal
import sys
import time
from pathlib import Path

from . import forkserver
from .forkserver import ForkServer
from .job import Job, JobError
from .paths import HarnessPaths
from .protocol import (
    DONE_FILE,
    JOB_FILE,
    JOB_MAC_FILE,
    ROUND_WAIT_SECONDS,
    ROUNDS_DIR,
    ExitCode,
    done_mark,
    job_mac,
)
from .run import make_undumpable, take_trace_key
from .toolchains import process_stats

POLL_SECONDS = 0.01
SWEEP_SECONDS = 5.0
JOB_MAX_BYTES = 16 << 20
PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> None:
    """Orphans of the round's processes are re-parented here, not to pid 1, so the sweep finds them all."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux
        pass


def _read_capped(path: Path) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    try:
        data = os.read(fd, JOB_MAX_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > JOB_MAX_BYTES:
        raise JobError(f"{path} is over {JOB_MAX_BYTES} bytes")
    return data


def wait_for_job(round_dir: Path, master: bytes, index: int, wait_seconds: float = ROUND_WAIT_SECONDS) -> bytes | None:
    """Round `index`'s job.json once the host has written it (None after `wait_seconds`); JobError unless its
    MAC is the host's."""
    job_path = round_dir / JOB_FILE
    deadline = time.monotonic() + wait_seconds
    while not job_path.exists():  # the host writes job.mac first and renames job.json into place last
        if time.monotonic() > deadline:
            return None
        time.sleep(POLL_SECONDS)
    try:
        job, mac = _read_capped(job_path), _read_capped(round_dir / JOB_MAC_FILE)
    except OSError as exc:
        raise JobError(f"cannot read round {index}'s job: {exc}") from exc
    if not hmac.compare_digest(mac.strip(), job_mac(master, index, job).encode("ascii")):
        raise JobError(f"round {index}'s job does not carry the host's MAC")
    return job


def _process_table() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, state) of every process this sandbox can see."""
    return {pid: (int(fields[1]), fields[0].decode("ascii", "replace"))
            for pid, fields in process_stats() if len(fields) >= 2}


def sweep(spare: int) -> bool:
    """Kills every process under this one except `spare` (the fork server) and reaps them; True once none is
    left. With the subreaper flag, nothing a round started can have left this subtree."""
    me = os.getpid()
    deadline = time.monotonic() + SWEEP_SECONDS
    while True:
        table = _process_table()
        below: list[int] = []
        frontier = [me]
        while frontier:
            parent = frontier.pop()
            children = [pid for pid, (ppid, _) in table.items() if ppid == parent]
            below += children
            frontier += children
        alive = [pid for pid in below if pid != spare and table[pid][1] != "Z"]
        for pid in alive:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for pid in below:
            if pid != spare and table[pid][0] == me:
                try:
                    os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    pass
        if not alive:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(POLL_SECONDS)


def write_done(outputs: Path, mark: str) -> None:
    target = outputs / DONE_FILE
    tmp = outputs / f".{DONE_FILE}.{os.getpid()}"
    for path in (target, tmp):  # whatever a student's process left under these names goes first
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "w", encoding="ascii") as fh:
        fh.write(mark)
    os.replace(tmp, target)


def point_at_round(io: Path, round_dir: Path) -> None:
    """/io/job.json, /io/inputs and /io/outputs name the current round's, as in a sandbox of one round: code that
    looks where it always did (the adversarial corpus's forgeries too) finds the round's real files. The host
    never reads through these links; it reads /io/rounds/n/."""
    for name in (JOB_FILE, "inputs", "outputs"):
        link = io / name
        if link.is_dir() and not link.is_symlink():
            shutil.rmtree(link)
        else:
            link.unlink(missing_ok=True)
        link.symlink_to(Path(ROUNDS_DIR) / round_dir.name / name)


def run_session(paths: HarnessPaths) -> int:
    make_undumpable()
    become_subreaper()
    # In a slot the fork server is a fork of this process: made before the key is read, it never held it.
    early = ForkServer() if forkserver.IN_PLACE else None
    try:
        master = take_trace_key(paths)  # first: before anything that runs student code exists
        if master is None:
            raise JobError("rounds need the host's key in /io/trace.key")
    except JobError as exc:
        print(f"bang_harness: {exc}", file=sys.stderr)
        if early is not None:
            early.stop()
        return ExitCode.JOB_UNREADABLE
    server = early or ForkServer()
    try:
        index = 0
        while True:
            round_dir = paths.io / ROUNDS_DIR / str(index)
            job_text = wait_for_job(round_dir, master, index)
            if job_text is None:
                return ExitCode.OK  # the host is done with this sandbox (or gone)
            Job.parse(job_text)  # a job the harness cannot read ends the session here, before the fork server
            point_at_round(paths.io, round_dir)
            if not server.run_round(index, round_dir, job_text):
                print("bang_harness: the fork server died during the round", file=sys.stderr)
                return ExitCode.ROUND_LOST
            if not sweep(spare=server.pid):
                print("bang_harness: processes of the round survived SIGKILL", file=sys.stderr)
                return ExitCode.ROUND_LOST
            write_done(round_dir / "outputs", done_mark(master, index))
            index += 1
    except JobError as exc:
        print(f"bang_harness: {exc}", file=sys.stderr)
        return ExitCode.JOB_UNREADABLE
    finally:
        server.stop()


def run_phase(paths: HarnessPaths) -> int:
    """`python -m bang_harness run`: the rounds when the host hands them in one by one (/io/rounds/ and no
    /io/job.json), else the one job."""
    if (paths.io / ROUNDS_DIR).is_dir() and not (paths.io / JOB_FILE).exists():
        return run_session(paths)
    from .run import run_job

    return run_job(paths)
