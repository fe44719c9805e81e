"""What a batch hands to the instructor and the LMS, all derived from the stored results: a gradebook CSV,
a Canvas import CSV, one Gradescope results.json per student (grader.gradescope) and the per-student HTML
reports (the one grading wrote, else drawn by the renderer the caller hands in: grader.orchestration.job's,
the one rendering of a report). `csv_cell` is the one place CSV cells are neutralised against formula
injection."""

from __future__ import annotations

import csv
import io
import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grader.atomic_file import atomic_write_text
from grader.batch.intake import StudentSubmission
from grader.gradescope import write_gradescope
from grader.results import GradeResult


@dataclass
class ClassRow:
    """One student of the batch with the result that counts for them."""

    submission: StudentSubmission
    result: GradeResult
    run_dir: Path | None = None  # where grading wrote report.html and artefacts
    stored_as: str = ""  # "<key>@<mtime>" of the stored result: a report drawn from it is up to date
    not_graded: str = ""  # why this entry of the class folder has no grade (exported without a score)


# Writes the report of a result to a path (grader.orchestration.job.write_report): how a missing one is drawn.
WriteReport = Callable[[GradeResult, Path], Path]
NOT_GRADED = "not_graded"  # the gradebook's verdict cell for an entry with no grade
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: object) -> str:
    """A cell a spreadsheet shows as text: one whose first non-blank character starts a formula (= + - @), or
    that starts with tab or CR, gets a leading quote, so `=HYPERLINK(...)`, " =1+2" or "\n=1+2" in a name or
    message is never evaluated by Excel, LibreOffice or Sheets (they skip leading blanks before a formula)."""
    text = "" if value is None else str(value)
    return "'" + text if text.startswith(FORMULA_STARTS) or text.lstrip().startswith(FORMULA_STARTS) else text


def _writerow(writer: Any, cells: list[object]) -> None:
    writer.writerow([csv_cell(c) for c in cells])


def display_name(sub: StudentSubmission) -> str:
    """The roster's name, else the folder/archive name (the student id): never grade.toml, which the student
    writes."""
    return sub.name or sub.student_id


def _fmt(points: float) -> str:
    return f"{points:.2f}".rstrip("0").rstrip(".") if points % 1 else str(int(points))


def _ordered_names(rows: list[ClassRow], kind: str, declared: dict[str, float] | None = None) -> dict[str, float]:
    """Group or stage name -> points possible: the spec's (`declared`, so a class where nobody reached a
    stage still has its column), then any other name the results carry, in first-seen order."""
    names: dict[str, float] = dict(declared or {})
    for row in rows:
        items = row.result.groups if kind == "group" else row.result.stages
        for item in items:
            names[item.name] = max(names.get(item.name, 0.0), item.points_possible)
    return names


def class_max_score(rows: list[ClassRow]) -> float:
    return max((r.result.max_score for r in rows), default=0.0)


def gradebook_csv(rows: list[ClassRow], columns: tuple[dict[str, float], dict[str, float]] | None = None) -> str:
    """One row per student: points per case group and per stage, total, verdict. The first row after the
    header holds the points possible (instructors asked Otter for exactly this, #803). `columns`: the
    spec's (group -> points, stage -> points)."""
    groups = _ordered_names(rows, "group", columns[0] if columns else None)
    stages = _ordered_names(rows, "stage", columns[1] if columns else None)
    header = (["student_id", "name"] + [f"group:{g}" for g in groups] + [f"stage:{s}" for s in stages]
              + ["total", "max_score", "percent", "verdict", "message", "submission_hash", "origin"])
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    _writerow(writer, header)
    max_total = class_max_score(rows)
    _writerow(writer, ["(points possible)", ""] + [_fmt(p) for p in groups.values()]
                    + [_fmt(p) for p in stages.values()] + [_fmt(max_total), _fmt(max_total), "100", "", "", "", ""])
    for row in rows:
        r = row.result
        group_points = {g.name: g.points for g in r.groups}
        stage_points = {s.name: s.points for s in r.stages}
        max_score = r.max_score or max_total
        percent = 100.0 * r.score / max_score if max_score else 0.0
        first_line = " ".join(line.strip() for line in r.message.strip().splitlines())[:400]  # a layout error's list too
        if row.not_graded:  # a row with its reason and no points, so no import reads it as a zero
            _writerow(writer, [row.submission.student_id, display_name(row.submission)]
                      + [""] * (len(groups) + len(stages)) + ["", _fmt(max_score), "", NOT_GRADED,
                                                              row.not_graded[:200], "", row.submission.origin])
            continue
        _writerow(writer, [row.submission.student_id, display_name(row.submission)]
                        + [_fmt(group_points.get(g, 0.0)) for g in groups]
                        + [_fmt(stage_points.get(s, 0.0)) for s in stages]
                        + [_fmt(r.score), _fmt(max_score), f"{percent:.1f}", str(r.verdict), first_line,
                           row.submission.content_hash[:16], row.submission.origin])
    return out.getvalue()


def _extra(sub: StudentSubmission, *names: str) -> str:
    lowered = {k.strip().lower(): v for k, v in sub.extra.items()}
    for name in names:
        if lowered.get(name.lower()):
            return lowered[name.lower()]
    return ""


def canvas_csv(rows: list[ClassRow], assignment_title: str) -> str:
    """Canvas gradebook import: Student, ID, SIS User ID, SIS Login ID, Section, then the assignment
    column, with the 'Points Possible' row Canvas itself exports. Canvas matches students by ID, then SIS
    ids; an ID we do not know is left empty rather than guessed."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    _writerow(writer, ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", assignment_title])
    _writerow(writer, ["Points Possible", "", "", "", "", _fmt(class_max_score(rows))])
    for row in rows:
        sub = row.submission
        _writerow(writer, [
            display_name(sub),
            _extra(sub, "canvas_id", "canvas id", "ID"),
            _extra(sub, "sis user id", "sis_user_id") or sub.student_id,
            _extra(sub, "sis login id", "sis_login_id", "login"),
            _extra(sub, "section"),
            "" if row.not_graded else _fmt(row.result.score),  # an empty cell: Canvas leaves the grade alone
        ])
    return out.getvalue()


def write_student_report(row: ClassRow, path: Path, render: WriteReport) -> str | None:
    """Puts the student's HTML report at `path`: the one grading wrote, else drawn now from the result by
    `render` (results the batch made itself, e.g. for a crashed worker). Returns a note when neither was
    possible."""
    written = row.run_dir / "report.html" if row.run_dir else None
    path.parent.mkdir(parents=True, exist_ok=True)
    if written is not None and written.is_file():
        shutil.copyfile(written, path)
        return None
    try:
        render(row.result, path)
    except Exception as exc:  # a report that fails to render must not stop the exports
        return f"report for {row.submission.student_id} failed to render: {exc!r}"
    return None


def write_exports(rows: list[ClassRow], out_dir: Path, assignment_title: str, render: WriteReport,
                  columns: tuple[dict[str, float], dict[str, float]] | None = None) -> list[str]:
    """Writes every export under `out_dir` (a report no grading wrote drawn by `render`); returns notes about
    what could not be written."""
    notes: list[str] = []
    atomic_write_text(out_dir / "gradebook.csv", gradebook_csv(rows, columns))
    atomic_write_text(out_dir / "canvas.csv", canvas_csv(rows, assignment_title))
    # Which stored result each report was drawn from: a rerun that graded nothing new redraws nothing.
    index_path = out_dir / "reports" / ".drawn-from.json"
    try:
        drawn = json.loads(index_path.read_text())
    except (OSError, ValueError):
        drawn = {}
    for row in rows:
        slug = row.submission.slug
        if row.not_graded:  # no grade: nothing for Gradescope to import
            (out_dir / "gradescope" / slug / "results.json").unlink(missing_ok=True)
        else:
            write_gradescope(row.result, out_dir / "gradescope" / slug / "results.json")
        report = out_dir / "reports" / f"{slug}.html"
        if row.stored_as and drawn.get(slug) == row.stored_as and report.is_file():
            continue
        note = write_student_report(row, report, render)
        if note:
            notes.append(note)
        else:
            drawn[slug] = row.stored_as
    atomic_write_text(index_path, json.dumps(drawn, indent=1, sort_keys=True))
    return notes
