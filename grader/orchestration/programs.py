"""ProgramsGrader (a grader kind, kinds.py): a folder of standalone lab programs, each file one stage
(assignments/<name>/programs.toml); grade_programs() runs it.

The flow beside pipeline._Grading (which grades an extension); the programs' own pieces, their spec and the
reading of their captures, sit below in grader.programs, so orchestration imports programs and never the reverse.

Built and run inside the runner (bang_harness.programs), then replayed from their device journals in a sandbox of
their own (the run's process holds no key; DESIGN.md "Threat model"), each launch of the kernel on the host's twin
inputs (grader.programs.captures.twin_plan); on the host: each program's launch records as the replay signed them
(grader.programs.captures), the twin inputs the host draws (the captured ones must be them), the kernel's captured
output judged against the base's float64 reference of them as an extension's call is (judge.judge_call; a wrong
one that matches one of the reference's misreadings, spec.references, names that cause); then scored as an
extension is (ProgramsSpec.scored_as: a case group and a stage per program; score_stages.stage_result /
decide_stage), against the base's calibrated threshold for the device carried to the lab's dims
(scoring.thresholds.at_shape). Only the build/run/replay of whole programs, the reading of their captures and
twin and the lab-dims requirement are the programs' own.

The replay runs on the WebAssembly engine by default, under the extensions' disagreement policy (DESIGN.md
"Confinement by construction"; execute.py for an extension's calls): each program's engine record says which
engine replayed it (a native replay is named in the grading's notes, replay.engine_notes), and a program the
engine's account would cost points is replayed natively once more (_second_opinion) and held for review where
that replay finds nothing against it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import tempfile
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from bang_harness.programs import CAPTURE_MAX_BYTES, PROGRAM_TIMEOUT_SECONDS
from bang_harness.protocol import (
    JOURNAL_SUFFIX,
    KEY_FILE,
    PROGRAM_TWIN_FILE,
    REPLAY_ENGINE_ENV,
    REPLAY_JOURNALS,
    ErrorKind,
    program_key,
)

from grader.backends import get_backend
from grader.batch.intake import IntakeError, UnreadableFile, stage_folder
from grader.checks import metrics
from grader.checks.compare import compare
from grader.checks.integrity import (
    CallIntegrity,
    HostFacts,
    KernelSymbols,
    WorkTotals,
    base_name,
    device_profile,
)
from grader.checks.requirements import check_requirements
from grader.i18n import _
from grader.orchestration.document import result_document
from grader.orchestration.environment import UnavailableError, resolve_environment
from grader.orchestration.judge import MESSAGE_CHARS, CallOutcome, judge_call
from grader.orchestration.kinds import Grader
from grader.orchestration.options import GradeEnvironment, GradeRequest, Progress
from grader.orchestration.read_outputs import describe_outcome
from grader.orchestration.replay import (
    JOURNAL_MAX_BYTES,
    copy_untrusted,
    engine_notes,
    engine_record,
    fresh_io,
    journal_budget,
    write_trace_key,
)
from grader.orchestration.score_stages import CAUGHT, stage_result, withhold_speed_points
from grader.orchestration.trace_summary import TraceAccumulator
from grader.orchestration.work_folder import discard
from grader.programs.captures import (
    CAPTURE_DTYPES,
    CaptureError,
    Launches,
    draw_twin_seeds,
    int_arg,
    load_rows,
    pointer_arg,
    read_launches,
    twin_inputs,
    twin_plan,
)
from grader.programs.spec import (
    PROGRAMS_FILE,
    ProgramsSpec,
    ProgramStage,
    load_programs,
    programs_assignment_for,
)
from grader.results import (
    BuildInfo,
    CaseResult,
    DevicePeaks,
    GradeResult,
    GroupScore,
    RequirementResult,
    StageResult,
    TraceSummary,
    Verdict,
)
from grader.sandbox.base import Limits, Mounts, Phase, Runner, RunOutcome, SandboxError
from grader.sandbox.capped import UntrustedFileError, read_json_capped
from grader.scoring import ThresholdTable, at_shape, group_scores, load_thresholds, roofline, summarise
from grader.spec import REFERENCES, AssignmentSpec, ConcreteCase, SeedPlan

BUILD_SECONDS = 900.0
RUN_SECONDS = 3600.0
RUN_JOURNAL_MEMORY_BYTES = 2 << 30  # run_limits
# An emulator error line as the runtime prints it: "<kind>: <message> (kernel <name>, <file>:<line>)".
EMULATOR_LINE = re.compile(r"(?P<kind>[\w-]+): (?P<message>.*) \(kernel [^,]*, (?P<file>.*):(?P<line>\d+)\)$")


class ProgramsGrader(Grader):
    """The kind of a folder of standalone lab programs: assignments/<name>/programs.toml (see the module doc)."""

    spec_file = PROGRAMS_FILE

    def __init__(self, root: Path, request: GradeRequest, environment: GradeEnvironment,
                 progress: Progress | None = None) -> None:
        super().__init__(root, request, environment, progress)
        if not request.assignment:
            raise ValueError("lab programs are graded for a named programs assignment (kinds.choose names it)")
        self.spec, self.base = load_programs(request.assignment)
        self.scored = self.spec.scored_as(self.base)
        self.seeds = SeedPlan.create("public", None)  # the programs are always graded on the public seed
        self.found = _Found(root, request, environment, self.spec, self.scored)

    @classmethod
    def recognise(cls, folder: Path) -> str | None:
        return programs_assignment_for(folder)

    @classmethod
    def calibrated_as(cls, assignment: str) -> str:
        """The base's: the programs are held to its table, carried to their dims (scoring.thresholds.at_shape)."""
        return load_programs(assignment)[0].base

    def run(self) -> GradeResult:
        work = Path(tempfile.mkdtemp(prefix="bang-programs-"))
        try:
            return _grade(self.root, self.environment, self.spec, self.base, self.scored, self.found, work)
        finally:
            if not os.environ.get("BANG_GRADER_KEEP_WORK"):
                discard(work)

    def finish(self, verdict: Verdict | None, message: str = "") -> GradeResult:
        return _finish(self.found, verdict, message)


def grade_programs(folder: Path, request: GradeRequest, environment: GradeEnvironment) -> GradeResult:
    """The lab programs in `folder` graded for `request.assignment` (a programs assignment)."""
    return ProgramsGrader(folder, request, environment).run()


@dataclass
class _Found:
    """What grading the programs found so far; _finish makes it the results document."""

    root: Path
    request: GradeRequest
    environment: GradeEnvironment
    spec: ProgramsSpec
    scored: AssignmentSpec
    started: datetime = field(default_factory=lambda: datetime.now(UTC))
    cases: list[CaseResult] = field(default_factory=list)
    stages: list[StageResult] = field(default_factory=list)
    groups: list[GroupScore] = field(default_factory=list)
    integrity: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # the grading's notes, a line each after its summary
    build: BuildInfo | None = None
    device_profile: str | None = None
    device_peaks: DevicePeaks | None = None
    sandbox: str | None = None


def _grade(folder: Path, environment: GradeEnvironment, spec: ProgramsSpec, base: AssignmentSpec,
           scored: AssignmentSpec, result: _Found, work: Path) -> GradeResult:
    try:
        # what the sandbox mounts: a copy its user can read (a checkout is often 0700, its files 0600)
        folder = stage_folder(folder, work / "submission")
    except UnreadableFile as exc:
        return _finish(result, Verdict.UNGRADABLE_LAYOUT, _(
            "{file} cannot be read by the grader ({error}): make the folder and its files readable (for instance "
            "chmod -R a+rX on the folder) and submit again").format(file=exc.name, error=exc.reason))
    except (IntakeError, OSError) as exc:
        return _finish(result, Verdict.UNGRADABLE_LAYOUT, _("the folder cannot be taken in: {error}").format(
            error=exc))
    stems = {p.stem: spec.stage_for(p.stem) for p in sorted(folder.glob("*.mlu"))}
    stems = {stem: stage for stem, stage in stems.items() if stage is not None}
    if not stems:
        prefixes = ", ".join(s.prefix + "*.mlu" for s in spec.stages)
        return _finish(result, Verdict.UNGRADABLE_LAYOUT, _("no lab program found: expected files {files}").format(files=prefixes))
    if not get_backend(environment.backend).kernel_trace:  # captures, signed launch records: the emulator's
        return _finish(result, Verdict.ENVIRONMENT_ERROR, _("lab programs are graded on the emu backend only"))
    try:
        backend, runner = resolve_environment(environment)
    except UnavailableError as exc:
        return _finish(result, Verdict.ENVIRONMENT_ERROR, str(exc))
    result.device_profile = backend.device
    result.device_peaks = roofline.device_peaks(backend.device)  # what the floor scores with
    result.sandbox = getattr(runner, "name", type(runner).__name__)
    thresholds = load_thresholds(base, backend.name, backend.device)  # the base's calibration, this device's
    try:
        env = dict(backend.env)
        built, log = _build(runner, folder, work, env)
        result.build = BuildInfo(ok=bool(built), toolchain="cncc-emu", compiler_output=log)
        limits = run_limits(len(built))
        ran = Ran(_run(runner, folder, work, env, limits), limits)
        judging = _Judging(spec, base, work, ran, backend.device, draw_twin_seeds(built))
        replay = _replay(runner, folder, work, env, built, judging.twin)
        judged: dict[str, JudgedProgram] = {}
        for stem, stage in stems.items():
            judged[stem] = judging.program(stem, stage, replay) if stem in built else JudgedProgram(_case(
                spec, stage, stem, Verdict.COMPILE_ERROR,
                _("{file} did not compile (see the compiler output)").format(file=f"{stem}.mlu")))
        if built:
            natively = [(stem, replay.engine(stem)) for stem in sorted(built)]
            result.notes += engine_notes(backend.engine, [f"{stem}.mlu: {why}" for stem, (engine, why) in natively
                                                          if engine == "native" and why])
        _second_opinion(runner, folder, env, judging, replay, {s: stems[s] for s in built if s in stems}, judged)
        for stem, stage in stems.items():
            result.cases.append(judged[stem].case)
            result.stages.append(program_stage_result(spec, scored, stage, stem, judged[stem], thresholds,
                                                      backend.device))
    except SandboxError as exc:
        return _finish(result, Verdict.INTERNAL_ERROR, _("the sandbox failed (not your fault): {error}").format(error=exc))
    caught = next((c for c in result.cases if c.verdict in CAUGHT), None)
    if caught is not None:  # one submission, as the module path's: caught on one program, no speed points anywhere
        result.integrity.append(withhold_speed_points(spec.kernel, _("program {file}").format(
            file=f"{caught.name}.mlu"), caught.verdict, result.stages))
    ran = {c.group for c in result.cases}  # the programs handed in; max_score still counts every stage
    result.groups = group_scores(scored.model_copy(update={"groups": [g for g in scored.groups if g.name in ran]}),
                                 result.cases)
    return _finish(result, None)


def _finish(found: _Found, verdict: Verdict | None, message: str = "") -> GradeResult:
    """The results document (verdict None: graded, its verdict and summary line from the programs' cases and
    stages); the programs are always graded on the public seed."""
    return result_document(found.root, found.request, found.environment, verdict, message, spec=found.scored,
                           cases=found.cases, stages=found.stages, groups=found.groups,
                           assignment=found.spec.name, assignment_title=found.spec.title,
                           device=found.device_profile, sandbox=found.sandbox,
                           seeds=SeedPlan.create("public", None).record(), started_at=found.started,
                           build=found.build, layout="programs", integrity=found.integrity, notes=found.notes,
                           device_peaks=found.device_peaks, assignment_facts=found.scored.facts())


def _build(runner: Runner, folder: Path, work: Path, env: dict[str, str]) -> tuple[set[str], str]:
    (work / "build").mkdir()
    (work / "io").mkdir()
    runner.run(Phase.BUILD, ["python3", "-m", "bang_harness", "build-programs"],
               Mounts(submission=folder.resolve(), build=work / "build", io=work / "io"),
               Limits(wall_seconds=BUILD_SECONDS), env=env)
    try:
        report = read_json_capped(work / "build" / "programs.json", root=work / "build")
    except (OSError, UntrustedFileError):
        return set(), _("the build produced no report")
    report = report if isinstance(report, dict) else {}
    built = {stem for stem, r in report.items() if isinstance(r, dict) and r.get("ok") is True}
    log = "\n".join(f"== {stem}.mlu\n{r.get('log_tail', '')}" for stem, r in report.items() if isinstance(r, dict))
    return built, log


def run_limits(programs: int) -> Limits:
    """The run sandbox's limits. Each program's device journal is one file that may reach the runtime's own cap
    (it ends the journal there with an overflow record the host names), so neither the file size limit nor the
    disk cuts an honest one first: at the lab's shape (524288 x 256 left, 512 MiB of fp32 uploaded) a journal is
    537,002,571 bytes, past the default 256 MiB file size limit (Yuichi1001's 06 died of SIGXFSZ there). Those
    journals' tmpfs pages are charged to the sandbox's memory: the lab's three large programs left 1.5 GiB of
    journals beside a program of 2.4 GB resident, hence the fixed 2 GiB on top of the default 4 GiB."""
    alone = Limits()
    return Limits(wall_seconds=RUN_SECONDS, file_size_bytes=JOURNAL_MAX_BYTES,
                  tmpfs_bytes=alone.tmpfs_bytes + max(1, programs) * JOURNAL_MAX_BYTES,
                  memory_bytes=alone.memory_bytes + RUN_JOURNAL_MEMORY_BYTES)


def _run(runner: Runner, folder: Path, work: Path, env: dict[str, str], limits: Limits) -> RunOutcome:
    """Each program once, journaled, with no key (bang_harness.programs.run_programs)."""
    return runner.run(Phase.RUN, ["python3", "-m", "bang_harness", "run-programs"],
                      Mounts(submission=folder.resolve(), build=work / "build", io=work / "io"), limits, env=env)


def program_ending(run_outputs: Path, replayed: Path, stem: str, launches: Launches, run_sandbox: Ran,
                   replay_sandbox: Ran) -> CallOutcome | None:
    """A program that crashed or ran out of time, as the module path's call outcome of one (error kind CRASH or
    TIMEOUT -> judge.ERROR_VERDICTS; read_outputs.describe_outcome names the signal), with the emulator's error
    it died after, if any; None when it ended on its own. What ended it: the replay's harness saw its replay die
    (no student host code runs there); the run's harness recorded a signal or its timeout in run.json (the
    program could rewrite that file, but a crash or timeout earns nothing, so believing one is safe, and a
    claim of a clean exit changes nothing: the replay is graded); the host saw the run sandbox, or the replay's,
    stop before the program's record was written."""
    run = _json_object_at(run_outputs / stem / "run.json", run_outputs)
    replay = _json_object_at(replayed / stem / "replay.json", replayed)
    ended, limits = None, run_sandbox.limits
    if replay.get("timed_out") is True or run.get("timed_out") is True:
        ended = RunOutcome(exit_code=None, timed_out=True, wall_seconds=PROGRAM_TIMEOUT_SECONDS)
    elif _signal(replay.get("returncode")) or _signal(run.get("exit_code")):
        ended = RunOutcome(exit_code=None, signal=_signal(replay.get("returncode")) or _signal(run.get("exit_code")))
        limits = run_sandbox.limits if _signal(run.get("exit_code")) else replay_sandbox.limits
    elif _int(replay.get("returncode")) > 0:  # the replay's child exited by itself before its own record
        ended, limits = RunOutcome(exit_code=replay["returncode"]), replay_sandbox.limits
    elif not run and not run_sandbox.outcome.ok:  # the run sandbox was stopped before this program's record
        ended = run_sandbox.outcome
    elif not replay and not replay_sandbox.outcome.ok:  # the replay's sandbox stopped before it
        ended, limits = replay_sandbox.outcome, replay_sandbox.limits
    if ended is None:
        return None
    why = describe_outcome(ended, limits)
    error = _emulator_error(launches.records, replay)
    if error is not None:
        why = _("{why}, after the emulator's error {error}").format(why=why, error=error)
    kind = ErrorKind.TIMEOUT if ended.timed_out else ErrorKind.CRASH
    return CallOutcome(meta={"ok": False, "error_kind": kind.value, "error": _("{file}: {why}").format(
        file=f"{stem}.mlu", why=why)})


def journal_ending(journal: Path, stem: str, limits: Limits) -> CallOutcome | None:
    """A program whose device journal ran into a budget (replay.journal_budget: the runtime's cap): the calls
    after that point could not be replayed, which is said as the limit it is (a crash, as on the module path),
    not as records that do not add up."""
    limit = journal_budget(journal, limits)
    if limit is None:
        return None
    return CallOutcome(meta={"ok": False, "error_kind": ErrorKind.CRASH.value, "error": _("{file}: {why}").format(
        file=f"{stem}.mlu", why=limit)})


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _signal(code: object) -> int | None:
    return -_int(code) if _int(code) < 0 else None


def _json_object_at(path: Path, root: Path) -> dict[str, Any]:
    try:
        value = read_json_capped(path, root=root)
    except (OSError, ValueError):  # missing, a link, too large, not JSON (UntrustedFileError is a ValueError)
        return {}
    return value if isinstance(value, dict) else {}


def with_diagnostics(case: CaseResult, records: list[dict[str, Any]]) -> CaseResult:
    """The case with the emulator's diagnostics of the replay's verified launch records (the report's advice)."""
    seen = TraceAccumulator()
    for record in records:
        seen.add(record)
    return case.model_copy(update={"diagnostics": seen.diagnostics}) if seen.diagnostics else case


def _emulator_error(records: list[dict[str, Any]], replay: dict[str, Any]) -> str | None:
    """The first error the emulator reported for the program, as "kind (file:line): message": from the replay's
    verified launch records, else from the replay child's own error lines (its harness kept them)."""
    for record in records:
        for diag in record.get("diagnostics") or []:
            if isinstance(diag, dict) and diag.get("severity") == "error":
                where = Path(str(diag.get("file") or "?")).name + (f":{diag['line']}" if diag.get("line") else "")
                return f"{diag.get('kind')} ({where}): {str(diag.get('message') or '')[:MESSAGE_CHARS // 8]}"
    lines = replay.get("emulator_errors")
    if isinstance(lines, list) and lines and isinstance(lines[0], str):
        found = EMULATOR_LINE.match(lines[0])
        if found is None:
            return lines[0][:MESSAGE_CHARS // 8]
        return f"{found['kind']} ({Path(found['file']).name}:{found['line']}): {found['message']}"
    return None


@dataclass
class Ran:
    """How a sandbox of the programs ended, and the limits it ran under."""

    outcome: RunOutcome
    limits: Limits


@dataclass
class Replayed:
    """One replay of the programs' journals: its /io (journals/<stem>.journal, outputs/<stem>/ with each program's
    trace and captures, outputs/<stem>.engine.json), the key it signed with, and how its sandbox ended."""

    io: Path
    key: bytes
    ran: Ran

    @property
    def outputs(self) -> Path:
        return self.io / "outputs"

    def journal(self, stem: str) -> Path:
        return self.io / REPLAY_JOURNALS / f"{stem}{JOURNAL_SUFFIX}"

    def engine(self, stem: str) -> tuple[str, str]:
        """The engine that replayed the program, and why natively where it was (replay.engine_record)."""
        return engine_record(self.outputs, f"{stem}{JOURNAL_SUFFIX}")


def _replay(runner: Runner, folder: Path, work: Path, env: dict[str, str], built: set[str],
            twin: dict[str, Any]) -> Replayed:
    """The programs' journals replayed in a sandbox of their own (orchestration/replay.py says why), the graded
    kernel's inputs replaced by the twin."""
    io = work / "replay"
    fresh_io(io)
    run_outputs = work / "io" / "outputs"
    for stem in built:
        copy_untrusted(run_outputs / stem / "journal", io / REPLAY_JOURNALS / f"{stem}{JOURNAL_SUFFIX}", run_outputs,
                       JOURNAL_MAX_BYTES)
        (run_outputs / stem / "journal").unlink(missing_ok=True)  # up to a GiB each: one copy on disk is enough
    return _replay_staged(runner, folder, work, io, env, len(built), twin)


def _replay_staged(runner: Runner, folder: Path, work: Path, io: Path, env: dict[str, str], programs: int,
                   twin: dict[str, Any]) -> Replayed:
    """replay-programs over the journals staged in `io`, under a fresh key and the host's twin plan."""
    key = write_trace_key(io)
    (io / PROGRAM_TWIN_FILE).write_text(json.dumps(twin), encoding="utf-8")
    limits = replay_limits(programs)
    try:
        outcome = runner.run(Phase.RUN, ["python3", "-m", "bang_harness", "replay-programs"],
                             Mounts(submission=folder.resolve(), build=work / "build", io=io), limits, env=env)
    finally:
        (io / KEY_FILE).unlink(missing_ok=True)
        (io / PROGRAM_TWIN_FILE).unlink(missing_ok=True)
    return Replayed(io, key, Ran(outcome, limits))


def _second_opinion(runner: Runner, folder: Path, env: dict[str, str], judging: _Judging, first: Replayed,
                    stages: dict[str, ProgramStage], judged: dict[str, JudgedProgram]) -> None:
    """The disagreement policy (DESIGN.md "Confinement by construction"; execute.Executor._second_opinion for an
    extension's calls), over the replayed programs of `stages` as `judged` from `first`: each program the WebAssembly
    engine replayed and whose account costs it points (a failed case: a replay that died, trapped or ran out of
    time, a finding on its launches, a wrong answer on the twin) is replayed again, natively, from the same
    journal on the same twin -- unless it is judged on its own run alone (_Judging.on_the_run_alone). A program
    that native replay finds nothing against is held for review (judge.DISAGREEMENT: never credited, never an
    accusation); the others keep the engine's account (`judged` is updated in place)."""
    accused = {stem: judged[stem].case.message for stem in stages
               if first.engine(stem)[0] == "wasm" and not judged[stem].case.passed
               and not judging.on_the_run_alone(stem, first)}
    if not accused:
        return
    io = judging.work / "replay-native"
    fresh_io(io)
    for stem in accused:
        if first.journal(stem).is_file():  # (else nothing to replay: the engine's account stands)
            os.link(first.journal(stem), io / REPLAY_JOURNALS / f"{stem}{JOURNAL_SUFFIX}")
    native = _replay_staged(runner, folder, judging.work, io, {**env, REPLAY_ENGINE_ENV: "native"}, len(accused),
                            judging.twin)
    for stem, account in accused.items():
        if judging.program(stem, stages[stem], native).case.passed:
            judged[stem] = JudgedProgram(judge_call(judging.base, judging.spec.kernel, _case_at(stages[stem], stem),
                                                    CallOutcome(meta={"ok": True}, disagreement=account), None,
                                                    kernel_trace=False))


@dataclass
class _Judging:
    """What judging a program from a replay of its journal needs besides the replay: the specs, the grading's work
    folder, how the run went, the device and the twin seeds (one per program, the same for every replay)."""

    spec: ProgramsSpec
    base: AssignmentSpec
    work: Path
    run: Ran
    device: str
    seeds: dict[str, int]

    @property
    def twin(self) -> dict[str, Any]:
        return twin_plan(self.spec, self.seeds)

    def program(self, stem: str, stage: ProgramStage, replayed: Replayed) -> JudgedProgram:
        """A built program judged from what `replayed` did, never from what its own process recorded."""
        launches = read_launches(replayed.outputs / stem / "trace.jsonl", program_key(replayed.key, stem))
        ended = program_ending(self.work / "io" / "outputs", replayed.outputs, stem, launches, self.run, replayed.ran)
        ended = ended or journal_ending(replayed.journal(stem), stem, self.run.limits)
        if ended is not None:  # it crashed or ran out of time: named, and nothing it wrote is graded
            return JudgedProgram(with_diagnostics(judge_call(
                self.base, self.spec.kernel, _case_at(stage, stem), ended, None, kernel_trace=False), launches.records))
        facts = HostFacts(self.device, device_profile(self.device),
                          KernelSymbols.from_library(self.work / "build" / "programs" / stem))
        return _judge(self.spec, self.base, stage, stem, launches, replayed.outputs / stem, facts, self.seeds[stem])

    def on_the_run_alone(self, stem: str, replayed: Replayed) -> bool:
        """Whether the program is judged on its own run whatever a replay says: the run crashed or ran out of time
        (run.json, or its sandbox stopped before the record), or its journal ran into a budget. The run holds
        no output the host reads, so this is all the disagreement policy can know of it."""
        run = _json_object_at(self.work / "io" / "outputs" / stem / "run.json", self.work / "io" / "outputs")
        return (run.get("timed_out") is True or _signal(run.get("exit_code")) is not None
                or (not run and not self.run.outcome.ok)
                or journal_budget(replayed.journal(stem), self.run.limits) is not None)


def replay_limits(programs: int) -> Limits:
    """The replay sandbox's limits: room on its /io for every program's captures up to the runtime's cap per
    process (CAPTURE_MAX_BYTES). The lab's 524288-row programs capture 192 MiB each (head and tail of left and of
    result, in and out); the default 512 MiB for all of them ran out inside 06's under docker, which then had no
    replay trace. Memory stays the default: an honest lab's replay holds ~2 GB (captures and one child)."""
    alone = Limits()
    return Limits(wall_seconds=RUN_SECONDS, tmpfs_bytes=alone.tmpfs_bytes + max(1, programs) * CAPTURE_MAX_BYTES)


@dataclass
class JudgedProgram:
    """One program as judged: its case (the captured output) and what its stage is timed and checked on."""

    case: CaseResult
    samples: list[float] = field(default_factory=list)
    trace: TraceSummary | None = None
    dims: list[dict[str, int]] = field(default_factory=list)  # every shape it ran at, in the base's dims


def _case_at(stage: ProgramStage, stem: str) -> ConcreteCase:
    return ConcreteCase(name=stem, group=stage.stage, dtype="float32", shapes={}, output_shape=(), seed=0)


def _case(spec: ProgramsSpec, stage: ProgramStage, stem: str, verdict: Verdict, message: str) -> CaseResult:
    return CaseResult(name=stem, group=stage.stage, entry=spec.kernel, shapes={}, dtype="float32", verdict=verdict,
                      passed=False, message=message)


def program_stage_result(spec: ProgramsSpec, scored: AssignmentSpec, stage: ProgramStage, stem: str,
                         got: JudgedProgram, thresholds: ThresholdTable | None, device: str) -> StageResult:
    """The program's stage under the extensions' points rule: its case gates it, the base stage's requirements
    and the lab's dims are requirements, its modelled time against the calibrated threshold at those dims."""
    stage_spec = scored.stage(stage.stage)
    want = dict(stage.dims)
    requirements = []
    if got.trace is not None:
        requirements = check_requirements(stage_spec.requirements, got.trace, True)
        if got.dims != [want]:
            requirements.append(RequirementResult(
                name="lab_dims", description=_("the program must run at the lab's shape: the threshold applies "
                                               "there only"), passed=False, detail=_("ran at {dims}, not {want}").format(
                    dims="; ".join(_dims(d) for d in got.dims), want=_dims(want))))
    timing = None
    if got.samples and got.dims:
        shapes = {i.name: tuple(got.dims[0][d] for d in i.dims) for i in scored.inputs}
        timing = summarise(got.samples, "modelled", REFERENCES[scored.reference].work(shapes, 4), "float32", device)
    base_threshold = thresholds.stages.get(stage.stage) if thresholds is not None else None
    threshold = at_shape(scored, base_threshold, want) if base_threshold is not None else None
    title = f"{stem}.mlu: {_(stage_spec.title)}"
    return stage_result(scored, stage_spec, spec.kernel, [got.case], requirements, timing, threshold, "",
                        {i.name: [want[d] for d in i.dims] for i in scored.inputs}, got.trace, title)


def _dims(dims: dict[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in dims.items())


def _judge(spec: ProgramsSpec, base: AssignmentSpec, stage: ProgramStage, stem: str, launches: Launches,
           folder: Path, facts: HostFacts, twin_seed: int) -> JudgedProgram:
    """The program's launches of the kernel judged as one case (judge.judge_call, as an extension's call): the
    replay's launch records against the host's device table, then each launch's captured output on the twin
    inputs the host drew with `twin_seed`."""
    ours = [r for r in launches.records if base_name(str(r.get("kernel") or "")) == spec.kernel]
    samples = [float(r.get("modelled_time_us", 0.0)) for r in ours] if not launches.findings else []
    case = _case_at(stage, stem)
    findings = list(launches.findings)
    if not findings:  # the launch records against the host's device table, the program's symbols, the time floor
        for r in launches.records:
            checks = CallIntegrity("", facts, None, 4)
            checks.launch(r)
            findings += checks.all_findings()[:4 - len(findings)]
    errors = [d for r in ours for d in r.get("diagnostics") or [] if d.get("severity") == "error"]
    if findings or not ours or errors:
        got = CallOutcome(meta={"ok": True}, integrity=findings, no_kernel=None if ours else _(
            "no verified launch of {kernel} (the program's own output is not believed)").format(kernel=spec.kernel))
        if errors and not findings and ours:
            got.meta = {"ok": False, "error_kind": ErrorKind.EMULATOR_ERROR.value,
                        "error": _emulator_error(ours, {})}
        judged = judge_call(base, spec.kernel, case, got, None, kernel_trace=False)
        return JudgedProgram(with_diagnostics(judged, launches.records), samples)
    judged, dims = None, []
    try:
        for r in ours:
            judged, shape = _judge_launch(spec, base, case, r, folder, twin_seed)
            dims += [shape] if shape not in dims else []
            if not judged.passed:
                break
    except (CaptureError, UntrustedFileError, KeyError, IndexError, TypeError, ValueError) as exc:
        judged = judge_call(base, spec.kernel, case, CallOutcome(meta={"ok": True}, integrity=[
            _("captured arguments do not add up: {error}").format(error=exc)]), None, kernel_trace=False)
        return JudgedProgram(judged, samples)
    assert judged is not None
    first = ours[0]
    trace = TraceSummary(kernel=spec.kernel, dim=tuple(first.get("dim", (1, 1, 1))), func_type=first.get("func_type",
                         "BLOCK"), device_profile=facts.device, modelled_time_us=float(np.median(samples)),
                         onchip_peak_bytes=first.get("onchip_peak_bytes") or {},
                         builtin_counts=first.get("builtin_counts") or {}, cores_used=int(first.get("cores_used", 1)),
                         launches=len(ours))
    ran = [dict(zip(("M", "K", "N"), shape, strict=True)) for shape in dims]
    return JudgedProgram(judged, samples, trace if judged.passed else None, ran)


def _judge_launch(spec: ProgramsSpec, base: AssignmentSpec, case: ConcreteCase, record: dict[str, Any],
                  folder: Path, twin_seed: int) -> tuple[CaseResult, tuple[int, int, int]]:
    """One launch as a case (judge.judge_call on its captured output against float64 left @ right of the twin
    inputs the captured ones must be) and the (M, K, N) it ran at."""
    a = spec.args
    m, n, k = (int_arg(record, a[x]) for x in ("M", "K", "N"))  # the kernel's m, n, k
    if any(d <= 0 for d in (m, n, k)):
        raise CaptureError(f"shape m={m}, n={n}, k={k} is empty")
    case = dataclasses.replace(case, shapes={"a": (m, n), "b": (n, k)}, output_shape=(m, k))
    out_arg = pointer_arg(record, a["result"])
    itemsize = np.dtype(CAPTURE_DTYPES.get(out_arg.get("dtype"), np.float32)).itemsize
    if out_arg.get("written", 0) < m * k * itemsize:
        unwritten = _("the kernel wrote {written} of the {size} bytes of result[{m}][{k}]").format(
            written=out_arg.get("written", 0), size=m * k * itemsize, m=m, k=k)
        return judge_call(base, spec.kernel, case, CallOutcome(meta={"ok": True}, read_error=unwritten), None,
                          kernel_trace=False), (m, n, k)
    rows_l, left, right = twin_inputs(folder, record, spec, twin_seed, m, n, k)
    rows_r, result = load_rows(folder, record, a["result"], "out", m, k)
    rows = np.intersect1d(rows_l, rows_r)  # a capture over the segment cap holds head and tail rows only
    checked_left = left[np.searchsorted(rows_l, rows)].astype(np.float64)  # the rows captured of both
    reference = REFERENCES[base.reference]
    expected = reference.compute(checked_left, right)
    actual = result[np.searchsorted(rows_r, rows)]
    # right values the kernel did not compute (e.g. DMA'd from a buffer host code filled) are not its own
    work = WorkTotals()
    work.add(record, itemsize)
    shortfalls = work.shortfalls(reference.required(case.shapes))
    judged = judge_call(base, spec.kernel, dataclasses.replace(case, dtype=str(actual.dtype)),
                        CallOutcome(meta={"ok": True}, output=actual, coverage=shortfalls), expected,
                        kernel_trace=False)
    covered = "" if len(rows) == m else " " + _("(rows captured and checked: {rows} of {m})").format(rows=len(rows), m=m)
    if judged.passed:
        message = _("captured output matches float64 left @ right (DIFF1 {diff1:.2e})").format(
            diff1=judged.diff1 or 0)
    elif judged.verdict == Verdict.WRONG_ANSWER:
        message = _("captured output vs float64 left @ right: {message}").format(message=judged.message)
        # An operand read in a layout the kernel never arranged (the reference's misreadings, e.g. matmul's
        # untransposed right matrix in WRAM): recognised, so the message names the cause, not a number.
        for misread in reference.misreadings({"a": checked_left, "b": right}):
            tolerance = base.tolerances[str(actual.dtype)]  # type: ignore[index]
            if compare(actual, misread.expected, str(actual.dtype), tolerance, base.checks).passed:
                # a layout mistake, not rounding, however close the values (inputs in [1, 1.1] make every sum alike)
                judged = judged.model_copy(update={"findings": [f.model_copy(update={"kind": metrics.KIND})
                                                                if f.check == metrics.NAME else f
                                                                for f in judged.findings]})
                message += ". " + misread.explanation
                break
    else:
        message = judged.message
    return judged.model_copy(update={"message": message + covered}), (m, n, k)
