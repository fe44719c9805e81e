"""One grading job, whatever its front door (`grade submit`, a batch worker, the course server's worker):
request -> grade -> result -> results.json -> report.

run_job() is the one entry: grade_submission() on the request in the environment, the result completed with
what the front door knows better than the submission (the roster's student, notes of its own), then written
by finish_job(): results.json and report.html in the observer's folder. finish_job() is the one writer of
both (a grading that could not start, documented by document.environment_error_result, is written by it too),
and report_html() the one rendering of a report: the course server renders a stored result through it, the
batch's exports a report no grading wrote (a result the batch made itself) through it.
"""

from __future__ import annotations

import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import tzinfo
from pathlib import Path

from grader.atomic_file import atomic_write_text
from grader.i18n import _, resolve_language, use_language
from grader.orchestration.afterwards import tidy_after
from grader.orchestration.document import result_document
from grader.orchestration.options import UNOBSERVED, GradeEnvironment, GradeObserver, GradeRequest
from grader.orchestration.pipeline import grade_submission
from grader.results import GradeResult, Student, Verdict

RESULTS_FILE = "results.json"
REPORT_FILE = "report.html"


@dataclass(frozen=True)
class GradedJob:
    """A job's result and what was written of it (paths None: not written, no folder given)."""

    result: GradeResult
    results: Path | None = None
    report: Path | None = None
    report_error: str = ""  # why the report could not be drawn; the grade stands without it


def run_job(submission: Path, request: GradeRequest, environment: GradeEnvironment,
            observer: GradeObserver = UNOBSERVED, *, student: Student | None = None,
            notes: Sequence[str] = ()) -> GradedJob:
    """Grades `submission` and writes its results.json and report (finish_job). `student`: who it belongs
    to when the front door knows better than its grade.toml (a roster); `notes` follow the result's message.
    Never raises for what the submission or the grader does: a grader failure is the result."""
    submission = Path(submission)
    with tidy_after():  # the grading's sandboxes end while its results.json and report are written (afterwards.py)
        try:
            result = grade_submission(submission, request, environment, observer.progress)
        except Exception:  # noqa: BLE001 -- a grader bug outside the pipeline's own guard is still a result
            with use_language(resolve_language(request.lang, None)):
                result = result_document(submission, request, environment, Verdict.INTERNAL_ERROR,
                                         _("the grader failed (not your fault):") + "\n" + traceback.format_exc())
        update: dict[str, object] = {}
        if student is not None:
            update["student"] = student
        if notes:
            update["message"] = "\n".join([result.message, *notes]).strip()
        return finish_job(result.model_copy(update=update) if update else result, observer)


def finish_job(result: GradeResult, observer: GradeObserver) -> GradedJob:
    """results.json and report.html of `result` in the observer's folder (nothing without one): the one place
    either is written."""
    if observer.out_dir is None:
        return GradedJob(result)
    folder = Path(observer.out_dir)
    results = atomic_write_text(folder / RESULTS_FILE, result.to_json())
    try:
        report = write_report(result, folder / REPORT_FILE)
    except Exception as exc:  # noqa: BLE001 -- the grade stands even if the report cannot be drawn
        return GradedJob(result, results, None, f"{type(exc).__name__}: {exc}")
    return GradedJob(result, results, report)


def report_html(result: GradeResult, lang: str | None = None, zone: tzinfo | None = None) -> str:
    """The report of `result`, in its language or in `lang` (the course server draws a stored result in the
    language of whoever opens it: the report's words, findings and hints follow `lang`; each case's message keeps
    the language it was graded in), times in `zone` (the course server's; default UTC): the one rendering every front
    door uses."""
    from grader.reporting.render import render_report_html

    shown = result if lang in (None, result.lang) else result.model_copy(update={"lang": lang})
    return render_report_html(shown, zone)


def write_report(result: GradeResult, path: Path) -> Path:
    """report_html(result) written whole to `path` (parents made); returns `path`."""
    return atomic_write_text(Path(path), report_html(result))
