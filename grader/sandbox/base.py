"""The runner interface every isolation strategy implements (docker, bwrap, process, pod), and its phases,
mounts, limits and outcome."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol


class Phase(StrEnum):
    BUILD = "build"
    RUN = "run"


class SandboxError(RuntimeError):
    """The sandbox itself failed (no daemon, no image): an internal error, never the student's fault."""


class SandboxTarget(Protocol):
    """What choosing and starting a runner needs from the backend it runs (grader.backends.Backend is one):
    the sandbox asks these and never names a backend, so it imports none."""

    name: str
    default_device: str
    passes_device: bool  # a card's device nodes must go in: only the docker sandbox can
    pod_runtime_class: str | None  # a Kubernetes phase pod's RuntimeClass (None: the cluster's default)
    pod_resources: Mapping[str, str]  # extended resources a Kubernetes phase pod requests

    def device_nodes(self, device: str | None) -> list[str]: ...

    def image_tag(self) -> str: ...

    def ready_image(self, client: Any) -> str | None: ...

    def image_fix(self) -> str: ...


# Paths as the harness sees them inside the sandbox (DESIGN.md, "Harness protocol").
SANDBOX_SUBMISSION = "/submission"
SANDBOX_BUILD = "/build"
SANDBOX_IO = "/io"


@dataclass(frozen=True)
class Mounts:
    """Host folders bound at the fixed sandbox paths; `build` is writable only in the build phase."""

    submission: Path
    build: Path
    io: Path


@dataclass(frozen=True)
class Limits:
    wall_seconds: float = 300.0
    memory_bytes: int = 4 << 30
    pids: int = 256
    cpus: float = 1.0
    file_size_bytes: int = 256 << 20
    open_files: int = 1024
    tmpfs_bytes: int = 512 << 20
    log_bytes: int = 1 << 20  # stdout/stderr kept beyond this are dropped


def cores(at_most: float) -> float:
    """A sandbox's CPU limit (Limits.cpus) of `at_most` cores, or all the machine's where it has fewer."""
    return min(at_most, float(os.cpu_count() or 1))


@dataclass
class RunOutcome:
    exit_code: int | None
    signal: int | None = None
    timed_out: bool = False
    oom_killed: bool = False
    wall_seconds: float = 0.0
    stdout_tail: str = ""
    stderr_tail: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out and not self.oom_killed


class Runner(Protocol):
    """Runs one harness phase isolated from the host; never raises for anything the student did."""

    name: str

    def run(self, phase: Phase, argv: list[str], mounts: Mounts, limits: Limits,
            env: dict[str, str] | None = None) -> RunOutcome: ...


class StartingRunner(Runner, Protocol):
    """A runner that can also leave the sandbox running while the host talks to it through /io (the rounds of
    bang_harness.session): `run` is `start(...).wait()`. The docker, bwrap and process runners inherit it."""

    def start(self, phase: Phase, argv: list[str], mounts: Mounts, limits: Limits,
              env: dict[str, str] | None = None) -> Started: ...

    def run(self, phase: Phase, argv: list[str], mounts: Mounts, limits: Limits,
            env: dict[str, str] | None = None) -> RunOutcome:
        outcome = self.start(phase, argv, mounts, limits, env).wait()
        assert outcome is not None  # wait() without a timeout returns only once the sandbox has ended
        return outcome


class Started:
    """A sandbox running in the background: `finish` (in a thread of its own) waits for it to end -- by itself,
    at the wall limit, or through `kill` -- cleans up and returns the outcome; its exceptions reach `wait`."""

    def __init__(self, finish: Callable[[], RunOutcome], kill: Callable[[str], None]) -> None:
        self._kill = kill
        self._outcome: RunOutcome | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._finish, args=(finish,), daemon=True, name="sandbox-wait")
        self._thread.start()

    def _finish(self, finish: Callable[[], RunOutcome]) -> None:
        try:
            self._outcome = finish()
        except BaseException as exc:  # noqa: BLE001 -- handed to whoever waits
            self._error = exc

    def wait(self, timeout: float | None = None) -> RunOutcome | None:
        """The outcome once the sandbox has ended and is cleaned up; None while it still runs after `timeout`."""
        self._thread.join(timeout)
        if self._thread.is_alive():
            return None
        if self._error is not None:
            raise self._error
        assert self._outcome is not None
        return self._outcome

    def stop(self, reason: str) -> RunOutcome:
        """Kills the sandbox (`reason` is the outcome's note, as for a runner's own kill) and waits for it."""
        if self._thread.is_alive():
            self._kill(reason)
        outcome = self.wait()
        assert outcome is not None
        return outcome
