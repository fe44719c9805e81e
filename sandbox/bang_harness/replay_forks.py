"""The replay's fork server: one process per replay sandbox that forks each journal's replay process
(replay.replay_one) from an interpreter with the replay's modules imported, instead of starting a fresh
interpreter per journal (issue 41: a fresh one's start and imports were ~0.06 CPU-s per journal, most of a small
replay's cost; `python -m bang_harness replay-one` stays the fallback).

It is a fork of the replay's first process (the keeper of the replays, replay_session.py, or a lone replay,
replay.run_replay) made before that process reads any key, and it never receives one: the keeper hands each
journal's key pipe (run.key_pipe) and the replay's stderr over a socket as descriptors (SCM_RIGHTS), which the
server passes on to the journal's process and closes. It loads nothing a journal's process loads for itself (the
emulator runtime, which takes the key as it loads, the device module, the engine), so each journal's process starts
from the state right after the imports, as a fresh interpreter did, with every descriptor but its own closed. The
keeper made itself non-dumpable before forking it, so neither the server nor what it forks can be read through
/proc or ptrace by a same-uid process; a journal's process that kills the server only sends the replays after it
back to fresh interpreters (the keeper's fallback). The keeper's sweep after each replay spares the server and
kills whatever else is left (replay_session.py).

Keeper -> server: one message per journal `{"journal", "env", "seconds"}` with two descriptors (the key pipe's read
end, stderr); server -> keeper: `{"status": exit status or -signal, null when stopped after its time, "cpu_s"}`.
"""

from __future__ import annotations

import importlib
import json
import os
import select
import signal
import socket
import time
from collections.abc import Callable
from pathlib import Path

from .forkserver import fork_child
from .paths import HarnessPaths
from .protocol import KEY_FD_ENV
from .run import key_pipe

# What every journal's process imports anyway; nothing that loads the emulator runtime (its constructor reads the
# key) or a device module.
PRELOAD = ("bang_harness.replay", "bang_harness.replay_ops", "bang_harness.wasm_replay", "bang_emu.toolchain",
           "bang_emu.wasm.engine", "bang_emu.wasm.sites")
MESSAGE_MAX_BYTES = 1 << 20
ReplayOne = Callable[[HarnessPaths, Path], int]  # replay.replay_one: one journal, in the process it is called in


class ServerGone(OSError):
    """The fork server is gone: before the journal was handed over (`started` False: nothing of it ran), or while
    its process ran (a process of the journal may have killed it: what it did is the journal's)."""

    def __init__(self, started: bool, message: str) -> None:
        super().__init__(message)
        self.started = started


class ReplayForks:
    """The keeper's handle on its replay fork server (start() forks it; replay() runs one journal's process)."""

    def __init__(self, sock: socket.socket, pid: int) -> None:
        self._sock, self.pid = sock, pid
        self.alive = True

    @classmethod
    def start(cls, replay_one: ReplayOne) -> ReplayForks | None:
        """Forks the server from this process, now (before it reads a key), to run `replay_one` (replay.replay_one)
        in each journal's process; None when it cannot."""
        try:
            keeper_end, server_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        except OSError:
            return None
        pid = fork_child({0, 1, 2, server_end.fileno()}, lambda: serve(server_end, replay_one))  # the keeper's end closed
        server_end.close()
        return cls(keeper_end, pid)

    def replay(self, journal: Path, env: dict[str, str], key: bytes, seconds: float) -> tuple[int | None, float]:
        """`journal` replayed by a process forked from the server with `env` and `key` (its runtime reads it from
        KEY_FD_ENV), stopped after `seconds`: (its exit status, None when stopped; its CPU seconds). ServerGone:
        the server is gone (then `alive` is False), before or while it ran the journal (`started`)."""
        key_fd, stderr_fd = key_pipe(key), os.dup(2)
        started = False
        try:
            message = json.dumps({"journal": str(journal), "env": env, "seconds": seconds}).encode("utf-8")
            socket.send_fds(self._sock, [message], [key_fd, stderr_fd])
            started = True
            reply = self._sock.recv(MESSAGE_MAX_BYTES)
            if not reply:
                raise OSError("it closed its end")
            answer = json.loads(reply)
            return answer["status"], float(answer["cpu_s"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            self.alive = False
            raise ServerGone(started, f"the replay's fork server is gone ({exc})") from exc
        finally:
            os.close(key_fd)
            os.close(stderr_fd)

    def close(self) -> None:
        self.alive = False
        self._sock.close()  # the server reads end-of-file and exits
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline:
            try:
                if os.waitpid(self.pid, os.WNOHANG)[0]:
                    return
            except ChildProcessError:  # reaped already (a sweep)
                return
            time.sleep(0.01)
        try:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass


def serve(sock: socket.socket, replay_one: ReplayOne) -> int:
    """The server's loop: one journal's process per message until the keeper closes its end."""
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:  # not in this image: the journal's process does without, as a fresh one would
            pass
    while True:
        message, fds, _flags, _address = socket.recv_fds(sock, MESSAGE_MAX_BYTES, 2)
        if not message:
            return 0
        try:
            request = json.loads(message)
            if len(fds) != 2:
                raise ValueError(f"{len(fds)} descriptors, not 2")
            status, cpu = _run_one(request, *fds, replay_one)
        finally:
            for fd in fds:
                os.close(fd)
        sock.send(json.dumps({"status": status, "cpu_s": cpu}).encode("utf-8"))


def _run_one(request: dict, key_fd: int, stderr_fd: int, replay_one: ReplayOne) -> tuple[int | None, float]:
    journal, env, seconds = Path(request["journal"]), dict(request["env"]), float(request["seconds"])
    def journal_process() -> int:
        os.dup2(stderr_fd, 2)
        os.close(stderr_fd)
        os.environ.clear()
        os.environ.update(env)
        os.environ[KEY_FD_ENV] = str(key_fd)
        return replay_one(HarnessPaths.from_env(), journal)

    pid = fork_child({0, 1, 2, key_fd, stderr_fd}, journal_process)  # the server's socket closed above all
    stopped = not _exited_within(pid, seconds)
    if stopped:
        os.kill(pid, signal.SIGKILL)
    _pid, status, usage = os.wait4(pid, 0)
    cpu = usage.ru_utime + usage.ru_stime
    return (None if stopped else os.waitstatus_to_exitcode(status)), round(cpu, 3)


def _exited_within(pid: int, seconds: float) -> bool:
    """Whether child `pid` ended within `seconds` (not reaped)."""
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):  # no pidfd (an old kernel): poll
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                return True
            time.sleep(0.005)
        return False
    try:
        return bool(select.select([pidfd], [], [], max(0.0, seconds))[0])
    finally:
        os.close(pidfd)
