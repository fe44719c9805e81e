"""Source lines around a compiler error or emulator diagnostic, with the offending line marked.

Lines come from the results document (`source_excerpts`) when the grader recorded them; otherwise from the
submission folder, read as text only, size-capped and only inside that folder (a student's symlink must not
make the report show a grader file).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from grader.reporting.submission_files import read_submission_file, submission_relative
from grader.results import GradeResult, SourceExcerpt, SourceLocation


@dataclass(frozen=True)
class ExcerptLine:
    number: int
    text: str
    is_target: bool


@dataclass(frozen=True)
class Excerpt:
    file: str
    line: int
    lines: list[ExcerptLine]


def _find_in_recorded(recorded: list[SourceExcerpt], file: str, line: int) -> SourceExcerpt | None:
    for excerpt in recorded:
        same_file = excerpt.file == file or Path(excerpt.file).name == Path(file).name
        if same_file and excerpt.first_line <= line < excerpt.first_line + len(excerpt.lines):
            return excerpt
    return None


def excerpt_at(result: GradeResult, location: SourceLocation | None, context: int = 3) -> Excerpt | None:
    """The lines around location, or None when neither the result nor the submission has them."""
    if location is None or not location.file or not location.line:
        return None
    file = submission_relative(location.file)
    line = location.line
    recorded = _find_in_recorded(result.source_excerpts, file, line)
    if recorded is not None:
        first, text = recorded.first_line, recorded.lines
    else:
        lines = read_submission_file(Path(result.submission_path), file) if result.submission_path else None
        if lines is None or line > len(lines):
            return None
        first, text = 1, lines
    lo = max(line - context, first)
    hi = min(line + context, first + len(text) - 1)
    return Excerpt(
        file=file,
        line=line,
        lines=[ExcerptLine(n, text[n - first], n == line) for n in range(lo, hi + 1)],
    )
