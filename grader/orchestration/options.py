"""What a caller (CLI, batch) asks of one grading run."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from grader.backends import DEFAULT_BACKEND

if TYPE_CHECKING:
    from grader.sandbox.base import Runner


@dataclass
class GradeOptions:
    assignment: str | None = None  # None: from grade.toml, else the only assignment the submission fits
    backend: str = DEFAULT_BACKEND  # a name of grader.backends.BACKENDS
    device: str | None = None  # device profile (emu) or card index (mlu); None: backend default
    sandbox: Literal["auto", "docker", "bwrap", "none"] = "auto"
    seed_mode: Literal["public", "secret"] = "public"
    seed: str | None = None  # master seed; secret mode draws one when None
    out_dir: Path | None = None  # where results.json, report.html and artifacts go
    build_cache: Path | None = None  # content-addressed build cache shared across runs
    stages: list[str] | None = None  # restrict to these stages (None: all)
    progress: Callable[[str, float], None] | None = None  # (step description, fraction done)
    batch: bool = False  # batch grading refuses to run unsandboxed
    lang: str | None = None  # en or zh; None: assignment.toml `lang`, then the locale (grader.i18n)
    runner: Runner | None = None  # None: the one --sandbox selects; tests pass a fake to drive the policy
