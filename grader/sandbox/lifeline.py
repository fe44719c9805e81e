"""The lifeline between a grader process and its reaper (grader.sandbox.reaper): a pipe whose only write end
the grader holds, so the kernel closes it when the grader exits, however it exits (SIGKILL included), and the
reaper, reading the other end, cleans up after it. The runners (docker_runner) and io_cap start it before they
make anything a dead grader would leave behind; it imports nothing of theirs, the reaper does."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

_write_ends: dict[int, int] = {}  # pid -> the pipe's write end (kept open for the life of the process)


def watch_this_process() -> None:
    """Starts this process's reaper, once per process (a forked child gets its own)."""
    pid = os.getpid()
    if pid in _write_ends:
        return
    read_end, write_end = os.pipe()  # both close-on-exec: no other child inherits the write end
    try:
        subprocess.Popen([sys.executable, "-m", "grader.sandbox.reaper", str(pid)], stdin=read_end,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(
                             [str(Path(__file__).resolve().parents[2]), os.environ.get("PYTHONPATH", "")])})
    except OSError:
        os.close(write_end)
        return  # no reaper: the finally and the sweep at the next start still remove the containers
    finally:
        os.close(read_end)
    _write_ends[pid] = write_end
