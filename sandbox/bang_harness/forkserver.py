"""The fork server: one interpreter per run-phase sandbox that imports torch once and forks every worker of
every round from there (bang_harness.session), so a round costs a fork, not a Python start and a torch import.

It never runs student code itself and holds no secret beyond the round it is running: the keeper sends it one
round at a time (the verified job) over a pipe only the two of them hold, and it
runs the round with the ordinary Supervisor (run.py), whose workers are forked children here instead of fresh
interpreters. A forked worker starts from the state right after the imports: nothing a student's code did in
one round (or in a crashed worker) is visible to the next, and every descriptor but the worker's own pipes is
closed before any student code loads. Loading the emulator runtime (which fixes the device), the student's
extension and module stays in the worker (worker.run_worker).

Keeper -> server: one JSON line per round `{"round", "io", "job"}`; server -> keeper: `{"done": n}`.
"""

from __future__ import annotations

import importlib
import json
import os
import resource
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from .job import Job
from .paths import HarnessPaths
from .protocol import KEY_FD_ENV
from .run import Supervisor, make_undumpable, worker_env

# Imported before the first fork (what every worker imports anyway). Not torch_mlu: a card's driver must not be
# initialised in a process that forks. Not setuptools and torch's cpp_extension either: nothing a worker runs
# imports them (torch_mlu.utils.cpp_extension is imported on first use, as torch_mlu's own is), and they cost
# every run sandbox a tenth of a CPU second (issue 41); a student's module that imports them pays it in its worker.
PRELOAD = ("numpy", "torch", "torch.utils.deterministic", "bang_harness.worker", "bang_emu.toolchain",
           "bang_emu.torch_mlu_emu", "bang_emu.torch_mlu_emu.device")


@dataclass
class ForkedWorker:
    """A worker forked here, followed like a subprocess.Popen (returncode: exit status, or -signal)."""

    pid: int
    stderr: IO[bytes] | None
    returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self) -> int:
        if self.returncode is None:
            self.returncode = os.waitstatus_to_exitcode(os.waitpid(self.pid, 0)[1])
        return self.returncode

    def kill(self) -> None:
        if self.returncode is None:  # not reaped yet, so the pid is still ours
            os.kill(self.pid, signal.SIGKILL)


def fork_child(keep: set[int], body: Callable[[], int]) -> int:
    """Forks a child that closes every descriptor but `keep`, runs `body` and exits with its status (1 when it
    raised: the traceback on stderr), never returning into the caller's code; the child's pid."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        code = 1
        try:
            _close_all_but(keep)
            code = body()
        except BaseException:  # noqa: BLE001 -- its parent sees the exit; show why
            traceback.print_exc()
        finally:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            finally:
                os._exit(code)  # no interpreter teardown: the parent's state is not ours to finalise
    return pid


def fork_worker(paths: HarnessPaths, job: Job, first_index: int, control_write: int,
                key_read: int | None) -> ForkedWorker:
    """Forks a worker that runs `job` from call `first_index` (run.StartWorker)."""
    stderr_read, stderr_write = os.pipe()

    def worker() -> int:
        os.dup2(stderr_write, 2)
        os.close(stderr_write)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        os.environ.pop(KEY_FD_ENV, None)
        os.environ.update(worker_env(job, key_read))
        from .worker import run_worker

        return run_worker(paths, first_index, control_write, job)

    # every other descriptor closed: the keeper's pipe above all, which carries the next round's job
    pid = fork_child({0, 1, 2, control_write, stderr_write} | ({key_read} if key_read is not None else set()), worker)
    os.close(stderr_write)
    return ForkedWorker(pid, os.fdopen(stderr_read, "rb", buffering=0))


def _close_all_but(keep: set[int]) -> None:
    limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    limit = limit if 0 < limit < (1 << 20) else 4096
    low = 0
    for fd in [*sorted(keep), limit]:
        if fd > low:  # never an empty range: os.closerange(0, 0) closes everything (close_range(0, ~0))
            os.closerange(low, fd)
        low = fd + 1


def preload() -> None:
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:  # not in this image (the MLU image has no emulator): the worker does without
            pass


def serve(requests_fd: int, replies_fd: int) -> int:
    """The fork server's main loop: one round per request until the keeper closes the pipe."""
    make_undumpable()  # what it forks inherits this: no same-uid process can read a worker's key pipe
    preload()
    base = HarnessPaths.from_env()
    with os.fdopen(requests_fd, "rb") as requests, os.fdopen(replies_fd, "wb", buffering=0) as replies:
        for line in requests:
            message = json.loads(line)
            job = Job.parse(message["job"].encode("utf-8"))
            paths = HarnessPaths(base.submission, base.build, Path(message["io"]))

            def start(first: int, control: int, key_fd: int | None, paths: HarnessPaths = paths,
                      job: Job = job) -> ForkedWorker:
                return fork_worker(paths, job, first, control, key_fd)

            Supervisor(paths, job, None, start_worker=start).run()
            replies.write(json.dumps({"done": message["round"]}).encode("utf-8") + b"\n")
    return 0


# In a slot (bang_harness.zygote) the keeper's interpreter has torch imported already: its fork server is a fork
# of it, made before the keeper reads the key (session.run_session), not a second interpreter importing torch.
IN_PLACE = False


class _ForkedServer:
    """The fork server forked in place, followed as subprocess.Popen is (pid, wait, kill)."""

    def __init__(self, requests_fd: int, replies_fd: int) -> None:
        self.pid = fork_child({0, 1, 2, requests_fd, replies_fd}, lambda: serve(requests_fd, replies_fd))
        self.returncode: int | None = None

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            pid, status = os.waitpid(self.pid, 0 if deadline is None else os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
            elif deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired("forkserver", timeout or 0.0)
            else:
                time.sleep(0.01)
        return self.returncode

    def kill(self) -> None:
        if self.returncode is None:
            os.kill(self.pid, signal.SIGKILL)


class ForkServer:
    """The keeper's handle on its fork server (a child interpreter started before any student code, or in a slot
    a fork of the keeper's made before it reads the key: IN_PLACE)."""

    def __init__(self) -> None:
        to_server_read, self._to_server = os.pipe()
        self._from_server, from_server_write = os.pipe()
        argv = [sys.executable, "-m", "bang_harness", "forkserver", "--requests-fd", str(to_server_read),
                "--replies-fd", str(from_server_write)]
        try:
            self.process: subprocess.Popen | _ForkedServer = (
                _ForkedServer(to_server_read, from_server_write) if IN_PLACE else
                subprocess.Popen(argv, stdin=subprocess.DEVNULL, pass_fds=(to_server_read, from_server_write)))
        finally:
            os.close(to_server_read)
            os.close(from_server_write)
        self._requests = os.fdopen(self._to_server, "wb")
        self._replies = os.fdopen(self._from_server, "rb")

    @property
    def pid(self) -> int:
        return self.process.pid

    def run_round(self, index: int, io: Path, job: bytes) -> bool:
        """Runs one round to its end; False when the server died (the round's results are what was written)."""
        message = {"round": index, "io": str(io), "job": job.decode("utf-8")}
        try:
            self._requests.write(json.dumps(message).encode("utf-8") + b"\n")
            self._requests.flush()
            reply = self._replies.readline()
        except OSError:
            return False
        try:
            return json.loads(reply).get("done") == index
        except ValueError:
            return False

    def stop(self) -> None:
        for stream in (self._requests, self._replies):
            try:
                stream.close()
            except OSError:  # the server is gone: nothing was left to flush
                pass
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
