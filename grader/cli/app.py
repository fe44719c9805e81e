"""The `grade` command line: submit, run, batch, calibrate, doctor, setup, selftest, images build, spec check/schema.

Thin by design: every command parses options, calls one function of the library and renders its result.
Exit statuses: ExitCode, the one list (every --help shows it). A usage error (a path that is not there, an
unknown assignment, a bad option) is one line on stderr and writes nothing.
"""

from __future__ import annotations

import json
import signal
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from grader.backends import BACKENDS, DEFAULT_BACKEND, get_backend
from grader.cli.exits import EXIT_CODES_HELP, ExitCode, exit_code
from grader.cli.exits import usage_error as _usage_error
from grader.i18n import LANGUAGES, _, current_language, resolve_language, use_language
from grader.orchestration.build_cache import default_build_cache, prune_build_cache
from grader.orchestration.options import (
    REPLAY_ENGINES,
    SANDBOXES,
    GradeEnvironment,
    GradeObserver,
    GradeRequest,
    SandboxName,
    sandbox_name,
)
from grader.orchestration.project_run import DEFAULT_TIMEOUT_SECONDS as RUN_TIMEOUT

if TYPE_CHECKING:
    from grader.orchestration.environment import Prepared


app = typer.Typer(add_completion=False, no_args_is_help=True, help="Autograder for Cambricon BANG C kernels.",
                  epilog=EXIT_CODES_HELP)
images_app = typer.Typer(no_args_is_help=True, help="Build the sandbox images.", epilog=EXIT_CODES_HELP)
spec_app = typer.Typer(no_args_is_help=True, help="Validate and document assignment specs.", epilog=EXIT_CODES_HELP)
app.add_typer(images_app, name="images")
app.add_typer(spec_app, name="spec")

BackendOpt = Annotated[str, typer.Option("--backend", "-b", help=f"one of {', '.join(BACKENDS)} (emu: emulator, "
                                         "modelled time; mlu: real card)")]
DeviceOpt = Annotated[str | None, typer.Option("--device", "-d", help="emu: device profile (mlu370-x8 ...); mlu: card; with --server: the device type to grade on")]
SandboxOpt = Annotated[str, typer.Option("--sandbox", help="auto, docker, bwrap or none (unsandboxed: own code only)")]
LangOpt = Annotated[str | None, typer.Option("--lang", help="language of the feedback: zh or en (default: "
                                                          "assignment.toml's lang, then the locale)")]


def _console(json_mode: bool) -> Console:
    # With --json, stdout carries only the JSON document; everything human goes to stderr.
    return Console(stderr=json_mode, highlight=False)


def _check_choice(value: str, allowed: tuple[str, ...], name: str) -> str:
    if value not in allowed:
        raise typer.BadParameter(f"{name} must be one of {', '.join(allowed)}, got {value!r}")
    return value


def _progress(console: Console) -> Progress:
    return Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(),
                    console=console, transient=True)


@app.command(epilog=EXIT_CODES_HELP)
def submit(
    submission: Annotated[Path, typer.Argument(help="the submission folder (my_ops/)")],
    assignment: Annotated[str | None, typer.Option("--assignment", "-a", help="default: grade.toml's")] = None,
    backend: BackendOpt = DEFAULT_BACKEND,
    device: DeviceOpt = None,
    sandbox: SandboxOpt = "auto",
    out: Annotated[Path | None, typer.Option("--out", "-o", help="folder for results.json and report.html")] = None,
    json_output: Annotated[bool, typer.Option("--json", help="print the results JSON on stdout")] = False,
    seed: Annotated[str | None, typer.Option(help="master seed (default: the public one)")] = None,
    secret: Annotated[bool, typer.Option("--secret", help="instructor grading: fresh secret seed, withheld")] = False,
    stages: Annotated[str | None, typer.Option(help="comma-separated stages to grade (default: all)")] = None,
    gradescope: Annotated[Path | None, typer.Option(help="also write Gradescope's results.json here")] = None,
    build_cache: Annotated[Path | None, typer.Option(help="reuse builds of identical submissions (default: "
                                                          "~/.cache/bang-grader/builds)")] = None,
    no_build_cache: Annotated[bool, typer.Option("--no-build-cache", help="always build afresh")] = False,
    no_setup: Annotated[bool, typer.Option("--no-setup", help="never install or build anything first")] = False,
    replay_engine: Annotated[str | None, typer.Option(
        "--replay-engine", help="the trusted replay's engine: wasm (the default, confined by construction) or native "
        "(to compare, or to review calls held because the two replays disagree)")] = None,
    profile: Annotated[bool, typer.Option("--profile", help="also write profile.json: each stage's modelled "
                                                            "timeline per core as a Chrome/Perfetto trace")] = False,
    lang: LangOpt = None,
    server: Annotated[str | None, typer.Option("--server", help="grade on the course server at this URL (token: "
                                                                "$BANG_GRADER_TOKEN or ~/.config/bang-grader/token; "
                                                                "`grade submit --server URL --help`: its own "
                                                                "options, --list, --late-ok, --choose)")] = None,
    mode: Annotated[str, typer.Option("--mode", help="with --server: test (first stage, not ranked), benchmark "
                                                     "(every stage, not counted) or final (counts)")] = "test",
) -> None:
    """Grade one submission: build, check every case, time every stage, score, report.

    On a machine not set up yet it first does what `grade setup` does (as root), with progress shown."""
    if server is not None:
        _submit_remote(server, submission, assignment, mode, out, device, lang)
    try:
        _check_submission_path(submission)
        _check_assignment(assignment)
    except UsageError as exc:
        raise _usage_error(str(exc)) from exc
    _check_choice(backend, tuple(BACKENDS), "--backend")
    if lang is not None:
        _check_choice(lang, LANGUAGES, "--lang")
    if replay_engine is not None:
        _check_choice(replay_engine, REPLAY_ENGINES, "--replay-engine")
    console = _console(json_output)
    out_dir = out or Path("out") / submission.resolve().name
    cache = None if no_build_cache else (build_cache or default_build_cache())
    request = GradeRequest(assignment=assignment, seed_mode="secret" if secret else "public", seed=seed, lang=lang,
                           stages=tuple(s.strip() for s in stages.split(",") if s.strip()) if stages else None)
    environment = GradeEnvironment(backend=backend, device=device, sandbox=_sandbox(sandbox), build_cache=cache,
                                   replay_engine=replay_engine)
    from grader.orchestration.resolve import grading_language
    from grader.sandbox.slot_runner import park_at_exit

    park_at_exit()  # the student's next submit adopts this one's warm slots (one-shot: nothing else would reuse them)
    with use_language(grading_language(submission, request)):  # the same language grade_submission picks
        _submit(submission, request, environment, console, out_dir=out_dir, cache=cache, install=not no_setup,
                gradescope=gradescope, json_output=json_output, profile=profile)


@app.command()
def run(
    project: Annotated[Path, typer.Argument(help="your project folder (with its setup.py and tests/)")],
    command: Annotated[list[str], typer.Argument(help="what to run in it, after --, e.g. -- python -m unittest "
                                                      "discover -s tests")],
    backend: BackendOpt = DEFAULT_BACKEND,
    device: DeviceOpt = None,
    sandbox: SandboxOpt = "auto",
    no_build: Annotated[bool, typer.Option("--no-build", help="do not run setup.py build_ext --inplace first")] = False,
    timeout: Annotated[float, typer.Option(help="wall-clock limit in seconds, build included")] = RUN_TIMEOUT,
    no_setup: Annotated[bool, typer.Option("--no-setup", help="never install or build anything first")] = False,
    lang: LangOpt = None,
) -> None:
    """Run your own project as on a machine with a card: its setup.py built in place, then COMMAND (its own
    tests), in the sandbox with the emulator's torch_mlu. Nothing is graded; the exit status is COMMAND's."""
    from grader.orchestration.environment import UnavailableError
    from grader.orchestration.project_run import run_project
    from grader.orchestration.read_outputs import describe_outcome

    _check_choice(backend, tuple(BACKENDS), "--backend")
    environment = GradeEnvironment(backend=backend, device=device, sandbox=_sandbox(sandbox))
    if lang is not None:
        _check_choice(lang, LANGUAGES, "--lang")
    if not project.is_dir():
        raise typer.BadParameter(_("{path} is not a folder").format(path=project))
    console = Console(stderr=True, highlight=False)
    with use_language(resolve_language(lang, None)):
        environment = _prepare(environment, console, install=not no_setup)
        console.print(_("running {command} in a copy of {project} ({backend} backend, {sandbox} sandbox; your "
                        "folder is not changed)").format(command=" ".join(command), project=project,
                                                         backend=backend, sandbox=environment.sandbox))
        try:
            done = run_project(project, list(command), environment, build=not no_build, timeout_seconds=timeout)
        except UnavailableError as exc:
            console.print("[red]" + _("cannot run here:") + f"[/] {exc}", highlight=False)
            raise typer.Exit(2) from exc
        sys.stdout.write(done.outcome.stdout_tail)
        sys.stdout.flush()
        sys.stderr.write(done.outcome.stderr_tail)
        sys.stderr.flush()
        if get_backend(backend).time_is_modelled:
            console.print(_("times from torch.mlu.Event are the emulator's modelled times, not measurements"))
        if not done.outcome.ok and done.outcome.exit_code is None:
            console.print("[red]" + _("stopped:") + "[/] " + describe_outcome(done.outcome), highlight=False)
    raise typer.Exit(done.outcome.exit_code if done.outcome.exit_code is not None else 1)


def _submit(submission: Path, request: GradeRequest, environment: GradeEnvironment, console: Console, *,
            out_dir: Path, cache: Path | None, install: bool, gradescope: Path | None, json_output: bool,
            profile: bool = False) -> None:
    from grader.orchestration.job import finish_job, run_job

    notes: list[str] = []
    if _gradable_layout(submission):  # a layout error is reported without setting the machine up
        try:
            environment, notes = _prepare_notes(environment, console, install=install)
        except _CannotGrade as cannot:
            from grader.orchestration.document import environment_error_result

            result = environment_error_result(submission, request, environment, cannot.problem)
            result.lang = current_language()  # submit chose it (use_language) before setting up
            done = finish_job(result, GradeObserver(out_dir=out_dir))
            console.print(_("results:     {path}").format(path=done.results))
            if json_output:
                sys.stdout.write(result.to_json() + "\n")
            raise typer.Exit(ExitCode.ERROR) from cannot.problem
    with _progress(console) as progress:
        task = progress.add_task(_("starting"), total=1.0)
        observer = GradeObserver(out_dir=out_dir, progress=lambda step, fraction: progress.update(
            task, description=step, completed=fraction))
        done = run_job(submission, request, environment, observer, notes=notes)
    result = done.result
    if cache is not None:
        prune_build_cache(cache)
    from grader.cli.summary import print_summary

    print_summary(result, console)
    if done.report_error:
        console.print("[yellow]" + _("the HTML report could not be written: {error}").format(
            error=done.report_error) + "[/]")
    if gradescope is not None:
        from grader.gradescope import write_gradescope

        write_gradescope(result, gradescope)
        console.print(_("gradescope:  {path}").format(path=gradescope))
    console.print(_("results:     {path}").format(path=done.results))
    if done.report is not None:
        console.print(_("report:      {path}").format(path=done.report))
    if profile:
        from grader.reporting.profile import write_profile

        written = write_profile(result, out_dir / "profile.json")
        console.print(_("profile:     {path} (open it in ui.perfetto.dev)").format(path=written) if written else
                      "[yellow]" + _("no profile: no stage has a modelled timeline (the emulator's grader replay "
                                     "records one)") + "[/]")
    if json_output:
        sys.stdout.write(result.to_json() + "\n")
    raise typer.Exit(exit_code(result))


def _submit_remote(server: str, submission: Path, assignment: str | None, mode: str, out: Path | None,
                   device: str | None, lang: str | None) -> None:
    """`grade submit --server` reached through this whole CLI (the entry point runs remote_app by itself)."""
    from grader.cli.remote_app import run

    run(server, submission, assignment=assignment, mode=mode, device=device, out=out, lang=lang)


@app.command(epilog=EXIT_CODES_HELP)
def serve(
    host: Annotated[str, typer.Option(help="address to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port to listen on")] = 8000,
    data: Annotated[Path, typer.Option(help="the server's folder (SQLite database, broker data, keys)")] = Path(
        "server-data"),
    db: Annotated[str | None, typer.Option("--db", help="database URL (default: SQLite in --data; "
                                                        "postgresql+psycopg://user@host/db)")] = None,
    broker: Annotated[str | None, typer.Option(help="Redis URL (default: a private redis-server on loopback)")] = None,
    workers: Annotated[int | None, typer.Option(help="worker slots on this machine (default: per device slot)")] = None,
    no_workers: Annotated[bool, typer.Option("--no-workers", help="serve only; workers run elsewhere")] = False,
    worker_only: Annotated[bool, typer.Option("--worker-only", help="join --broker and --db as a grading "
                                                                    "node; no web server")] = False,
    backend: BackendOpt = DEFAULT_BACKEND,
    device: DeviceOpt = None,
    device_type: Annotated[str | None, typer.Option("--device-type", help="the device type (a device table name: "
                                                                          "mlu370-x8, mlu370-x4 ...) the -a "
                                                                          "assignments ask for and this machine's "
                                                                          "workers serve (default: emu --device or "
                                                                          "the table's default; mlu: read from "
                                                                          "each card)")] = None,
    sandbox: SandboxOpt = "auto",
    demo: Annotated[bool, typer.Option("--demo", help="a demo class on the emulator; prints its tokens")] = False,
    roster: Annotated[Path | None, typer.Option(help="import this roster CSV (the batch's formats) and print "
                                                     "the new students' tokens")] = None,
    assignment: Annotated[list[str] | None, typer.Option("--assignment", "-a", help="open this assignment "
                                                                                     "(repeatable)")] = None,
    instructor: Annotated[str | None, typer.Option(help="create (or re-key) this instructor account and print "
                                                        "its token")] = None,
    close: Annotated[list[str] | None, typer.Option("--close", help="close this assignment to uploads and release "
                                                                    "its hidden cases (repeatable)")] = None,
    release: Annotated[list[str] | None, typer.Option("--release", help="show this assignment's hidden "
                                                                        "(after_deadline) cases to its students "
                                                                        "from now on, and exit (repeatable)")] = None,
    trust_seed: Annotated[bool, typer.Option("--trust-seed", help="open the --assignment without grading its "
                                                                  "reference kernels on its secret seed first "
                                                                  "(by default they are, once per seed)")] = False,
    due: Annotated[str | None, typer.Option(help="the --assignment's deadline, ISO 8601 with its offset "
                                                 "(default: the spec's [submission] due)")] = None,
    late_hours: Annotated[float | None, typer.Option(help="accept uploads this long after the deadline, "
                                                          "marked late")] = None,
    late_penalty: Annotated[float | None, typer.Option(help="share of a late final's score taken off (0-1)")] = None,
    rate: Annotated[int | None, typer.Option(help="uploads per student per hour (0: no limit but one in "
                                                  "flight; default: the spec's)")] = None,
    references: Annotated[Path | None, typer.Option(hidden=True, help="tests: the reference kernels' root "
                                                                       "(default reference_kernels/)")] = None,
    new_seed: Annotated[list[str] | None, typer.Option("--new-seed", help="draw another secret seed for this "
                                                                          "assignment (repeatable)")] = None,
    similarity: Annotated[Path | None, typer.Option(help="compare the --assignment's latest final submissions "
                                                         "(the batch's similarity), write this CSV and exit")] = None,
    export: Annotated[Path | None, typer.Option(help="write the --assignment's exports of final results "
                                                     "(gradebook, Canvas, Gradescope, reports) here and exit")] = None,
    counts: Annotated[str | None, typer.Option(help="which graded final submission of a student counts for the "
                                                    "--assignment: latest, best or chosen (default: the spec's "
                                                    "[submission] counts)")] = None,
    timezone: Annotated[str | None, typer.Option(help="the course's time zone, in which the pages and messages "
                                                      "show times (an IANA name: Asia/Shanghai; default "
                                                      "$BANG_GRADER_TIMEZONE, else this machine's)")] = None,
) -> None:
    """Run the course server: students submit with `grade submit --server URL`; workers grade from a queue."""
    from grader.server.course_time import TimezoneError, set_zone

    try:
        set_zone(timezone)
    except TimezoneError as exc:
        raise _usage_error(str(exc)) from exc
    from grader.drivers.batch import BatchError
    from grader.server.accounts import add_account, import_roster
    from grader.server.admin import (
        close_assignment,
        ensure_assignment,
        export_finals,
        open_assignment,
        set_policy,
    )
    from grader.server.admin import new_seed as draw_seed
    from grader.server.admin import release as release_cases
    from grader.server.db import Database, migrate, sqlite_url
    from grader.server.devices import DeviceTypeError
    from grader.server.policy import Refused
    from grader.server.run import BrokerUnavailable, start_slots
    from grader.server.run import serve as run_server

    _check_choice(backend, tuple(BACKENDS), "--backend")
    _sandbox(sandbox)
    url = db or sqlite_url(data.resolve())
    data.mkdir(parents=True, exist_ok=True)
    migrate(url)
    database = Database(url)
    try:
        due_at = _due_time(due) if due is not None else None
        for name in assignment or []:
            profile = device if get_backend(backend).devices_are_profiles else None
            ensure_assignment(database, name, backend, device_type or profile)
            set_policy(database, name, due=due_at, late_hours=late_hours, late_penalty=late_penalty, per_hour=rate,
                       counts=counts)
        tokens = import_roster(database, roster) if roster is not None else {}
        if instructor:
            tokens[instructor] = add_account(database, instructor, role="instructor")
        for name in new_seed or []:
            draw_seed(database, name)
        if export is None and similarity is None and not worker_only:
            for name in assignment or []:  # the reference-seed guard before an assignment opens (issue 27)
                check = open_assignment(database, name, sandbox, trust_seed=trust_seed, reference_root=references,
                                        announce=lambda line: print(line, flush=True))
                if check.failures:
                    sys.stderr.write(check.message + "\n")
                elif check.ran:
                    print(check.message, flush=True)
        for name in close or []:
            close_assignment(database, name)
        for name in release or []:
            release_cases(database, name)
    except Refused as exc:
        raise _usage_error(str(exc)) from exc
    if release:
        print(_("hidden cases released to the students: {names}").format(names=", ".join(release)))
        raise typer.Exit(ExitCode.OK)
    for who, token in tokens.items():
        print(f"{who}\t{token}")
    if similarity is not None:
        if len(assignment or []) != 1:
            raise _usage_error(_("--similarity needs one --assignment"))
        from grader.atomic_file import atomic_write_text
        from grader.batch.similarity import similarity_csv
        from grader.server.admin import similarity as compare_class

        report = compare_class(database, (assignment or [""])[0])
        atomic_write_text(similarity, similarity_csv(report))
        print(_("{n} students compared, {pairs} pairs at or above {threshold:.0%}: {path}").format(
            n=report.students, pairs=len(report.pairs), threshold=report.settings.threshold, path=similarity))
        raise typer.Exit(ExitCode.OK)
    if export is not None:
        if len(assignment or []) != 1:
            raise _usage_error(_("--export needs one --assignment"))
        for note in export_finals(database, (assignment or [""])[0], export):
            print(note)
        print(export)
        raise typer.Exit(ExitCode.OK)
    if worker_only:
        if not broker:
            raise _usage_error(_("--worker-only needs --broker (and --db)"))
        try:
            procs = start_slots(backend, device, workers, broker=broker, db_url=url, data_dir=data.resolve(),
                                sandbox=sandbox, device_type=device_type)
        except (DeviceTypeError, BatchError) as exc:  # no slot here, or of no known type
            raise _usage_error(str(exc)) from exc
        try:
            for proc in procs:
                proc.wait()
        finally:
            from grader.server.run import stop

            for proc in procs:
                stop(proc)
        raise typer.Exit(ExitCode.OK)
    try:
        run_server(host=host, port=port, data_dir=data.resolve(), db_url=url, broker=broker, workers=workers,
                   backend=backend, device=device, sandbox=sandbox, start_workers=not no_workers, demo=demo,
                   device_type=device_type, log=lambda line: print(line, flush=True), reference_root=references)
    except (BrokerUnavailable, DeviceTypeError) as exc:
        raise _usage_error(str(exc)) from exc


def _due_time(text: str) -> float:
    from datetime import datetime

    try:
        when = datetime.fromisoformat(text)
    except ValueError as exc:
        raise _usage_error(_("--due {text!r} is no ISO 8601 date-time (e.g. 2026-12-20T23:59:00+08:00)")
                           .format(text=text)) from exc
    if when.tzinfo is None:
        raise _usage_error(_("--due needs a UTC offset (e.g. 2026-12-20T23:59:00+08:00)"))
    return when.timestamp()


class UsageError(Exception):
    """The command line asks for something that is not there: one line on stderr, exit ERROR, nothing written."""


def _check_submission_path(path: Path) -> None:
    if not path.exists():
        raise UsageError(_("no such folder: {path}").format(path=path))
    if not path.is_dir():
        raise UsageError(_("not a folder: {path} (a submission is a folder; `grade batch` takes archives)")
                         .format(path=path))


def _check_assignment(name: str | None) -> None:
    """An assignment that does not exist is the command line's mistake, not the grader's."""
    if name is None:
        return
    from grader.orchestration.kinds import kind_named
    from grader.orchestration.pipeline import KINDS
    from grader.spec import SpecError
    from grader.spec.loader import assignment_dir

    if kind_named(KINDS, name) is not None:
        return
    try:
        assignment_dir(name)
    except SpecError as exc:
        raise UsageError(str(exc).splitlines()[0]) from exc


def _gradable_layout(submission: Path) -> bool:
    """Whether the submission gets as far as the sandbox: a layout error is reported without setting up."""
    from grader.layout import LayoutError, ModuleSyntaxError, inspect_submission

    try:
        inspect_submission(submission)
    except (LayoutError, ModuleSyntaxError, OSError):
        return False
    return True


# A machine's setup for an environment (environment.prepare_environment's, or a batch grading's own), logging.
Prepare = Callable[[GradeEnvironment, Callable[[str], None]], "Prepared"]


class _CannotGrade(Exception):
    """This machine cannot grade with the asked sandbox (environment.EnvironmentProblem, already shown)."""

    def __init__(self, problem: Exception) -> None:
        super().__init__(str(problem))
        self.problem = problem


def _prepare_notes(environment: GradeEnvironment, console: Console, install: bool,
                   prepare: Prepare | None = None) -> tuple[GradeEnvironment, list[str]]:
    """Sets the machine up for `environment` (`prepare`, default environment.prepare_environment), progress on
    the console: the environment with the sandbox setting up chose, and setup's notes. _CannotGrade when it
    cannot."""
    from grader.orchestration.environment import EnvironmentProblem, prepare_environment

    def log(line: str) -> None:
        console.print(line, highlight=False, markup=False, soft_wrap=True)

    try:
        if prepare is None:
            prepared = prepare_environment(environment, log=log, install=install)
        else:
            prepared = prepare(environment, log)
    except EnvironmentProblem as problem:
        console.print("[red]" + _("cannot grade on this machine:") + f"[/] {problem}", highlight=False)
        raise _CannotGrade(problem) from problem
    return replace(environment, sandbox=prepared.sandbox), prepared.notes


def _prepare(environment: GradeEnvironment, console: Console, install: bool,
             prepare: Prepare | None = None) -> GradeEnvironment:
    """_prepare_notes, exiting ERROR with the fix shown when this machine cannot grade."""
    try:
        return _prepare_notes(environment, console, install, prepare)[0]
    except _CannotGrade as cannot:
        raise typer.Exit(ExitCode.ERROR) from cannot.problem


def _named(name: str):  # noqa: ANN202 - whatever `module:NAME` names (a BatchGrading)
    import importlib

    module, _sep, attribute = name.partition(":")
    return getattr(importlib.import_module(module), attribute)


def _sandbox(value: str) -> SandboxName:
    try:
        return sandbox_name(value)
    except ValueError as exc:
        raise typer.BadParameter(f"--sandbox must be one of {', '.join(SANDBOXES)}, got {value!r}") from exc


@app.command(epilog=EXIT_CODES_HELP)
def batch(
    submissions: Annotated[Path, typer.Argument(help="folder of submissions (one folder or archive per student)")],
    assignment: Annotated[str, typer.Option("--assignment", "-a")],
    out: Annotated[Path, typer.Option("--out", "-o")] = Path("out/batch"),
    workers: Annotated[int | None, typer.Option(help="parallel workers (default: per device slot)")] = None,
    backend: BackendOpt = DEFAULT_BACKEND,
    device: DeviceOpt = None,
    sandbox: SandboxOpt = "auto",
    force: Annotated[bool, typer.Option(help="regrade everything, ignoring stored results")] = False,
    seed: Annotated[str | None, typer.Option(help="master seed (default: a fresh secret one)")] = None,
    build_cache: Annotated[Path | None, typer.Option()] = None,
    job_timeout: Annotated[float, typer.Option(help="seconds before a worker's submission counts as hung")] = 1800.0,
    plan_only: Annotated[bool, typer.Option(help="write the job plan (and a Kubernetes Job) instead of grading")] = False,
    image: Annotated[str | None, typer.Option(help="container image for --plan-only")] = None,
    template: Annotated[list[Path] | None, typer.Option(
        "--template", exists=True, file_okay=False,
        help="handout/starter folder whose code the similarity check subtracts (repeatable)")] = None,
    similarity_threshold: Annotated[float | None, typer.Option(
        "--similarity-threshold", min=0.0, max=1.0,
        help="list pairs where this share of one student's code is in the other's "
             "(default: assignment.toml [similarity])")] = None,
    similarity: Annotated[bool, typer.Option("--similarity/--no-similarity",
                                             help="compare the students' code, for review")] = True,
    progress: Annotated[bool, typer.Option("--progress/--no-progress", help="live progress bar on stderr")] = True,
    grading: Annotated[str | None, typer.Option(hidden=True, help="tests: module:NAME, a "
                                                                  "grader.drivers.batch.BatchGrading to "
                                                                  "grade with (default: the sandboxed one)")] = None,
    lang: LangOpt = None,
) -> None:
    """Grade a whole class, resumably (see grader.drivers.batch)."""
    from grader.batch.similarity import SimilarityOptions
    from grader.drivers.batch import SANDBOXED, BatchError, BatchInterrupted, run_batch

    console = Console()
    try:
        if not submissions.exists():
            raise UsageError(_("no such folder: {path}").format(path=submissions))
        _check_assignment(assignment)
    except UsageError as exc:
        raise _usage_error(str(exc)) from exc
    environment = GradeEnvironment(backend=backend, sandbox=_sandbox(sandbox), batch=True)
    if lang is not None:
        _check_choice(lang, LANGUAGES, "--lang")
    grader = _named(grading) if grading else SANDBOXED
    if not plan_only:
        _prepare(environment, console, install=True, prepare=grader.prepare)
    try:
        summary = run_batch(submissions, assignment, out, workers=workers, backend=backend, sandbox=sandbox,
                            force=force, seed=seed, device=device, build_cache=build_cache,
                            job_timeout=job_timeout, plan_only=plan_only, image=image, progress=progress,
                            grading=grader, lang=lang,
                            similarity=SimilarityOptions(template=tuple(template or ()),
                                                         threshold=similarity_threshold, enabled=similarity))
    except BatchError as exc:
        raise _usage_error(_("batch refused: {why}").format(why=" ".join(str(exc).split()))) from exc
    except BatchInterrupted as exc:  # one line: what is committed, and the command that resumes
        Console(stderr=True, highlight=False).print(f"{exc} ({_resume_command()})", markup=False, soft_wrap=True)
        raise typer.Exit(ExitCode.INTERRUPTED) from exc
    for line in summary.lines():
        console.print(line, highlight=False, markup=False, soft_wrap=True)
    raise typer.Exit(ExitCode.OK if summary.complete else ExitCode.NOT_PASSED)


@app.command(epilog=EXIT_CODES_HELP)
def calibrate(
    assignment: Annotated[str, typer.Option("--assignment", "-a")],
    backend: BackendOpt = DEFAULT_BACKEND,
    device: DeviceOpt = None,
    sandbox: SandboxOpt = "auto",
    reference: Annotated[Path | None, typer.Option(help="one submission serving every stage (default: "
                                                         "reference_kernels/<assignment>/<stage>/)")] = None,
    stages: Annotated[str | None, typer.Option(help="comma-separated stages (default: all)")] = None,
    build_cache: Annotated[Path | None, typer.Option()] = None,
) -> None:
    """Time the reference kernels and write assignments/<name>/thresholds/<backend>-<device>.toml."""
    from grader.drivers.calibrate import CalibrationError
    from grader.drivers.calibrate import calibrate as run_calibration

    console = Console(highlight=False)
    environment = GradeEnvironment(backend=backend, device=device, sandbox=_sandbox(sandbox), build_cache=build_cache)
    try:
        done = run_calibration(assignment, environment, stages=tuple(stages.split(",")) if stages else None,
                               reference=reference, log=console.print)
    except CalibrationError as exc:
        console.print(f"[red]calibration failed:[/] {exc}")
        raise typer.Exit(ExitCode.NOT_PASSED) from exc
    table = Table(title=f"thresholds written to {done.path}", title_justify="left")
    for col in ("stage", "reference us", "threshold us"):
        table.add_column(col, justify="right" if col != "stage" else "left")
    for name, t in done.thresholds.items():
        table.add_row(name, f"{t.reference_us:,.6g}", f"{t.threshold_us:,.6g}")
    console.print(table)


@app.command(epilog=EXIT_CODES_HELP)
def doctor(lang: LangOpt = None) -> None:
    """What backends, sandboxes and devices this machine has, and how to fix what is missing."""
    from grader.cli.doctor import AREAS, diagnose

    if lang is not None:
        _check_choice(lang, LANGUAGES, "--lang")
    console = Console(highlight=False)
    with use_language(resolve_language(lang, None)):
        table = Table(title="grade doctor", title_justify="left")
        for col in (_("area"), _("item"), _("status"), _("detail"), _("fix")):
            table.add_column(col)
        findings = diagnose()
        for f in findings:
            status = "[green]" + _("ok") + "[/]" if f.ok else "[red]" + _("missing") + "[/]"
            table.add_row(_(AREAS.get(f.area, f.area)), f.item, status, f.detail, f.fix)
        console.print(table)
    emu_ok = any(f.area == "backend" and f.item == DEFAULT_BACKEND and f.ok for f in findings)
    raise typer.Exit(ExitCode.OK if emu_ok else ExitCode.NOT_PASSED)


@app.command(epilog=EXIT_CODES_HELP)
def setup(tests: Annotated[bool, typer.Option("--tests", help="also what the test suite needs")] = False,
          lang: LangOpt = None) -> None:
    """Set this machine up for grading (as root): Docker installed and started, the sandbox image built.

    The same steps `grade submit` takes on a machine not set up yet, and ./run-tests before the tests."""
    from grader.orchestration.environment import bwrap_works, setup_docker_sandbox

    if lang is not None:
        _check_choice(lang, LANGUAGES, "--lang")
    console = Console(highlight=False)
    with use_language(resolve_language(lang, None)):
        ok, why = setup_docker_sandbox(lambda line: console.print(line, markup=False, soft_wrap=True), tests=tests)
        if ok:
            console.print(_("setup: ready: the docker sandbox works"))
            raise typer.Exit(ExitCode.OK)
        console.print("[red]" + _("setup: the docker sandbox is not available:") + "[/] " + why, highlight=False)
        bwrap_ok, _why = bwrap_works()
        if bwrap_ok:
            console.print(_("setup: self-checks (`grade submit`) still work in the bubblewrap sandbox; batch "
                            "grading needs Docker"))
    raise typer.Exit(ExitCode.NOT_PASSED)


@images_app.command("build", epilog=EXIT_CODES_HELP)
def images_build(rebuild: Annotated[bool, typer.Option(help="rebuild even when up to date")] = False,
                 backend: BackendOpt = DEFAULT_BACKEND) -> None:
    """Build (or confirm) a backend's sandbox image (emu: built here; mlu: on a loaded Cambricon image)."""
    _check_choice(backend, tuple(BACKENDS), "--backend")
    tag = get_backend(backend).ensure_image(rebuild=rebuild, log=lambda line: print(line, file=sys.stderr))
    print(tag)


@spec_app.command("check", epilog=EXIT_CODES_HELP)
def spec_check(paths: Annotated[list[str], typer.Argument(help="assignment names or folders")]) -> None:
    """Validate assignment specs; prints every problem with where it is."""
    from grader.checks.compare import selected
    from grader.spec import SpecError, load_assignment

    failed = False
    for path in paths:
        try:
            spec = load_assignment(path)
            selected(spec.checks)  # [checks] run names only checks that exist (the spec cannot know them)
        except (SpecError, ValueError) as exc:
            failed = True
            print(f"{path}: {exc}\n" if isinstance(exc, ValueError) else f"{exc}\n")
            continue
        print(f"{path}: ok ({len(spec.groups)} groups, {len(spec.cases)} cases, {len(spec.stages)} stages, "
              f"{spec.max_score:g} points)")
    raise typer.Exit(ExitCode.NOT_PASSED if failed else ExitCode.OK)


@spec_app.command("schema", epilog=EXIT_CODES_HELP)
def spec_schema() -> None:
    """The assignment spec's JSON schema, with every key's description and default."""
    from grader.spec import AssignmentSpec

    print(json.dumps(AssignmentSpec.model_json_schema(), indent=2))


@app.command(epilog=EXIT_CODES_HELP)
def selftest() -> None:
    """Run every correctness check's self-tests (crafted outputs that must pass or fail)."""
    from grader.checks import self_test_all

    failures = {k: v for k, v in self_test_all().items() if v}
    for name, problems in self_test_all().items():
        print(f"{name}: {'ok' if not problems else '; '.join(problems)}")
    raise typer.Exit(ExitCode.NOT_PASSED if failures else ExitCode.OK)


def _resume_command() -> str:
    import shlex

    # Without --force: that would regrade what this run committed.
    return "grade " + " ".join(shlex.quote(arg) for arg in sys.argv[1:] if arg != "--force")


def main() -> None:
    # SIGTERM (a scheduler, `kill`) must unwind like Ctrl-C so runners' `finally` removes their containers.
    signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
    from typer._click.exceptions import NoArgsIsHelpError
    from typer._click.exceptions import UsageError as ClickUsageError

    try:
        status = app(prog_name="grade", standalone_mode=False)
    except NoArgsIsHelpError as exc:  # `grade` or `grade spec` alone: the help, as before
        print(exc.ctx.get_help() if exc.ctx else exc.format_message(), file=sys.stderr)
        status = ExitCode.ERROR
    except ClickUsageError as exc:  # a bad option or value: one line, as every usage error
        where = exc.ctx.command_path if exc.ctx else "grade"
        print(_("{command}: error: {problem}").format(command=where, problem=" ".join(exc.format_message().split())),
              file=sys.stderr)
        status = ExitCode.ERROR
    except KeyboardInterrupt:
        status = ExitCode.INTERRUPTED
    sys.exit(int(status or 0))


def _raise_keyboard_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")

