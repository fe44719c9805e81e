"""What `grade` exits with (every verb; EXIT_CODES_HELP shows it under each --help), a graded result's status,
and a usage error's one line. Light (no grading stack): the course server's client (remote_app) uses it too."""

from __future__ import annotations

import sys
from enum import IntEnum

import typer
from rich.console import Console

from grader.i18n import _
from grader.results import GradeResult, Verdict


class ExitCode(IntEnum):
    """What `grade` exits with, for every verb (EXIT_CODES_HELP shows it under each --help)."""

    OK = 0  # submit: passed; batch: every entry of the class graded; other verbs: done
    NOT_PASSED = 1  # submit: graded, not passed; batch: an entry not graded or a grader failure; a failed check
    ERROR = 2  # usage error (path, assignment, option), the machine cannot grade, or the grader itself failed
    INTERRUPTED = 130  # Ctrl-C or SIGTERM


EXIT_CODES_HELP = (
    f"Exit status: {ExitCode.OK:d} done (submit: passed; batch: every entry of the class graded); "
    f"{ExitCode.NOT_PASSED:d} graded but not passed (batch: an entry not graded, or a grader failure; "
    f"calibrate, doctor, setup, selftest, spec check: a check failed); {ExitCode.ERROR:d} usage error (no such "
    f"path, unknown assignment, bad option), the machine cannot grade, or the grader itself failed; "
    f"{ExitCode.INTERRUPTED:d} interrupted (Ctrl-C)."
)


def exit_code(result: GradeResult) -> ExitCode:
    if result.verdict == Verdict.PASSED:
        return ExitCode.OK
    if result.verdict in (Verdict.INTERNAL_ERROR, Verdict.ENVIRONMENT_ERROR):
        return ExitCode.ERROR
    return ExitCode.NOT_PASSED


def usage_error(message: str) -> typer.Exit:
    """One line on stderr (`grade VERB: error: ...`); the caller raises the returned exit (status ERROR)."""
    Console(stderr=True, highlight=False).print(
        _("{command}: error: {problem}").format(command="grade " + " ".join(sys.argv[1:2]), problem=message),
        markup=False, soft_wrap=True)
    return typer.Exit(ExitCode.ERROR)
