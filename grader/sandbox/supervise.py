"""The one supervision sequence of the isolating runners (docker, bwrap, pod): what happens around a sandboxed
process whatever holds it.

    check the mounts -> (cap /io) -> make the writable folders the sandbox user's and note what they hold ->
    start it -> follow its output into capped tails (a flood kills it) and poll the writable folders (a fill
    kills it) -> wait up to the wall-clock limit (then kill it, a timeout) -> a last look at the disk ->
    how it ended -> remove what is left -> the outcome

A runner supplies only its substrate (`Sandboxed`: a container, a bwrap process tree, a pod): how to start it and
read its output, wait for it, kill it, read its ending and remove it. The process runner (no isolation, no disk
budget, its own pipe reader) stays apart.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from typing import Any, NamedTuple, Protocol

from grader.sandbox.base import Limits, Mounts, Phase, RunOutcome, Started
from grader.sandbox.io_cap import capped_io
from grader.sandbox.layout import MAX_NEW_ENTRIES, check_mounts, prepare_writable, sandbox_user, writable_dirs
from grader.sandbox.watch import (
    FLOOD_FACTOR,
    NOTE_OUTPUT_FLOOD,
    DiskWatch,
    KillSwitch,
    OutputTail,
    pump,
    tree_usage,
)

NOTE_OOM = "memory limit reached (cgroup OOM kill)"
PUMP_JOIN_SECONDS = 5.0


class Ending(NamedTuple):
    """How a sandboxed process ended, as its substrate reports it."""

    code: int | None  # its exit status (None: none was recorded)
    signal: int | None  # the signal that killed it
    oom_killed: bool = False
    timed_out: bool = False  # the substrate's own deadline passed (a pod's activeDeadlineSeconds)


class Sandboxed(Protocol):
    """One sandboxed process on a runner's substrate, as the supervision drives it; a failure of the substrate
    itself (daemon, API) is raised as SandboxError."""

    def start(self) -> dict[str, Any]:
        """Creates and starts it; its output streams by name ("stdout", "stderr", or one interleaved "output"),
        attached so that nothing printed early is lost."""
        ...

    def wait(self, seconds: float | None) -> bool:
        """True once it has ended; False when `seconds` passed first. None: it was just killed; until it is gone."""
        ...

    def stop(self) -> None:
        """Kills it now, from any thread (the kill switch's action); nothing if it has ended or never started."""
        ...

    def ending(self, stopped: bool) -> Ending:
        """How it ended; `stopped`: our kill switch fired."""
        ...

    def close(self) -> None:
        """Removes what is left of it (container, pod, open streams); also after a failed start."""
        ...


def supervise(phase: Phase, mounts: Mounts, limits: Limits, make: Callable[[int, int], Sandboxed], *,
              cap_io: bool | None = True, notes: list[str] | None = None) -> tuple[Started, str]:
    """Starts `make(uid, gid)` (the sandbox user's ids) under the guards; the handle whose `wait` gives the outcome
    once everything is removed, and the note on /io (capped or why not; "" with `cap_io` None: no host mount to
    cap, as for pods). The outcome's notes start with `notes`."""
    check_mounts(mounts)
    cleanup = ExitStack()
    # A tmpfs on the host folder only works where the sandbox sees our mounts (`cap_io` False: it would not).
    io_note = "" if cap_io is None else cleanup.enter_context(capped_io(mounts.io, limits.tmpfs_bytes,
                                                                        enabled=cap_io))
    try:
        uid, gid = sandbox_user()
        prepare_writable(phase, mounts, uid, gid)
        watched = writable_dirs(phase, mounts)
        base_bytes, base_files = tree_usage(watched, 1 << 62, 1 << 62)
        sandboxed = make(uid, gid)
        outcome_notes = list(notes or [])
        kill = KillSwitch(sandboxed.stop, outcome_notes)
        disk = DiskWatch(watched, base_bytes + limits.tmpfs_bytes, base_files + MAX_NEW_ENTRIES, kill)
        try:
            streams = sandboxed.start()
        except BaseException:
            sandboxed.close()
            raise
    except BaseException:
        cleanup.close()
        raise
    flood = limits.log_bytes * FLOOD_FACTOR
    tails = {name: OutputTail(limits.log_bytes, flood,
                              lambda n=name: kill(f"{NOTE_OUTPUT_FLOOD}: {n} passed {flood} bytes"))
             for name in streams}
    pumps = [threading.Thread(target=pump, args=(stream, tails[name]), daemon=True) for name, stream in streams.items()]
    for thread in pumps:
        thread.start()
    started = time.monotonic()
    disk.start()

    def finish() -> RunOutcome:
        timed_out = ended = False
        try:
            ended = sandboxed.wait(max(0.0, limits.wall_seconds - (time.monotonic() - started)))
            if not ended:
                timed_out = not kill.fired.is_set()
                kill(f"wall-clock limit of {limits.wall_seconds:g} s reached")
                ended = sandboxed.wait(None)
            wall = time.monotonic() - started
            disk.stop()
            if not kill.fired.is_set():
                disk.check()  # a last look: a fast fill can finish between two polls
            ending = sandboxed.ending(kill.fired.is_set())
        finally:
            disk.stop()
            try:
                if not ended:
                    kill("grader interrupted")
                for thread in pumps:
                    thread.join(timeout=PUMP_JOIN_SECONDS)
                sandboxed.close()
            finally:
                cleanup.close()
        timed_out = timed_out or ending.timed_out
        if ending.oom_killed:
            outcome_notes.append(NOTE_OOM)
        return RunOutcome(
            exit_code=None if (timed_out or ending.signal) else ending.code,
            signal=ending.signal,
            timed_out=timed_out,
            oom_killed=ending.oom_killed,
            wall_seconds=wall,
            stdout_tail=(tails.get("stdout") or tails["output"]).text(),
            stderr_tail=tails["stderr"].text() if "stderr" in tails else "",
            notes=outcome_notes,
        )

    return Started(finish, kill), io_note
