"""`python -m bang_harness run`: supervise worker processes that run the job's calls.

The supervisor also holds the run phase's trace key (DESIGN.md, "Threat model"): it reads and unlinks
/io/trace.key before any worker exists, makes itself non-dumpable, and hands the key to each worker through a
pipe whose read end's fd number is in BANG_EMU_KEY_FD; the emulator runtime reads it when the worker loads it.

Student code can kill the process it runs in (a segfault in a kernel, abort(), os._exit). The supervisor never
runs student code; it starts a worker, follows which call it is in through a control pipe, and when the worker
dies records that call as a crash (with the worker's last stderr) and starts a fresh worker at the next call.
A call past the job's optional per-call limit is killed and recorded the same way. Here (`run` with one
/io/job.json) workers are fresh interpreters and the supervisor never imports torch; for rounds
(bang_harness.session) the same supervisor runs in the fork server and forks its workers from there.
"""

from __future__ import annotations

import ctypes
import os
import selectors
import signal
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO, Protocol

from .backends import get_harness_backend
from .control import FRESH_WORKER_EXIT, parse_event
from .job import CallResult, Job, JobError, result_path, write_result
from .paths import HarnessPaths
from .protocol import KEY_BYTES, KEY_FD_ENV, KEY_FILE, ErrorKind, ExitCode

STDERR_TAIL_BYTES = 4096
STDERR_FORWARD_CAP = 1 << 20
EXIT_GRACE_SECONDS = 2.0


@dataclass
class WorkerReport:
    """What one worker got through before it exited."""

    done: list[str] = field(default_factory=list)
    current: str | None = None  # started, not finished
    loading: bool = False
    returncode: int | None = None
    timed_out: bool = False
    stderr_tail: bytes = b""


class StderrTail:
    """The last few KiB the worker wrote to stderr since its current call started."""

    def __init__(self, cap: int = STDERR_TAIL_BYTES) -> None:
        self.cap = cap
        self.chunks: deque[bytes] = deque()
        self.size = 0

    def add(self, chunk: bytes) -> None:
        self.chunks.append(chunk)
        self.size += len(chunk)
        while self.size - len(self.chunks[0]) >= self.cap:
            self.size -= len(self.chunks.popleft())

    def clear(self) -> None:
        self.chunks.clear()
        self.size = 0

    def value(self) -> bytes:
        return b"".join(self.chunks)[-self.cap:]


def _exit_description(report: WorkerReport) -> str:
    code = report.returncode
    if report.timed_out:
        return "killed after exceeding the per-call time limit"
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"the process was killed by {name}"
    return f"the process exited with status {code}"


PR_SET_DUMPABLE = 4


def take_trace_key(paths: HarnessPaths) -> bytes | None:
    """Read and unlink the host's key; None when there is none (a run by hand, or the mlu backend)."""
    key_path = paths.io / KEY_FILE
    try:
        fd = os.open(key_path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        key = os.read(fd, KEY_BYTES + 1)
    finally:
        os.close(fd)
        key_path.unlink(missing_ok=True)
    if len(key) != KEY_BYTES:
        raise JobError(f"{key_path} holds {len(key)} bytes, expected {KEY_BYTES}")
    return key


def make_undumpable() -> None:
    """No core dumps, and no /proc/<pid>/mem or ptrace by same-uid processes (the workers) to find the key."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: nothing to harden
        pass


def key_pipe(key: bytes) -> int:
    """A pipe already holding the key, write end closed: the worker's runtime reads 32 bytes then EOF."""
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, key)
    finally:
        os.close(write_end)
    return read_end


class WorkerProcess(Protocol):
    """A started worker as the supervisor follows it (subprocess.Popen is one; forkserver.ForkedWorker another)."""

    stderr: IO[bytes] | None

    def poll(self) -> int | None: ...

    def kill(self) -> None: ...

    def wait(self) -> int: ...


# (index of the first call, control pipe's write end, key pipe's read end or None) -> the running worker.
# The caller closes both fds in its own process once this returns.
StartWorker = Callable[[int, int, int | None], WorkerProcess]


def worker_env(job: Job, key_fd: int | None) -> dict[str, str]:
    """The variables a worker is started with on top of the supervisor's own (KEY_FD_ENV removed first)."""
    env = get_harness_backend(job.backend).worker_env(job.device)
    if key_fd is not None:
        env[KEY_FD_ENV] = str(key_fd)
    return env


class Supervisor:
    def __init__(self, paths: HarnessPaths, job: Job, key: bytes | None = None,
                 start_worker: StartWorker | None = None) -> None:
        self.paths = paths
        self.job = job
        self._key = key
        self.ids = [c.id for c in job.calls]
        self._stderr_forwarded = 0
        self._start_worker = start_worker or self._exec_worker

    def run(self) -> int:
        self.paths.outputs.mkdir(parents=True, exist_ok=True)
        ids = self.ids
        next_index = 0
        while next_index < len(ids):
            report = self._run_worker(next_index)
            finished = set(report.done)
            if report.returncode == FRESH_WORKER_EXIT and report.current is None and report.done:
                next_index = ids.index(report.done[-1]) + 1
                continue
            if report.returncode == 0 and not report.timed_out:
                missing = [i for i in ids[next_index:] if i not in finished]
                for call_id in missing:  # a worker that returned early without doing a call: say so
                    self._record(call_id, CallResult.failure(ErrorKind.CRASH, "the call was never run"))
                break
            tail = report.stderr_tail.decode("utf-8", "replace").strip()
            reason = _exit_description(report) + (f"; last output:\n{tail}" if tail else "")
            if report.current is None:
                # Died before any call of its own started (loading the extension or the module): every
                # remaining call would die the same way.
                where = ("while loading the extension or importing the module" if report.loading
                         else "before running any call")
                for call_id in ids[next_index:]:
                    if call_id not in finished:
                        self._record(call_id, CallResult.failure(ErrorKind.CRASH, f"{where}: {reason}",
                                                                 during="load"))
                break
            kind = ErrorKind.TIMEOUT if report.timed_out else ErrorKind.CRASH
            self._record(report.current, CallResult.failure(kind, reason))
            next_index = ids.index(report.current) + 1
        return 0

    def _record(self, call_id: str, result: CallResult) -> None:
        # Keep whatever the worker itself managed to write for this call.
        if not result_path(self.paths.outputs, call_id).exists():
            write_result(self.paths.outputs, call_id, result)

    def _exec_worker(self, first_index: int, control_write: int, key_read: int | None) -> WorkerProcess:
        """A fresh interpreter: `python -m bang_harness worker` (imports torch itself)."""
        argv = [sys.executable, "-m", "bang_harness", "worker", "--first-call", str(first_index),
                "--control-fd", str(control_write)]
        env = dict(os.environ)
        env.pop(KEY_FD_ENV, None)
        env.update(worker_env(self.job, key_read))
        fds = (control_write,) if key_read is None else (control_write, key_read)
        return subprocess.Popen(argv, stderr=subprocess.PIPE, pass_fds=fds, env=env)

    def _run_worker(self, first_index: int) -> WorkerReport:
        control_read, control_write = os.pipe()
        key_read = key_pipe(self._key) if self._key is not None else None
        try:
            proc = self._start_worker(first_index, control_write, key_read)
        except BaseException:
            os.close(control_read)
            raise
        finally:
            os.close(control_write)
            if key_read is not None:
                os.close(key_read)
        report = WorkerReport()
        tail = StderrTail()
        pending = b""
        deadline: float | None = None
        exited_at: float | None = None
        with selectors.DefaultSelector() as sel, os.fdopen(control_read, "rb", buffering=0) as control:
            sel.register(control, selectors.EVENT_READ, "control")
            assert proc.stderr is not None
            sel.register(proc.stderr, selectors.EVENT_READ, "stderr")
            open_streams = 2
            while open_streams:
                events = sel.select(timeout=0.5 if deadline is None else min(0.5, deadline - time.monotonic()))
                if deadline is not None and time.monotonic() > deadline and not report.timed_out:
                    report.timed_out = True
                    proc.kill()
                if not events and proc.poll() is not None:
                    exited_at = exited_at or time.monotonic()
                    if time.monotonic() - exited_at > EXIT_GRACE_SECONDS:
                        break  # a grandchild holds the pipes open; the runner's kill (or the keeper's sweep) ends it
                for key, _ in events:
                    chunk = os.read(key.fileobj.fileno(), 65536)
                    if not chunk:
                        sel.unregister(key.fileobj)
                        open_streams -= 1
                    elif key.data == "stderr":
                        self._forward_stderr(chunk)
                        tail.add(chunk)
                    else:
                        *lines, pending = (pending + chunk).split(b"\n")
                        for line in lines:
                            if self._on_event(line, report):
                                tail.clear()  # a crash message should show this call's output only
                                limit = self.job.call_timeout_seconds
                                deadline = time.monotonic() + limit if limit else None
                            elif report.current is None:
                                deadline = None
        report.returncode = proc.wait()
        proc.stderr.close()  # a fork server runs many workers: no descriptor may leak from one to the next
        report.stderr_tail = tail.value()
        return report

    def _on_event(self, line: bytes, report: WorkerReport) -> bool:
        """Applies one control event to the report; True when a call just started."""
        parsed = parse_event(line)
        if parsed is None:
            return False
        event, call_id = parsed
        if event == "loading":
            report.loading = True
        elif call_id not in self.ids:
            return False  # student code can write to the pipe too; only our ids count
        elif event == "start":
            report.current = call_id
            return True
        elif event == "done":
            report.done.append(call_id)
            report.current = None
        return False

    def _forward_stderr(self, chunk: bytes) -> None:
        if self._stderr_forwarded < STDERR_FORWARD_CAP:
            sys.stderr.buffer.write(chunk[: STDERR_FORWARD_CAP - self._stderr_forwarded])
            sys.stderr.buffer.flush()
        self._stderr_forwarded += len(chunk)


def run_job(paths: HarnessPaths | None = None) -> int:
    paths = paths or HarnessPaths.from_env()
    make_undumpable()
    try:
        key = take_trace_key(paths)  # first: before anything that runs student code exists
        job = Job.load(paths.io / "job.json")
    except JobError as exc:
        print(f"bang_harness: {exc}", file=sys.stderr)
        return ExitCode.JOB_UNREADABLE
    return Supervisor(paths, job, key).run()
