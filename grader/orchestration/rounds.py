"""The host's side of one run-phase sandbox for all of a submission's rounds (bang_harness.session).

The host still decides every round from the previous one's raw outputs; this only moves the round's files
through a sandbox that stays up. Per round n it makes /io/rounds/n/ afresh (a folder that already exists
means something in the sandbox planted it: the round is refused), writes the inputs, the job's MAC under the
sandbox's master key and then job.json, and waits -- up to the round's own wall limit -- for the keeper's
done mark, which only the keeper can make and which says that no process of the round is left. A sandbox
that ends, or a round past its limit, ends this sandbox: the caller starts a fresh one for the rounds left.
"""

from __future__ import annotations

import dataclasses
import hmac
import json
import os
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bang_harness.protocol import (
    DONE_FILE,
    JOB_FILE,
    JOB_MAC_FILE,
    ROUNDS_DIR,
    done_mark,
    job_mac,
)

from grader.sandbox.base import Limits, Mounts, Phase, RunOutcome, Started, StartingRunner
from grader.sandbox.capped import UntrustedFileError, read_bytes_capped
from grader.sandbox.layout import give_to_sandbox, sandbox_user

POLL_SECONDS = 0.02
STOP_REASON = "the grader is done with this sandbox"


class RoundRefused(RuntimeError):
    """The sandbox's /io is not as the host left it: no round is written into it."""


@dataclass
class Round:
    """One round as the host reads it back: its folder and the runner's outcome (no key: the workers sign
    nothing that is believed, DESIGN.md "Threat model")."""

    io: Path
    outcome: RunOutcome
    sandbox_alive: bool  # False: the sandbox ended (or was ended) during the round


class KeptSandbox:
    """A sandbox kept up for several jobs the host hands in one at a time, each in a folder n of its own under
    /io/`folders`/ that the host makes afresh (RoundSandbox: the rounds; replay_sandbox.ReplaySandbox: the
    replays)."""

    folders = ""  # the folder under /io holding job n's

    def __init__(self, runner: StartingRunner, argv: list[str], mounts: Mounts, limits: Limits,
                 env: dict[str, str], master: bytes) -> None:
        self.runner = runner
        self.argv = argv
        self.mounts = mounts
        self.limits = limits
        self.env = env
        self.master = master
        self.index = 0
        self.started: Started | None = None
        self.alive = True
        (mounts.io / self.folders).mkdir()

    @property
    def root(self) -> Path:
        return self.mounts.io / self.folders

    def start(self) -> None:
        """Starts the sandbox (once) before its first job is written: its keeper waits for it, and a run sandbox's
        torch import is under way while the host gets the round ready (bang_harness.session)."""
        if self.started is None:
            self.started = self.runner.start(Phase.RUN, self.argv, self.mounts, self.limits, env=self.env)

    def ended(self) -> bool:
        """Whether the sandbox, started, has ended: its keeper gone (it waits ROUND_WAIT_SECONDS for a job at most,
        bang_harness.protocol) or stopped by the runner."""
        return self.started is not None and self.started.wait(0) is not None

    def _make_folder(self, index: int) -> Path:
        """Job n's folder, made afresh: RoundRefused when /io/`folders` is not the host's or n exists (planted)."""
        info = os.lstat(self.root)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
            raise RoundRefused(f"{self.root} was replaced from inside the sandbox")
        folder = self.root / str(index)
        try:
            os.mkdir(folder, 0o755)
        except FileExistsError:
            raise RoundRefused(f"{folder} was made from inside the sandbox") from None
        return folder


class RoundSandbox(KeptSandbox):
    """A run-phase sandbox started before (start) or with round 0 and reused while each round ends cleanly."""

    folders = ROUNDS_DIR

    @property
    def rounds(self) -> Path:
        return self.root

    @property
    def next_round(self) -> Path:
        return self.rounds / str(self.index)

    def run_round(self, make_job: Callable[[Path], dict[str, Any]], wall_seconds: float) -> Round:
        """Writes round n (`make_job` writes the inputs into the folder it gets and returns the job), starts the
        sandbox with round 0 unless it was started, and waits for the round's end."""
        index = self.index
        round_dir = self._make_folder(index)
        self.index += 1
        (round_dir / "inputs").mkdir()
        job = make_job(round_dir / "inputs")
        (round_dir / "outputs").mkdir()
        give_to_sandbox(round_dir / "outputs", *sandbox_user())
        text = json.dumps(job, indent=1).encode("utf-8")
        (round_dir / JOB_MAC_FILE).write_text(job_mac(self.master, index, text), encoding="ascii")
        (round_dir / f".{JOB_FILE}.tmp").write_bytes(text)
        os.replace(round_dir / f".{JOB_FILE}.tmp", round_dir / JOB_FILE)  # the keeper waits for this name
        began = time.monotonic()
        self.start()
        assert self.started is not None
        expected = done_mark(self.master, index).encode("ascii")
        while True:
            ended = self.started.wait(POLL_SECONDS)
            if self._done(round_dir, expected):
                if ended is not None:
                    self.alive = False
                return Round(round_dir, RunOutcome(exit_code=0, wall_seconds=time.monotonic() - began),
                             self.alive)
            if ended is not None:
                self.alive = False
                return Round(round_dir, ended, False)
            if time.monotonic() - began > wall_seconds:
                self.alive = False
                outcome = self.started.stop(f"wall-clock limit of {wall_seconds:g} s reached")
                return Round(round_dir, dataclasses.replace(outcome, timed_out=True, exit_code=None,
                                                            wall_seconds=time.monotonic() - began), False)

    def close(self) -> None:
        if self.started is not None and self.alive:
            self.alive = False
            self.started.stop(STOP_REASON)

    @staticmethod
    def _done(round_dir: Path, expected: bytes) -> bool:
        if not os.path.lexists(round_dir / "outputs" / DONE_FILE):  # one stat per poll; read with care once there
            return False
        try:
            mark = read_bytes_capped(round_dir / "outputs" / DONE_FILE, 256, root=round_dir)
        except (UntrustedFileError, OSError):
            return False
        return hmac.compare_digest(mark.strip(), expected)
