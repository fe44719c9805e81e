"""Which assignment and stages a submission is graded on: from --assignment, grade.toml or the entry it offers."""

from __future__ import annotations

import tomllib
from pathlib import Path

from grader.i18n import _, resolve_language
from grader.layout import LayoutError, Submission, offers
from grader.orchestration.options import GradeRequest
from grader.spec import AssignmentSpec, SpecError, available_assignments, load_assignment


def all_specs(extra: AssignmentSpec | None = None) -> list[AssignmentSpec]:
    """Every assignment that loads, plus `extra` (one given by path, not among the bundled ones)."""
    specs = []
    for name in available_assignments():
        try:
            specs.append(load_assignment(name))
        except SpecError:
            continue
    if extra is not None and extra.name not in {s.name for s in specs}:
        specs.append(extra)
    return specs


def load_spec(request: GradeRequest, submission: Submission) -> AssignmentSpec:
    if request.assignment is not None:
        return load_assignment(request.assignment)
    if submission.assignment is not None:
        try:
            return load_assignment(submission.assignment)
        except SpecError as exc:
            raise LayoutError(_("grade.toml: assignment {name} is unknown (known: {known})").format(
                name=repr(submission.assignment), known=", ".join(available_assignments())),
                show_layout=False) from exc
    fits = [s for s in all_specs() if offers(submission, s.entry)]
    if len(fits) == 1:
        return fits[0]
    known = ", ".join(available_assignments())
    raise LayoutError(_("cannot tell which assignment this is: set assignment = \"...\" in grade.toml or pass "
                        "--assignment (known: {known})").format(known=known), show_layout=False)


def guess_spec(root: Path, request: GradeRequest) -> AssignmentSpec | None:
    """Best effort, for the record of an ungradable submission: which assignment it was meant for."""
    names = [request.assignment]
    # Regular files only (is_file): a FIFO named grade.toml would block this read forever.
    try:
        if (root / "grade.toml").is_file():
            names.append(tomllib.loads((root / "grade.toml").read_text(encoding="utf-8")).get("assignment"))
    except (OSError, ValueError):
        pass
    for name in names:
        if isinstance(name, str) and name in available_assignments():
            return load_assignment(name)
    try:
        if not (root / "ops.py").is_file():
            return None
        source = (root / "ops.py").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    fits = [s for s in all_specs() if f"def {s.entry}(" in source]
    return fits[0] if len(fits) == 1 else None


def grading_language(root: Path, request: GradeRequest) -> str:
    """The language of a grading's messages: --lang, then the assignment's `lang`, then the locale."""
    try:
        spec = guess_spec(root, request)
    except SpecError:
        spec = None
    return resolve_language(request.lang, spec.lang if spec is not None else None)


def selected_stages(spec: AssignmentSpec, request: GradeRequest) -> list[str]:
    names = [s.name for s in spec.stages]
    if request.stages:
        unknown = [s for s in request.stages if s not in names]
        if unknown:
            raise SpecError(f"unknown stage(s) {unknown} for {spec.name}; stages: {names}")
        return [s for s in names if s in request.stages]
    return names
