"""grade_submission(): one submission, start to finish -- layout, build, run, check, time, score.

Untrusted code only ever runs inside the runner (a separate process or container). This process draws the
inputs, computes the float64 references, reads the raw outputs back size-capped, and decides everything.
It never raises for anything a submission does: every failure becomes a result with its verdict, and a bug
of the grader itself becomes Verdict.INTERNAL_ERROR with the traceback.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import platform
import shutil
import tempfile
import threading
import time
import tomllib
import traceback
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
from bang_harness.plan import BUILD_PLAN_FILE, BuildPlan
from bang_harness.protocol import KEY_BYTES, KEY_FILE, ErrorKind, ExitCode

from grader import __version__
from grader.atomic_file import atomic_write_text
from grader.backends import get_backend
from grader.checks.integrity import CallIntegrity, HostFacts, KernelSymbols, device_profile
from grader.checks.requirements import check_requirements
from grader.checks.screening import apply_screening, screen_submission
from grader.layout import (
    LayoutError,
    ModuleSyntaxError,
    Submission,
    bind_entry,
    check_entry_functions,
    inspect_submission,
    offers,
    resolve_entries,
    stage_keys,
)
from grader.orchestration import build_cache
from grader.orchestration.environment import (
    ResolvedBackend,
    UnavailableError,
    resolve_backend,
    resolve_runner,
)
from grader.orchestration.judge import CallOutcome, call_samples, dooms_entry, judge_call, modelled_samples
from grader.orchestration.options import GradeOptions
from grader.orchestration.trace_summary import read_trace
from grader.programs.spec import is_programs_assignment, programs_assignment_for
from grader.results import (
    BuildInfo,
    CaseResult,
    GradeResult,
    ScreeningFinding,
    StageResult,
    Student,
    Timing,
    Verdict,
    Versions,
    worst,
)
from grader.sandbox.base import Limits, Mounts, Phase, Runner, RunOutcome
from grader.sandbox.capped import UntrustedFileError, load_npy_expected, read_bytes_capped, read_json_capped
from grader.sandbox.docker_runner import SandboxError
from grader.sandbox.images import emu_image_tag
from grader.sandbox.layout import sandbox_user
from grader.scoring import decide_stage, group_scores, load_thresholds, summarise
from grader.scoring.timing import MAX_ROUNDS, settled
from grader.spec import (
    REFERENCES,
    AssignmentSpec,
    ConcreteCase,
    SeedPlan,
    SpecError,
    available_assignments,
    correctness_cases,
    load_assignment,
    perf_case,
)

COMPILER_OUTPUT_CHARS = 64_000
MLU_REPEATS = 10  # per round; rounds continue until the spread settles (scoring.timing)
PROBE_TIMEOUT_SECONDS = 20.0  # the probe runs the smallest case: a healthy kernel needs well under a second


@dataclass
class PlannedCall:
    id: str
    entry: str
    case: ConcreteCase
    stage: str | None = None  # set for a stage's timed call
    warmup: int = 0
    timed_repeats: int = 0


def grade_submission(submission: Path, options: GradeOptions) -> GradeResult:
    """Grade one submission; never raises for anything the submission does (see module docstring)."""
    grading = _Grading(Path(submission), options)
    try:
        programs = options.assignment if options.assignment and is_programs_assignment(options.assignment) \
            else None if options.assignment else programs_assignment_for(Path(submission))
        if programs:  # a folder of lab programs with their own main()
            from grader.programs.grade import grade_programs

            result = grade_programs(Path(submission), dataclasses.replace(options, assignment=programs))
        else:
            result = grading.run()
    except Exception:  # noqa: BLE001 -- a grader bug must still produce a result document
        message = "the grader failed (not your fault):\n" + traceback.format_exc()
        try:
            result = grading.finish(Verdict.INTERNAL_ERROR, message)
        except Exception:  # noqa: BLE001 -- even the partial record failed: keep only what is certain
            result = _bare_result(Path(submission), options, grading.seeds, message + traceback.format_exc())
    if options.out_dir is not None:
        write_result(result, Path(options.out_dir) / "results.json")
    return result


def write_result(result: GradeResult, path: Path) -> Path:
    return atomic_write_text(path, result.to_json())


def submission_hash(root: Path) -> str:
    """Content hash of the submission; symlinks count by their target text, never followed."""
    digest = hashlib.sha256()
    if root.is_dir():
        for path in sorted(root.rglob("*")):
            if "__pycache__" in path.parts or not (path.is_symlink() or path.is_file()):
                continue
            digest.update(str(path.relative_to(root)).encode() + b"\0")
            data = os.readlink(path).encode() if path.is_symlink() else path.read_bytes()
            digest.update(hashlib.sha256(data).digest())
    return digest.hexdigest()


def _bare_result(root: Path, options: GradeOptions, seeds: SeedPlan, message: str) -> GradeResult:
    return GradeResult(assignment=options.assignment or "unknown", submission_path=str(root), submission_hash="",
                       backend=options.backend, device_profile=options.device or "",
                       time_is_modelled=options.backend == "emu", sandbox=options.sandbox,
                       verdict=Verdict.INTERNAL_ERROR, message=message, score=0.0, max_score=0.0,
                       seeds=seeds.record(),
                       versions=Versions(grader=__version__), finished_at=datetime.now(UTC))


class _Grading:
    def __init__(self, root: Path, options: GradeOptions) -> None:
        self.root = root
        self.options = options
        self.started = datetime.now(UTC)
        self.seeds = SeedPlan.create(options.seed_mode, options.seed)
        self.spec: AssignmentSpec | None = None
        self.student = Student()
        self.backend: ResolvedBackend | None = None
        self.runner_name = options.sandbox
        self.layout = "unknown"  # set once inspect_submission recognises one (grader/project_layouts.py)
        self.build_plan: BuildPlan | None = None
        self.build: BuildInfo | None = None
        self.cases: list[CaseResult] = []
        self.stages: list[StageResult] = []
        self.image = ""
        self.notes: list[str] = []
        self.screening: list[ScreeningFinding] = []
        self._references: dict[tuple[str, int], np.ndarray] = {}
        self.facts: HostFacts | None = None  # what integrity checks compare the sandbox's claims against
        self._keys: dict[Path, bytes] = {}  # outputs folder -> the trace key drawn for that run phase
        self.integrity: list[str] = []
        self.integrity_seconds = 0.0  # host cost of the checks (symbols, verification), for the record

    # -- progress and the result document --------------------------------------------------------------
    def progress(self, step: str, fraction: float) -> None:
        if self.options.progress is not None:
            try:
                self.options.progress(step, fraction)
            except Exception:  # noqa: BLE001 -- a broken progress display must not fail a grading
                pass

    def finish(self, verdict: Verdict, message: str = "") -> GradeResult:
        spec = self.spec
        groups = group_scores(spec, self.cases) if spec is not None else []
        score = sum(g.points for g in groups) + sum(s.points for s in self.stages)
        backend = self.backend
        return apply_screening(GradeResult(
            student=self.student,
            assignment=spec.name if spec else (self.options.assignment or "unknown"),
            assignment_title=spec.title if spec else "",
            submission_path=str(self.root.resolve()),
            submission_hash=submission_hash(self.root),
            backend=self.options.backend,
            device_profile=backend.device if backend else (self.options.device or _default_device(self.options.backend)),
            time_is_modelled=self.options.backend == "emu",
            sandbox=self.runner_name,
            verdict=verdict,
            message="\n".join([message, *self.notes]).strip(),
            score=round(score, 4),
            max_score=spec.max_score if spec else 0.0,
            groups=groups,
            cases=self.cases,
            stages=self.stages,
            build=self.build,
            layout=self.layout,
            integrity=self.integrity,
            seeds=self.seeds.record(),
            versions=self._versions(),
            started_at=self.started,
            finished_at=datetime.now(UTC),
        ), self.screening)

    def _versions(self) -> Versions:
        try:
            torch_version = metadata.version("torch")
        except metadata.PackageNotFoundError:
            torch_version = ""
        return Versions(grader=__version__, toolchain=self.build.toolchain if self.build else "", image=self.image,
                        torch=torch_version, python=platform.python_version())

    # -- the pipeline ----------------------------------------------------------------------------------
    def run(self) -> GradeResult:
        self.progress("checking the layout", 0.0)
        try:
            submission = inspect_submission(self.root)
            self.layout, self.build_plan = submission.layout, submission.plan
            self.student = submission.student
            self.spec = self._load_spec(submission)
            submission = bind_entry(submission, self.spec)
            self.notes += submission.warnings
            entries = resolve_entries(submission, self.spec, stage_keys(self._all_specs()))
            stages = self._selected_stages()
            needed: dict[str, list[str]] = {}
            for stage in stages:
                needed.setdefault(entries[stage], []).append(stage)
            check_entry_functions(submission, needed)
            # On the host, before anything is built: escape hatches in the sources (checks/screening.py).
            self.screening = screen_submission(self.root, self.spec)
        except LayoutError as exc:
            self.layout = exc.layout or self.layout
            self.spec = self.spec or self._guess_spec()
            return self.finish(Verdict.UNGRADABLE_LAYOUT, str(exc))
        except ModuleSyntaxError as exc:
            self.build = BuildInfo(ok=False, toolchain="python", compiler_output=str(exc))
            return self.finish(Verdict.COMPILE_ERROR, f"{submission.module}.py does not compile:\n{exc}")
        except SpecError as exc:
            return self.finish(Verdict.INTERNAL_ERROR, str(exc))
        try:
            self.backend = resolve_backend(self.options)
            runner = resolve_runner(self.options, self.backend)
        except UnavailableError as exc:  # the machine, not the submission: nothing was run
            return self.finish(Verdict.ENVIRONMENT_ERROR, str(exc))
        self.runner_name = getattr(runner, "name", type(runner).__name__)
        self.image = str(getattr(runner, "image", "") or "")
        # BANG_GRADER_KEEP_WORK=1 keeps the job, inputs, raw outputs and traces for debugging the grader.
        keep = bool(os.environ.get("BANG_GRADER_KEEP_WORK"))
        work = Path(tempfile.mkdtemp(prefix="bang-grade-"))
        try:
            if keep:
                self.notes.append(f"work folder kept: {work}")
            build_dir = self._build_dir(work, submission)
            verdict = self._build(runner, submission, build_dir, work)
            if verdict is not None:
                return verdict
            self.facts = self._host_facts(build_dir, submission)
            return self._grade_calls(runner, submission, entries, stages, build_dir, work)
        except SandboxError as exc:
            return self.finish(Verdict.INTERNAL_ERROR, f"the sandbox failed (not your fault): {exc}")
        finally:
            if not keep:
                shutil.rmtree(work, ignore_errors=True)

    def _all_specs(self) -> list[AssignmentSpec]:
        specs = []
        for name in available_assignments():
            try:
                specs.append(load_assignment(name))
            except SpecError:
                continue
        if self.spec is not None and self.spec.name not in {s.name for s in specs}:
            specs.append(self.spec)
        return specs

    def _guess_spec(self) -> AssignmentSpec | None:
        """Best effort, for the record of an ungradable submission: which assignment it was meant for."""
        names = [self.options.assignment]
        try:
            names.append(tomllib.loads((self.root / "grade.toml").read_text(encoding="utf-8")).get("assignment"))
        except (OSError, ValueError):
            pass
        for name in names:
            if isinstance(name, str) and name in available_assignments():
                return load_assignment(name)
        try:
            source = (self.root / "ops.py").read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None
        fits = [s for s in self._all_specs() if f"def {s.entry}(" in source]
        return fits[0] if len(fits) == 1 else None

    def _load_spec(self, submission: Submission) -> AssignmentSpec:
        if self.options.assignment is not None:
            return load_assignment(self.options.assignment)
        if submission.assignment is not None:
            try:
                return load_assignment(submission.assignment)
            except SpecError as exc:
                raise LayoutError(f"grade.toml: assignment {submission.assignment!r} is unknown (known: "
                                  f"{', '.join(available_assignments())})", show_layout=False) from exc
        fits = [s for s in self._all_specs() if offers(submission, s.entry)]
        if len(fits) == 1:
            return fits[0]
        known = ", ".join(available_assignments())
        raise LayoutError(f"cannot tell which assignment this is: set assignment = \"...\" in grade.toml or pass "
                          f"--assignment (known: {known})", show_layout=False)

    def _selected_stages(self) -> list[str]:
        assert self.spec is not None
        names = [s.name for s in self.spec.stages]
        if self.options.stages:
            unknown = [s for s in self.options.stages if s not in names]
            if unknown:
                raise SpecError(f"unknown stage(s) {unknown} for {self.spec.name}; stages: {names}")
            return [s for s in names if s in self.options.stages]
        return names

    # -- build -----------------------------------------------------------------------------------------
    def _build_dir(self, work: Path, submission: Submission) -> Path:
        if self.options.build_cache is None:
            path = work / "build"
            path.mkdir(parents=True, exist_ok=True)
            return path
        assert self.backend is not None
        # Without an image (process, bwrap runners) the harness and emulator run from these sources: their
        # hash (the tag an image of them would have) stands in for the image's.
        toolchain = f"{self.backend.toolchain()}|{self.image or emu_image_tag()}|{__version__}"
        plan = self.build_plan.to_json() if self.build_plan is not None else submission.extension
        key = build_cache.build_key(self.root, plan, self.backend.name, self.backend.env, toolchain)
        return build_cache.entry(Path(self.options.build_cache), key)

    def _build(self, runner: Runner, submission: Submission, build_dir: Path, work: Path) -> GradeResult | None:
        if self.options.build_cache is None:
            return self._compile(runner, build_dir, work)
        with build_cache.build_lock(build_dir):  # a parallel grading of the same sources builds it once
            cached = _read_json(build_dir / "build.json")
            if cached and cached.get("ok") is True:
                self.build = BuildInfo(ok=True, toolchain=str(cached.get("toolchain", "")), cached=True,
                                       duration_seconds=float(cached.get("seconds", 0.0) or 0.0),
                                       cache_key=build_dir.name)
                return None
            return self._compile(runner, build_dir, work)

    def _compile(self, runner: Runner, build_dir: Path, work: Path) -> GradeResult | None:
        assert self.backend is not None and self.spec is not None
        self.progress("building the extension", 0.05)
        io = work / "io-build"
        io.mkdir()
        if self.build_plan is not None:  # the sources the layout names (grader/project_layouts.py)
            (io / BUILD_PLAN_FILE).write_text(self.build_plan.to_json(), encoding="utf-8")
        outcome = runner.run(Phase.BUILD, self.backend.argv(Phase.BUILD),
                             Mounts(submission=self.root.resolve(), build=build_dir, io=io),
                             Limits(wall_seconds=self.spec.build_timeout_seconds), env=dict(self.backend.env))
        info = _read_json(build_dir / "build.json") or {}
        log = _read_text(build_dir / "build.log", COMPILER_OUTPUT_CHARS) or str(info.get("log_tail", ""))
        ok = bool(info.get("ok")) and outcome.ok
        self.build = BuildInfo(ok=ok, toolchain=str(info.get("toolchain", self.backend.name)),
                               compiler_output=log[-COMPILER_OUTPUT_CHARS:] if log else _tail(outcome),
                               duration_seconds=float(info.get("seconds", outcome.wall_seconds) or 0.0),
                               cache_key=build_dir.name if self.options.build_cache else None)
        if ok:
            return None
        if outcome.timed_out:
            return self.finish(Verdict.TIMEOUT, f"the build took longer than {self.spec.build_timeout_seconds:.0f} s")
        if not info:
            # No build.json at all: the harness itself did not get to write it (killed, out of memory).
            detail = _describe_outcome(outcome)
            return self.finish(Verdict.COMPILE_ERROR, f"the build did not complete ({detail})")
        # build.json is the harness's (no student code runs while building); its typed kind is believed only
        # when the runner saw the harness exit with its own "build failed" status.
        harness_fault = (info.get("error_kind") == ErrorKind.HARNESS_ERROR and outcome.exit_code == ExitCode.BUILD_FAILED
                         and not outcome.timed_out and not outcome.oom_killed and not outcome.signal)
        if harness_fault:
            return self.finish(Verdict.INTERNAL_ERROR, "the build harness failed (not your fault):\n" + log[-4000:])
        return self.finish(Verdict.COMPILE_ERROR, "the extension does not compile; the compiler output follows in "
                                                  "the report (build.compiler_output)")

    def _host_facts(self, build_dir: Path, submission: Submission) -> HostFacts:
        """The host's own facts for integrity checks: its device table entry and the extension's symbols."""
        assert self.backend is not None
        started = time.perf_counter()
        facts = HostFacts(device=self.backend.device, profile=None, symbols=None)
        if not self.backend.has_trace:
            facts.notes.append(f"the {self.backend.name} backend has no signed launch trace: the integrity checks "
                               "that need it (provenance, counted work, kernel names, modelled time) were skipped")
        else:
            facts.profile = device_profile(self.backend.device)
            if facts.profile is None:
                facts.notes.append(f"no entry for {self.backend.device} in the host's device table: profile "
                                   "figures and modelled-time floors were not checked")
            facts.symbols = KernelSymbols.from_library(build_dir / "ext" / f"{submission.extension}.so")
            if facts.symbols is None:
                facts.notes.append("the built extension's symbols could not be read on the host (nm): kernel "
                                   "names were not checked")
        self.notes += facts.notes
        self.integrity_seconds += time.perf_counter() - started
        return facts

    # -- run -------------------------------------------------------------------------------------------
    def _plan(self, entries: dict[str, str], stages: list[str]) -> list[PlannedCall]:
        assert self.spec is not None and self.backend is not None
        calls: list[PlannedCall] = []
        by_entry: dict[str, set[str]] = {}
        for stage in stages:
            by_entry.setdefault(entries[stage], set()).update(self.spec.stage(stage).groups)
        for entry, groups in by_entry.items():
            for case in correctness_cases(self.spec, self.seeds, groups):
                calls.append(PlannedCall(id=f"c{len(calls)}", entry=entry, case=case))
        emu = self.backend.name == "emu"
        for stage in stages:
            # Modelled time is deterministic: one timed call says all there is (spread 0, repeats 1).
            calls.append(PlannedCall(id=f"p{len(calls)}", entry=entries[stage], stage=stage,
                                     case=perf_case(self.spec, stage, self.seeds),
                                     warmup=0 if emu else 3, timed_repeats=1 if emu else MLU_REPEATS))
        return calls

    def _execute(self, runner: Runner, calls: list[PlannedCall], submission: Submission, build_dir: Path,
                 io: Path, progress_span: tuple[float, float], call_timeout: float | None = None) -> dict[str, CallOutcome]:
        if not calls:
            return {}
        assert self.backend is not None and self.spec is not None
        (io / "inputs").mkdir(parents=True)
        (io / "outputs").mkdir()
        written: set[str] = set()
        job_calls = []
        for call in calls:
            names = []
            for name, array in call.case.make_inputs().items():
                file = f"{call.case.name}_{name}.npy"
                if file not in written:
                    np.save(io / "inputs" / file, array, allow_pickle=False)
                    written.add(file)
                names.append(file)
            job_calls.append({"id": call.id, "entry": call.entry, "inputs": names, "dtype": call.case.dtype,
                              "timed_repeats": call.timed_repeats, "warmup": call.warmup, "poison": "nan"})
        job = {"backend": self.backend.name, "device": self.backend.device, "module": submission.module,
               "extension": submission.extension, "calls": job_calls,
               "call_timeout_seconds": call_timeout or self.spec.call_timeout_seconds}
        (io / "job.json").write_text(json.dumps(job, indent=1), encoding="utf-8")
        if self.backend.has_trace:
            # A fresh master key per run phase: a trace line signed in one phase verifies in no other.
            key = os.urandom(KEY_BYTES)
            fd = os.open(io / KEY_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "wb") as fh:
                fh.write(key)
                if os.geteuid() == 0:  # the sandbox's supervisor runs as the dedicated user: only it may read
                    os.fchown(fh.fileno(), *sandbox_user())
            self._keys[io / "outputs"] = key
        stop = threading.Event()
        watcher = threading.Thread(target=self._watch_outputs, args=(io / "outputs", calls, progress_span, stop),
                                   daemon=True)
        watcher.start()
        try:
            outcome = runner.run(Phase.RUN, self.backend.argv(Phase.RUN),
                                 Mounts(submission=self.root.resolve(), build=build_dir, io=io),
                                 Limits(wall_seconds=self.spec.run_timeout_seconds), env=dict(self.backend.env))
        finally:
            stop.set()
            watcher.join()
            (io / KEY_FILE).unlink(missing_ok=True)  # the harness unlinks it first; this covers a failed start
        if not outcome.ok:
            self.notes.append(f"the run phase did not finish cleanly: {_describe_outcome(outcome)}")
        return {call.id: self._collect(call, io / "outputs", outcome) for call in calls}

    def _watch_outputs(self, outputs: Path, calls: list[PlannedCall], span: tuple[float, float],
                       stop: threading.Event) -> None:
        total = len(calls)
        labels = {c.id: (f"timing stage {c.stage}" if c.stage else f"case {c.case.name} ({c.entry})") for c in calls}
        last = -1
        while not stop.wait(0.5):
            done = sum(1 for c in calls if (outputs / f"{c.id}.json").exists())
            if done != last and done < total:
                last = done
                self.progress(f"running {labels[calls[done].id]} [{done + 1}/{total}]",
                              span[0] + (span[1] - span[0]) * done / total)

    def _collect(self, call: PlannedCall, outputs: Path, outcome: RunOutcome) -> CallOutcome:
        assert self.backend is not None and self.spec is not None
        try:
            meta = read_json_capped(outputs / f"{call.id}.json", root=outputs.parent)
        except (UntrustedFileError, OSError):
            meta = None
        if meta is not None and not isinstance(meta, dict):
            meta = {"ok": False, "error": "the call's result file is not a JSON object"}
        if meta is None:
            # The host's own observation of its runner: the only source of crash/timeout it needs no file for.
            kind = ErrorKind.TIMEOUT if outcome.timed_out else ErrorKind.CRASH
            meta = {"ok": False, "error_kind": kind, "error": _describe_outcome(outcome), "lost": True}
        ok = meta.get("ok") is True
        output = None
        read_error = None
        if ok:
            try:
                # Header checked against the case's shape and dtype before any array is allocated.
                output = load_npy_expected(outputs / f"{call.id}.npy", tuple(call.case.output_shape),
                                           call.case.dtype, root=outputs.parent)
            except (UntrustedFileError, OSError) as exc:
                read_error = f"the output could not be read back: {exc}"
        if not self.backend.has_trace:
            return CallOutcome(meta=meta, output=output, read_error=read_error)
        started = time.perf_counter()
        facts = self.facts or HostFacts(device=self.backend.device, profile=None, symbols=None)
        required = REFERENCES[self.spec.reference].required(call.case.shapes)
        checker = CallIntegrity(call.id, facts, required, np.dtype(call.case.dtype).itemsize)
        trace = read_trace(outputs / f"{call.id}.trace.jsonl", self._keys[outputs], call.id, checker,
                           root=outputs.parent)
        findings: list[str] = []
        if ok:
            findings = trace.findings + checker.finish(output)
        self.integrity_seconds += time.perf_counter() - started
        return CallOutcome(meta=meta, output=output, trace=trace, read_error=read_error, integrity=findings,
                           coverage=checker.coverage if ok else [])

    # -- judging ---------------------------------------------------------------------------------------
    def _expected(self, case: ConcreteCase) -> np.ndarray:
        # Several entries may run the same case: draw and compute its reference once.
        key = (case.name, case.seed)
        if key not in self._references:
            assert self.spec is not None
            inputs = case.make_inputs()
            self._references[key] = REFERENCES[self.spec.reference].compute(*case.reference_inputs(inputs))
        return self._references[key]

    def _judge(self, call: PlannedCall, got: CallOutcome) -> CaseResult:
        assert self.spec is not None and self.backend is not None
        expected = self._expected(call.case) if (got.meta or {}).get("ok") and got.output is not None else None
        return judge_call(self.spec, call.entry, call.case, got, expected, kernel_trace=self.backend.has_trace)

    def _grade_calls(self, runner: Runner, submission: Submission, entries: dict[str, str], stages: list[str],
                     build_dir: Path, work: Path) -> GradeResult:
        assert self.spec is not None and self.backend is not None
        calls = self._plan(entries, stages)
        # Probe: one tiny case per entry under a short limit first. An entry that hangs or cannot even be
        # loaded would fail every other call the same way, one full time limit each; those are not run.
        probes = list({c.entry: c for c in reversed([c for c in calls if c.stage is None])}.values())
        self.progress(f"probing {len(probes)} entry function(s)", 0.3)
        outcomes = self._execute(runner, probes, submission, build_dir, work / "io-probe", (0.3, 0.35),
                                 call_timeout=PROBE_TIMEOUT_SECONDS)
        doomed = {c.entry: outcomes[c.id] for c in probes if dooms_entry(outcomes[c.id])}
        rest = [c for c in calls if c.id not in outcomes and c.entry not in doomed and c.stage is None]
        self.progress(f"running {len(rest)} correctness calls", 0.35)
        outcomes |= self._execute(runner, rest, submission, build_dir, work / "io", (0.35, 0.7))
        for call in calls:
            if call.id not in outcomes and call.entry in doomed and call.stage is None:
                first = doomed[call.entry].meta or {}
                outcomes[call.id] = CallOutcome(meta={**first, "error": f"not run: {call.entry}() already failed on "
                                                      f"its first case -- {first.get('error', '')}"})
        judged = {c.id: self._judge(c, outcomes[c.id]) for c in calls if c.id in outcomes}
        # Speed is measured only where it can score: a stage whose entry already fails a case earns nothing,
        # and a broken kernel at the perf shape would only burn time.
        timed = [c for c in calls if c.stage is not None and self._entry_correct(c, judged)]
        self.progress(f"timing {len(timed)} stage(s)", 0.7)
        outcomes |= self._execute(runner, timed, submission, build_dir, work / "io-perf", (0.7, 0.9))
        judged |= {c.id: self._judge(c, outcomes[c.id]) for c in timed}
        self.progress("scoring", 0.9)
        self.cases = [judged[c.id] for c in calls if c.id in judged]
        perf_calls = [c for c in calls if c.stage is not None]
        samples = {c.stage: call_samples(outcomes[c.id].meta, self.backend.time_source) if c.id in outcomes else []
                   for c in perf_calls}
        if self.backend.name != "emu":
            samples = self._more_rounds(runner, submission, build_dir, work, timed, judged, samples)
        thresholds = load_thresholds(self.spec, self.backend.name, self.backend.device)
        for call in perf_calls:
            assert call.stage is not None
            self.stages.append(self._stage_result(call, judged, outcomes.get(call.id), samples[call.stage],
                                                  thresholds))
        self._apply_integrity(calls, outcomes, judged)
        verdict = worst([c.verdict for c in self.cases] + [s.verdict for s in self.stages])
        return self.finish(verdict, _summary_line(verdict, self.cases, self.stages))

    def _apply_integrity(self, calls: list[PlannedCall], outcomes: dict[str, CallOutcome],
                         judged: dict[str, CaseResult]) -> None:
        """A call whose claims do not add up costs its whole entry every point: cases and stages alike."""
        failed: dict[str, str] = {}
        for call in calls:
            got = outcomes.get(call.id)
            if got is None:
                continue
            # Coverage shortfalls count only where judging found the output right all the same (judge_call);
            # beside other findings they are shown too, since they say what the kernels really did.
            forged_coverage = call.id in judged and judged[call.id].verdict == Verdict.INTEGRITY
            findings = got.integrity + got.coverage if got.integrity else (got.coverage if forged_coverage else [])
            if not findings:
                continue
            label = f"stage {call.stage}" if call.stage else f"case {call.case.name}"
            failed.setdefault(call.entry, label)
            self.integrity += [f"{call.entry}(), {label}: {finding}" for finding in findings]
        if not failed:
            return
        for i, case in enumerate(self.cases):
            if case.entry in failed and case.passed:
                self.cases[i] = case.model_copy(update={
                    "verdict": Verdict.INTEGRITY, "passed": False,
                    "message": f"no points for {case.entry}(): the sandbox's claims for its "
                               f"{failed[case.entry]} do not add up (see integrity)"})
        for i, stage in enumerate(self.stages):
            if stage.entry in failed:
                self.stages[i] = stage.model_copy(update={
                    "verdict": Verdict.INTEGRITY, "points": 0.0,
                    "message": f"no points for {stage.entry}(): the sandbox's claims for its "
                               f"{failed[stage.entry]} do not add up (see integrity)"})

    def _entry_correct(self, perf_call: PlannedCall, judged: dict[str, CaseResult]) -> bool:
        assert self.spec is not None and perf_call.stage is not None
        groups = self.spec.gating_groups(self.spec.stage(perf_call.stage))
        mine = [r for r in judged.values() if r.entry == perf_call.entry and r.group in groups]
        return bool(mine) and all(r.passed for r in mine)

    def _more_rounds(self, runner: Runner, submission: Submission, build_dir: Path, work: Path,
                     perf_calls: list[PlannedCall], judged: dict[str, CaseResult],
                     samples: dict[str | None, list[float]]) -> dict[str | None, list[float]]:
        """Hardware timing: more rounds of fresh inputs until each stage's spread settles or the budget ends."""
        for round_index in range(1, MAX_ROUNDS):
            pending = [c for c in perf_calls if judged[c.id].passed and not settled(samples[c.stage])]
            if not pending:
                break
            again = [PlannedCall(id=f"r{round_index}_{c.id}", entry=c.entry, stage=c.stage, warmup=1,
                                 timed_repeats=MLU_REPEATS,
                                 case=perf_case(self.spec, c.stage, self.seeds, repeat=round_index))  # type: ignore[arg-type]
                     for c in pending]
            results = self._execute(runner, again, submission, build_dir, work / f"io-round{round_index}", (0.9, 0.9))
            for call in again:
                if self._judge(call, results[call.id]).passed:
                    samples[call.stage] += call_samples(results[call.id].meta, self.backend.time_source)  # type: ignore[union-attr]
        return samples

    def _stage_result(self, call: PlannedCall, judged: dict[str, CaseResult], got: CallOutcome | None,
                      samples: list[float], thresholds: Any) -> StageResult:
        assert self.spec is not None and self.backend is not None and call.stage is not None
        stage = self.spec.stage(call.stage)
        groups = self.spec.gating_groups(stage)
        correctness = [r for c_id, r in judged.items() if r.entry == call.entry and (r.group in groups or c_id == call.id)]
        # The harness times the checked call itself when there is no warm-up (bang_harness.worker).
        invocations = 1 + call.warmup + call.timed_repeats - (1 if call.warmup == 0 and call.timed_repeats else 0)
        trace = got.trace.summary(invocations, self.backend.device) if got and got.trace else None
        requirements = check_requirements(stage.requirements, trace, self.backend.has_trace)
        samples, note = modelled_samples(self.backend.time_source, samples, trace)
        timing: Timing | None = None
        work = REFERENCES[self.spec.reference].work(call.case.shapes, np.dtype(call.case.dtype).itemsize)
        if samples:
            timing = summarise(samples, self.backend.time_source, work, call.case.dtype, self.backend.device)  # type: ignore[arg-type]
        threshold = thresholds.stages.get(stage.name) if thresholds is not None else None
        if threshold is not None and threshold.perf_dims and threshold.perf_dims != dict(stage.perf.dims):
            threshold, note = None, note + ("speed not graded: the thresholds were calibrated on another perf shape; "
                                     "run `grade calibrate`")
        decision = decide_stage(stage, correctness, requirements, timing, threshold, note)
        return StageResult(
            name=stage.name, title=stage.title, entry=call.entry, points=decision.points, points_possible=stage.points,
            correct=all(r.passed for r in correctness), verdict=decision.verdict, message=decision.message,
            perf_shape={k: list(v) for k, v in call.case.shapes.items()}, timing=timing,
            threshold_us=threshold.threshold_us if threshold else None,
            reference_us=threshold.reference_us if threshold else None,
            requirements=requirements, trace=trace,
            next_step=self._next_step(stage.name, decision.verdict == Verdict.PASSED and decision.points > 0))

    def _next_step(self, stage: str, reached: bool) -> str | None:
        """Not reached: how to reach this stage. Reached: how to reach the next one (None after the last)."""
        assert self.spec is not None
        names = [s.name for s in self.spec.stages]
        if not reached:
            return self.spec.stage(stage).hint
        following = names.index(stage) + 1
        return self.spec.stages[following].hint if following < len(names) else None


def _default_device(backend: str) -> str:
    try:
        return str(get_backend(backend).default_device)
    except ValueError:
        return ""


def _summary_line(verdict: Verdict, cases: list[CaseResult], stages: list[StageResult]) -> str:
    correct = sum(c.passed for c in cases)
    reached = sum(s.verdict == Verdict.PASSED and s.points >= s.points_possible for s in stages)
    head = "all checks passed" if verdict == Verdict.PASSED else f"verdict {verdict.value}"
    return f"{head}: {correct}/{len(cases)} cases correct, {reached}/{len(stages)} stages reached"


def _describe_outcome(outcome: RunOutcome) -> str:
    # The runner's notes say why it stopped the sandbox (disk or output flood, pids, memory ...).
    why = "".join(f"; {note}" for note in outcome.notes if "no isolation" not in note)
    if outcome.timed_out:
        return f"killed after the wall limit ({outcome.wall_seconds:.0f} s){why}"
    if outcome.oom_killed:
        return f"killed: out of memory{why}"
    if outcome.signal:
        return f"killed by signal {outcome.signal}{why}"
    tail = _tail(outcome)
    return f"exit status {outcome.exit_code}{why}" + (f": {tail}" if tail else "")


def _tail(outcome: RunOutcome, chars: int = 4000) -> str:
    return (outcome.stderr_tail or outcome.stdout_tail or "")[-chars:].strip()


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = read_json_capped(path)
    except (UntrustedFileError, OSError):
        return None
    return data if isinstance(data, dict) else None


def _read_text(path: Path, chars: int) -> str | None:
    try:
        return read_bytes_capped(path, 4 * chars + 4096).decode("utf-8", "replace")[-chars:]
    except (UntrustedFileError, OSError):
        return None
