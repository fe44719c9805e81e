"""What a caller (CLI, batch, server) asks of one grading run, in three frozen parts:

- GradeRequest: what is graded and how it is judged (assignment, stages, seed, language): the same request
  gives the same grade on any machine;
- GradeEnvironment: where it runs (backend, device, sandbox, runner, build cache);
- GradeObserver: who watches it (progress, the folder its results.json and report.html go to).

None changes after construction: a caller that learns something (the sandbox setup picked) makes a new one
(dataclasses.replace).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal, get_args

from bang_harness.protocol import ENGINES

from grader.backends import DEFAULT_BACKEND

if TYPE_CHECKING:
    from grader.sandbox.base import Runner

SandboxName = Literal["auto", "docker", "bwrap", "none"]
SeedMode = Literal["public", "secret"]
SANDBOXES: tuple[SandboxName, ...] = get_args(SandboxName)
SEED_MODES: tuple[SeedMode, ...] = get_args(SeedMode)
Progress = Callable[[str, float], None]  # (step description, fraction done)


def sandbox_name(value: str) -> SandboxName:
    """`value` as a sandbox choice; ValueError names the choices."""
    for name in SANDBOXES:
        if value == name:
            return name
    raise ValueError(f"sandbox must be one of {', '.join(SANDBOXES)}, got {value!r}")


def seed_mode(value: str) -> SeedMode:
    """`value` as a seed mode; ValueError names the modes."""
    for mode in SEED_MODES:
        if value == mode:
            return mode
    raise ValueError(f"seed mode must be one of {', '.join(SEED_MODES)}, got {value!r}")


@dataclass(frozen=True)
class GradeRequest:
    """What to grade and how to judge it."""

    assignment: str | None = None  # None: from grade.toml, else the only assignment the submission fits
    stages: tuple[str, ...] | None = None  # restrict to these stages (None: all)
    seed_mode: SeedMode = "public"
    seed: str | None = None  # master seed; secret mode draws one when None
    lang: str | None = None  # en or zh; None: assignment.toml `lang`, then the locale (grader.i18n)

    def __post_init__(self) -> None:
        if self.stages is not None and not isinstance(self.stages, tuple):  # a list given: frozen as given
            object.__setattr__(self, "stages", tuple(self.stages))


REPLAY_ENGINES: tuple[str, ...] = ENGINES  # the trusted replay's engines, the default first


@dataclass(frozen=True)
class GradeEnvironment:
    """Where grading runs."""

    backend: str = DEFAULT_BACKEND  # a name of grader.backends.BACKENDS
    device: str | None = None  # device profile (emu) or card index (mlu); None: backend default
    sandbox: SandboxName = "auto"
    batch: bool = False  # batch grading refuses to run unsandboxed
    build_cache: Path | None = None  # content-addressed build cache shared across runs
    runner: Runner | None = None  # None: the one `sandbox` selects; tests pass a fake to drive the policy
    # the trusted replay's engine: None, WebAssembly (unless $BANG_EMU_REPLAY_ENGINE says native); "native" for
    # comparisons and for the course staff's review of calls held by the disagreement policy (DESIGN.md
    # "Confinement by construction")
    replay_engine: str | None = None


@dataclass(frozen=True)
class GradeObserver:
    """Who watches a grading: its progress, and the folder its results.json and report.html go to."""

    progress: Progress | None = None
    out_dir: Path | None = None


DEFAULT_ENVIRONMENT = GradeEnvironment()  # the default backend, its default device, the sandbox `auto` picks
UNOBSERVED = GradeObserver()  # no progress shown, nothing written
