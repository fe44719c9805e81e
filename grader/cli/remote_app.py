"""`grade submit --server URL ...`: the course server's client as a command of its own, run by `grade`'s entry
(grader.cli.entry) without importing the whole CLI, so a submit-only install (pyproject's `client` extra: no
torch, docker or grading stack) can use it. Speaks the student's language: --lang, else the locale."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from grader.cli.exits import EXIT_CODES_HELP, ExitCode, exit_code, usage_error
from grader.i18n import LANGUAGES, _, resolve_language, use_language


def run(server: str, submission: Path | None, *, assignment: str | None = None, mode: str = "test",
        device: str | None = None, out: Path | None = None, lang: str | None = None, late_ok: bool = False,
        list_only: bool = False, choose: int | None = None) -> None:
    """The command's body (also what `grade submit --server` of the whole CLI calls); raises typer.Exit."""
    if lang is not None and lang not in LANGUAGES:
        raise usage_error(f"--lang must be one of {', '.join(LANGUAGES)}, got {lang!r}")
    with use_language(resolve_language(lang, None)):
        _run(server, submission, assignment=assignment, mode=mode, device=device, out=out, late_ok=late_ok,
             list_only=list_only, choose=choose)


def _run(server: str, submission: Path | None, *, assignment: str | None, mode: str, device: str | None,
         out: Path | None, late_ok: bool, list_only: bool, choose: int | None) -> None:
    from grader.cli.remote_submit import (
        RemoteError,
        choose_remote,
        client,
        open_assignments,
        print_assignments,
        print_remote,
        submit_remote,
    )

    console = Console(highlight=False)
    try:
        if list_only:
            with client(server) as http:
                print_assignments(open_assignments(http, server), console)
            raise typer.Exit(ExitCode.OK)
        if choose is not None:
            counting = choose_remote(server, choose)
            console.print(_("submission #{id} counts now").format(id=counting))
            raise typer.Exit(ExitCode.OK)
        if submission is None:
            raise RemoteError(_("which folder? pass the submission folder (or --list, or --choose ID)"))
        if not submission.is_dir():
            raise RemoteError(_("no such folder: {path}").format(path=submission))
        out_dir = out or Path("out") / submission.resolve().name
        confirm = (lambda question: typer.confirm(question, default=False)) if sys.stdin.isatty() else None
        result, state = submit_remote(server, submission, assignment=assignment, mode=mode, out_dir=out_dir,
                                      console=console, device=device, late_ok=late_ok, confirm=confirm)
    except RemoteError as exc:  # not graded, not an attempt: a usage error's status
        raise usage_error(str(exc)) from exc
    print_remote(result, state, console, out_dir)
    raise typer.Exit(exit_code(result))


app = typer.Typer(add_completion=False, epilog=EXIT_CODES_HELP)


@app.command(epilog=EXIT_CODES_HELP)
def submit(
    server: Annotated[str, typer.Option("--server", help="the course server's URL (token: $BANG_GRADER_TOKEN or "
                                                         "~/.config/bang-grader/token)")],
    submission: Annotated[Path | None, typer.Argument(help="the submission folder (my_ops/)")] = None,
    assignment: Annotated[str | None, typer.Option("--assignment", "-a", help="default: grade.toml's")] = None,
    mode: Annotated[str, typer.Option("--mode", help="test (first stage, not counted), benchmark (every stage, "
                                                     "not counted) or final (counts)")] = "test",
    device: Annotated[str | None, typer.Option("--device", "-d", help="the device type to grade on")] = None,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="folder for results.json and report.html")] = None,
    lang: Annotated[str | None, typer.Option("--lang", help="zh or en (default: the locale)")] = None,
    late_ok: Annotated[bool, typer.Option("--late-ok", help="upload even though the deadline has passed (the late "
                                                            "penalty is taken off)")] = False,
    list_only: Annotated[bool, typer.Option("--list", help="list the open assignments (deadline, late window, "
                                                           "what counts) and exit")] = False,
    choose: Annotated[int | None, typer.Option("--choose", help="make this graded final submission the one that "
                                                                "counts (an assignment whose policy is `chosen`)")]
    = None,
) -> None:
    """Grade one submission on the course server: upload, follow the queue, fetch the result and the report."""
    run(server, submission, assignment=assignment, mode=mode, device=device, out=out, lang=lang, late_ok=late_ok,
        list_only=list_only, choose=choose)


def main(argv: list[str]) -> None:
    """`grade submit ARGS` with `argv` the ARGS (after `submit`)."""
    typer.main.get_command(app).main(args=argv, prog_name="grade submit")
