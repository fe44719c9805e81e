"""Finds and validates assignment specs; every problem becomes one readable SpecError."""

from __future__ import annotations

import tomllib
from pathlib import Path

from pydantic import ValidationError

from grader.spec.models import AssignmentSpec

ASSIGNMENTS_ROOT = Path(__file__).resolve().parents[2] / "assignments"
# The instructor's reference kernels: reference_kernels/<assignment>/<stage>/ (calibration, the reference-seed guard).
REFERENCE_ROOT = Path(__file__).resolve().parents[2] / "reference_kernels"
SPEC_FILE = "assignment.toml"


class SpecError(Exception):
    """An assignment spec is missing or invalid; the message names the file and every problem in it."""


def assignment_dir(name_or_path: str | Path, root: Path = ASSIGNMENTS_ROOT) -> Path:
    candidate = Path(name_or_path)
    if candidate.is_dir() and (candidate / SPEC_FILE).is_file():
        return candidate
    folder = root / str(name_or_path)
    if not (folder / SPEC_FILE).is_file():
        known = ", ".join(available_assignments(root)) or "none"
        raise SpecError(f"no assignment {str(name_or_path)!r}: {folder / SPEC_FILE} does not exist (known: {known})")
    return folder


def available_assignments(root: Path = ASSIGNMENTS_ROOT) -> list[str]:
    return sorted(p.parent.name for p in root.glob(f"*/{SPEC_FILE}")) if root.is_dir() else []


def parse_spec(text: str, source: str = "<spec>") -> AssignmentSpec:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"{source}: not valid TOML: {exc}") from exc
    try:
        return AssignmentSpec.model_validate(data)
    except ValidationError as exc:
        raise SpecError(f"{source}: invalid assignment spec:\n" + format_validation_error(exc)) from exc


def load_assignment(name_or_path: str | Path, root: Path = ASSIGNMENTS_ROOT) -> AssignmentSpec:
    path = assignment_dir(name_or_path, root) / SPEC_FILE
    return parse_spec(path.read_text(encoding="utf-8"), str(path))


def format_validation_error(exc: ValidationError) -> str:
    lines = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"]) or "spec"
        message = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            message = "unknown key (typo?)"
        lines.append(f"  - {where}: {message}")
    return "\n".join(lines)
