"""Grader kinds: what a submission is graded as, chosen by its assignment's spec file.

A kind is a small class (as DMOJ's graders are, each chosen by the problem): the spec file that makes an
assignment of its kind (assignments/<name>/<spec_file>), how it recognises a folder handed in without -a, the
assignment whose thresholds it is scored with, and run()/finish() -- the grading, and the result so far when the
grader itself fails. Today: extension modules (assignment.toml; pipeline._Grading) and standalone lab programs
(programs.toml; programs.ProgramsGrader). pipeline.KINDS lists them; choose() picks one for a submission, and
nothing else names a kind.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

from grader.orchestration.options import GradeEnvironment, GradeRequest, Progress
from grader.results import GradeResult, Verdict
from grader.spec import SeedPlan
from grader.spec.loader import ASSIGNMENTS_ROOT


class Grader(ABC):
    """One kind of submission, graded as `request` asks (its assignment is of this kind, once chosen) in
    `environment`, its progress told to `progress`."""

    spec_file: ClassVar[str]  # assignments/<name>/<spec_file> makes <name> an assignment of this kind
    seeds: SeedPlan  # the seeds this grading draws its inputs from (a result records them)

    def __init__(self, root: Path, request: GradeRequest, environment: GradeEnvironment,
                 progress: Progress | None = None) -> None:
        self.root, self.request, self.environment, self.on_progress = root, request, environment, progress

    @classmethod
    def recognise(cls, folder: Path) -> str | None:
        """The assignment of this kind `folder` is laid out for, when none is named; None: not recognised."""
        return None

    @classmethod
    def calibrated_as(cls, assignment: str) -> str:
        """The assignment whose calibrated thresholds `assignment` is scored with (`grade calibrate` times it)."""
        return assignment

    @abstractmethod
    def run(self) -> GradeResult:
        """The grading; never raises for anything the submission does."""

    @abstractmethod
    def finish(self, verdict: Verdict | None, message: str = "") -> GradeResult:
        """The result document of what is known so far, with `verdict` and `message` (verdict None: graded,
        its verdict and summary line from what was found: document.result_document)."""


def kind_named(kinds: Sequence[type[Grader]], assignment: str,
               root: Path = ASSIGNMENTS_ROOT) -> type[Grader] | None:
    """The kind of the assignment `assignment` (a name under `root`): the first whose spec file it has."""
    return next((k for k in kinds if (root / assignment / k.spec_file).is_file()), None)


def choose(kinds: Sequence[type[Grader]], root: Path, request: GradeRequest, environment: GradeEnvironment,
           progress: Progress | None = None, assignments: Path = ASSIGNMENTS_ROOT) -> Grader:
    """The grader of `root`: of the named assignment's kind; with none named, of the first kind that recognises
    the folder (on a new request naming the assignment it recognised); else of the last kind, the default, on
    `request` as given."""
    name = request.assignment
    if name:
        kind = kind_named(kinds, name, assignments)
        return (kind or kinds[-1])(root, request, environment, progress)
    for kind in kinds:
        found = kind.recognise(root)
        if found:
            return kind(root, dataclasses.replace(request, assignment=found), environment, progress)
    return kinds[-1](root, request, environment, progress)
