"""The runner interface every isolation strategy implements (docker, bwrap, process, pod), and its phases,
mounts, limits and outcome."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Protocol


class Phase(StrEnum):
    BUILD = "build"
    RUN = "run"


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
