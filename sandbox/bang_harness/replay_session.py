"""`python -m bang_harness replay` with /io/replays/: every trusted replay of one submission in one sandbox.

The replays are the ones a sandbox each would run (replay.py); only the start-up is shared (DESIGN.md "Threat
model"). The keeper (this module, the sandbox's first process) reads and unlinks /io/trace.key -- the sandbox's
master key -- before anything else runs, makes itself non-dumpable and a child subreaper, and never loads a
kernel. Per replay n it waits (bounded) for the host's /io/replays/n/job.json, runs it only if job.mac is the
host's MAC under the master key, replays the folder as run_replay replays a sandbox's /io -- its children hold
replay n's key alone (protocol.replay_key), never the master key -- and once the replay is over kills every
process left under it, then writes outputs/round.done = protocol.replay_done_mark(master, n, ok), which nothing
else in the sandbox can make. So replay n's processes are gone before the host hands in replay n + 1, and what
they could have learned signs nothing of another replay's. When the keeper dies, a replay passes its time or
fails, the host ends the sandbox and the next replay gets a fresh one.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from .job import JobError
from .paths import HarnessPaths
from .protocol import REPLAY_STDERR, REPLAYS_DIR, ROUND_WAIT_SECONDS, ExitCode, replay_done_mark, replay_key
from .replay_forks import ReplayForks
from .run import make_undumpable, take_trace_key
from .session import become_subreaper, sweep, wait_for_job, write_done


def replay_phase(paths: HarnessPaths) -> int:
    """`python -m bang_harness replay`: the replays when the host hands them in one by one (/io/replays/ and no
    /io/replay.json), else the one replay of /io."""
    from .replay import REPLAY_JOB, run_replay

    if (paths.io / REPLAYS_DIR).is_dir() and not (paths.io / REPLAY_JOB).exists():
        return run_replay_session(paths)
    return run_replay(paths)


def run_replay_session(paths: HarnessPaths, wait_seconds: float = ROUND_WAIT_SECONDS) -> int:
    make_undumpable()
    become_subreaper()
    from .replay import replay_one, run_replay

    forks = ReplayForks.start(replay_one)  # before the key is read: it never holds one (replay_forks.py)
    try:
        master = take_trace_key(paths)  # first: before any replay's process exists
        if master is None:
            raise JobError("replays need the host's key in /io/trace.key")
    except JobError as exc:
        print(f"bang_harness replay: {exc}", file=sys.stderr)
        if forks is not None:
            forks.close()
        return ExitCode.JOB_UNREADABLE
    index = 0
    try:
        while True:
            folder = paths.io / REPLAYS_DIR / str(index)
            job_text = wait_for_job(folder, master, index, wait_seconds)
            if job_text is None:
                return ExitCode.OK  # the host is done with this sandbox (or gone)
            one = HarnessPaths(submission=paths.submission, build=paths.build, io=folder)
            with _stderr_into(one.outputs / REPLAY_STDERR):
                status = run_replay(one, key=replay_key(master, index), job_text=job_text, forks=forks)
            if not sweep(spare=forks.pid if forks is not None and forks.alive else -1):
                print("bang_harness replay: processes of the replay survived SIGKILL", file=sys.stderr)
                return ExitCode.ROUND_LOST
            write_done(one.outputs, replay_done_mark(master, index, status == ExitCode.OK))
            index += 1
    except JobError as exc:
        print(f"bang_harness replay: {exc}", file=sys.stderr)
        return ExitCode.JOB_UNREADABLE
    finally:
        if forks is not None:
            forks.close()


class _stderr_into:
    """The replay's stderr (this process's and its children's) into its own outputs, for the host to read a capped
    tail of, as it reads a replay sandbox's own stderr; the sandbox's stderr again afterwards."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __enter__(self) -> None:
        sys.stderr.flush()
        self.saved = os.dup(2)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        os.dup2(fd, 2)
        os.close(fd)

    def __exit__(self, *exc: object) -> None:
        sys.stderr.flush()
        os.dup2(self.saved, 2)
        os.close(self.saved)
