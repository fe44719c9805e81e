"""The host's side of one replay sandbox for all of a submission's trusted replays (bang_harness.replay_session).

What each replay is does not change (replay.py): the host stages its journals and twin inputs in a folder of its
own, outside every sandbox, and reads its outputs size-capped. Only the sandbox start is shared, as the rounds
share the run sandbox (rounds.py). Per replay n the host makes /io/replays/n/ afresh (a folder that already
exists means something in the sandbox planted it: refused), copies the staged replay into it, writes the job's
MAC under the sandbox's master key and then job.json, and waits -- up to the replay's own wall limit -- for the
keeper's done mark, which only the keeper can make and which says that no process of the replay is left. The
replay's outputs are then copied out, each file size-capped, into the staged folder (where the host reads them,
out of reach of the next replay's processes), and replay n's folder is removed. A replay whose sandbox ended, that
passed its limit or whose children failed (REPLAY_FAILED) ends the sandbox: the next replay gets a fresh one.

The replay sandbox shares nothing with the run sandbox: its own folder, key and container. Its /io is sized once,
at start, for the submission: every replay of a submission has the same budget (Executor._budget), and the
sandbox's /io cap (grader.sandbox.io_cap) and disk watch are two of its tmpfs budgets -- one for what the host
stages (journals, twin inputs, the engine: a replay staging more is run in a sandbox of its own, sized as ever),
one for what the replay writes.
"""

from __future__ import annotations

import dataclasses
import hmac
import os
import re
import shutil
import stat
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from bang_harness.protocol import (
    DONE_FILE,
    JOB_FILE,
    JOB_MAC_FILE,
    REPLAY_STDERR,
    REPLAYS_DIR,
    ExitCode,
    job_mac,
    replay_done_mark,
    replay_key,
)

from grader.orchestration.rounds import POLL_SECONDS, STOP_REASON, KeptSandbox, RoundRefused
from grader.sandbox.base import Limits, Mounts, RunOutcome, StartingRunner
from grader.sandbox.capped import UntrustedFileError, copy_capped, read_bytes_capped
from grader.sandbox.layout import MAX_NEW_ENTRIES, give_to_sandbox, sandbox_user
from grader.sandbox.watch import tree_usage

REPLAY_JOB = "replay.json"  # bang_harness/replay.py
# The runner's own backstop for the sandbox: the host ends each replay at its own limit (Staged.seconds).
BACKSTOP_SECONDS = 6 * 3600.0
STDERR_TAIL_BYTES = 64 << 10
STAGED_SHARE = 2  # the sandbox's /io holds STAGED_SHARE tmpfs budgets: one staged replay's inputs, its outputs


_FOLDER = re.compile(rf"/io/{REPLAYS_DIR}/\d+/")


def as_in_own_sandbox(text: str) -> str:
    """What a replay said, its paths as a replay in a sandbox of its own names them (/io/replays/n/x -> /io/x): the
    grading's messages do not depend on which sandbox replayed."""
    return _FOLDER.sub("/io/", text)


@dataclass
class Replayed:
    """One replay as the host reads it back: the runner's outcome, its outputs (copied out) in `outputs`."""

    outcome: RunOutcome
    outputs: Path
    key: bytes


class ReplaySandbox(KeptSandbox):
    """A replay-phase sandbox whose keeper replays each folder the host hands in (bang_harness.replay_session)."""

    folders = REPLAYS_DIR

    def fits(self, staged_io: Path) -> bool:
        """Whether a replay staged in `staged_io` fits the room this sandbox keeps for one replay's inputs."""
        used, files = tree_usage([staged_io], 1 << 62, 1 << 62)
        return used <= self.limits.tmpfs_bytes // STAGED_SHARE and files <= MAX_NEW_ENTRIES // STAGED_SHARE

    def replay(self, staged_io: Path, wall_seconds: float) -> Replayed:
        """Replay n: `staged_io` (journals/, replay-inputs/, replay.json, the engine; outputs/ empty) copied into
        /io/replays/n/, run, and its outputs copied back into `staged_io`/outputs. RoundRefused: /io is not as the
        host left it, nothing was handed in."""
        index = self.index
        folder = self._make_folder(index)
        self.index += 1
        try:
            job = (staged_io / REPLAY_JOB).read_bytes()
            for entry in os.scandir(staged_io):
                if entry.name != "outputs":
                    _copy_in(Path(entry.path), folder / entry.name)
            give_to_sandbox(folder, *sandbox_user())  # the harness writes sites.json (and makes the engine) here
            (folder / "outputs").mkdir()
            give_to_sandbox(folder / "outputs", *sandbox_user())
            (folder / JOB_MAC_FILE).write_text(job_mac(self.master, index, job), encoding="ascii")
            (folder / f".{JOB_FILE}.tmp").write_bytes(job)
            os.replace(folder / f".{JOB_FILE}.tmp", folder / JOB_FILE)  # the keeper waits for this name
            outcome = self._wait(folder, index, wall_seconds)
            outputs = staged_io / "outputs"
            _copy_out(folder / "outputs", outputs, self.limits)
            outcome = replace(outcome, stderr_tail=(outcome.stderr_tail + _tail(folder / "outputs"))[-STDERR_TAIL_BYTES:])
            return Replayed(outcome, outputs, replay_key(self.master, index))
        except BaseException:
            self.alive = False  # the keeper may wait for a replay n never handed in: no replay after it here
            raise
        finally:
            if not self.alive:
                self.close()
            shutil.rmtree(folder, ignore_errors=True)  # the next replay's room (/io is capped)

    def close(self) -> None:
        self.alive = False
        if self.started is not None:
            started, self.started = self.started, None
            started.stop(STOP_REASON)

    def _wait(self, folder: Path, index: int, wall_seconds: float) -> RunOutcome:
        began = time.monotonic()
        self.start()
        assert self.started is not None
        ok = replay_done_mark(self.master, index, True).encode("ascii")
        failed = replay_done_mark(self.master, index, False).encode("ascii")
        while True:
            ended = self.started.wait(POLL_SECONDS)
            mark = _mark(folder)
            if mark is not None and (hmac.compare_digest(mark, ok) or hmac.compare_digest(mark, failed)):
                done_ok = hmac.compare_digest(mark, ok)
                self.alive = ended is None and done_ok  # a failed replay's sandbox is never used again
                return RunOutcome(exit_code=0 if done_ok else ExitCode.REPLAY_FAILED,
                                  wall_seconds=time.monotonic() - began)
            if ended is not None:
                self.alive = False
                self.started = None
                return ended
            if time.monotonic() - began > wall_seconds:
                self.alive = False
                started, self.started = self.started, None
                outcome = started.stop(f"wall-clock limit of {wall_seconds:g} s reached")
                return dataclasses.replace(outcome, timed_out=True, exit_code=None,
                                           wall_seconds=time.monotonic() - began)


class ReplaySandboxes:
    """The submission's replay sandbox, started at its first replay, replaced after one that ended, and shared
    by the replays of all its rounds (and seeds), one at a time: `make(folder)` makes one in a new folder."""

    def __init__(self, make: Callable[[Path], ReplaySandbox]) -> None:
        self._make = make
        self._current: ReplaySandbox | None = None
        self._lock = threading.Lock()
        self._closed = False
        self.started = 0  # sandboxes started (benchmarks, tests)

    def prestart(self, work: Path) -> None:
        """Starts the sandbox now, its folder in `work` (where replay() would make it: beside the staged folders),
        before any replay is staged; a replay meets it started, or, if it ended meanwhile, starts a fresh one."""
        with self._lock:
            if self._closed or self._current is not None:
                return
            sandbox = self._new(work)
            try:
                sandbox.start()
            except Exception:  # noqa: BLE001 -- the first replay starts one itself, and says why it could not
                sandbox.close()
                return
            self._current = sandbox

    def replay(self, staged_io: Path, wall_seconds: float) -> Replayed | None:
        """Replay of the folder `staged_io` in the shared sandbox; None when it does not fit (the caller runs it in
        a sandbox of its own, as ever)."""
        with self._lock:
            for _attempt in range(2):
                sandbox = self._current
                if self._closed:
                    return None
                if sandbox is not None and sandbox.ended():  # it died since its last replay: never handed another
                    sandbox.close()
                if sandbox is None or not sandbox.alive:
                    sandbox = self._current = self._new(staged_io.parent)
                if not sandbox.fits(staged_io):
                    return None
                try:
                    return sandbox.replay(staged_io, wall_seconds)
                except RoundRefused:  # planted by an earlier replay's processes: a fresh sandbox
                    sandbox.close()
                    self._current = None
            raise RoundRefused("a fresh replay sandbox refused its first replay")

    def _new(self, work: Path) -> ReplaySandbox:
        """A sandbox made (not started) in a fresh folder of `work`, beside the staged folders, and counted."""
        self.started += 1
        return self._make(_fresh_folder(work / "io-replays"))

    def close(self) -> None:
        with self._lock:
            self._closed = True
            sandbox, self._current = self._current, None
        if sandbox is not None:
            try:
                sandbox.close()
            except RuntimeError:  # it could not be removed: the runner's sweep of leftovers takes it
                pass


class MakeSandbox:
    """How the executor's replay sandboxes are made: its runner, the replay's argv, mounts, budget and env."""

    def __init__(self, runner: StartingRunner, argv: list[str], submission: Path, build: Path, budget: Limits,
                 env: dict[str, str], write_key: Callable[[Path], bytes]) -> None:
        self.runner, self.argv, self.submission, self.build = runner, argv, submission, build
        self.limits = replace(budget, tmpfs_bytes=budget.tmpfs_bytes * STAGED_SHARE, wall_seconds=BACKSTOP_SECONDS)
        self.env = env
        self.write_key = write_key

    def __call__(self, folder: Path) -> ReplaySandbox:
        folder.mkdir(parents=True)
        master = self.write_key(folder)
        return ReplaySandbox(self.runner, self.argv, Mounts(submission=self.submission, build=self.build, io=folder),
                             self.limits, self.env, master)


def _fresh_folder(path: Path) -> Path:
    named, number = path, 1
    while named.exists():
        number += 1
        named = path.with_name(f"{path.name}-{number}")
    return named


def _copy_in(source: Path, target: Path) -> None:
    """What the host staged (its own files: journals already copied out of the run's folders, capped), copied."""
    if source.is_dir() and not source.is_symlink():
        shutil.copytree(source, target, symlinks=True, copy_function=shutil.copyfile)
    elif source.is_file() and not source.is_symlink():
        shutil.copyfile(source, target)
        os.chmod(target, stat.S_IMODE(source.stat().st_mode))


def _copy_out(outputs: Path, target: Path, limits: Limits) -> None:
    """The replay's outputs (regular files at the top of outputs/, nothing followed), each at most the replay's file
    size limit, all at most its /io budget: copied where the host reads them."""
    target.mkdir(exist_ok=True)
    left = limits.tmpfs_bytes
    try:
        entries = list(os.scandir(outputs))[:MAX_NEW_ENTRIES]
    except OSError:
        return
    for entry in entries:
        if entry.name in (DONE_FILE, REPLAY_STDERR) or not entry.is_file(follow_symlinks=False):
            continue
        try:
            left -= copy_capped(Path(entry.path), target / entry.name, min(left, limits.file_size_bytes),
                                root=outputs.parent)
        except (UntrustedFileError, OSError):
            (target / entry.name).unlink(missing_ok=True)
        if left <= 0:
            break


def _mark(folder: Path) -> bytes | None:
    try:
        return read_bytes_capped(folder / "outputs" / DONE_FILE, 256, root=folder).strip()
    except (UntrustedFileError, OSError):
        return None


def _tail(outputs: Path) -> str:
    """The last STDERR_TAIL_BYTES of the replay's stderr file in `outputs`, a regular file reached through no link
    (anything else: nothing)."""
    try:
        folder = os.open(outputs, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return ""
    try:
        fd = os.open(REPLAY_STDERR, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=folder)
    except OSError:
        return ""
    finally:
        os.close(folder)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return ""
        os.lseek(fd, max(0, info.st_size - STDERR_TAIL_BYTES), os.SEEK_SET)
        return os.read(fd, STDERR_TAIL_BYTES).decode("utf-8", "replace")
    except OSError:
        return ""
    finally:
        os.close(fd)
