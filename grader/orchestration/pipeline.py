"""grade_submission(): one submission, start to finish -- layout, build, run, check, time, score.

Untrusted code only ever runs inside the runner (a separate process or container). This process draws the
inputs, computes the float64 references, reads the raw outputs back size-capped, and decides everything.
It never raises for anything a submission does: every failure becomes a result with its verdict, and a bug
of the grader itself becomes Verdict.INTERNAL_ERROR with the traceback.

This module is the composition and the result document; each step lives in its own module: resolve (which
assignment and stages), build_step (build, cache, host facts), plan (the calls), policy (probe, skip, timing
rounds) over execute (one run phase) and read_outputs (the sandbox's files), score_stages (judging, stages).
"""

from __future__ import annotations

import hashlib
import os
import platform
import tempfile
import time
import traceback
from datetime import UTC, datetime
from functools import partial
from importlib import metadata
from pathlib import Path

from bang_harness.plan import BuildPlan

from grader import __version__
from grader.backends import get_backend
from grader.checks.screening import apply_screening, screen_submission
from grader.i18n import _, use_language
from grader.layout import (
    LayoutError,
    ModuleSyntaxError,
    Submission,
    bind_entry,
    check_entry_functions,
    inspect_submission,
    resolve_entries,
    stage_keys,
)
from grader.orchestration.afterwards import tidy
from grader.orchestration.build_step import BuildStep, host_facts
from grader.orchestration.document import result_document
from grader.orchestration.environment import ResolvedBackend, UnavailableError, resolve_environment
from grader.orchestration.execute import MAX_SEEDS_PER_ROUND, Executor
from grader.orchestration.kinds import Grader, choose
from grader.orchestration.options import DEFAULT_ENVIRONMENT, GradeEnvironment, GradeRequest, Progress
from grader.orchestration.plan import plan_calls
from grader.orchestration.policy import run_seeds_calls
from grader.orchestration.programs import ProgramsGrader
from grader.orchestration.resolve import all_specs, grading_language, guess_spec, load_spec, selected_stages
from grader.orchestration.score_stages import Scorer, apply_integrity
from grader.orchestration.wasm_engine import EngineMaker
from grader.orchestration.work_folder import discard
from grader.results import (
    BuildInfo,
    CaseResult,
    GradeResult,
    ScreeningFinding,
    StageResult,
    Student,
    Verdict,
    Versions,
)
from grader.sandbox.base import Runner, SandboxError
from grader.scoring import load_thresholds, roofline
from grader.spec import AssignmentSpec, SeedPlan, SpecError
from grader.spec.loader import SPEC_FILE


def grade_submission(submission: Path, request: GradeRequest, environment: GradeEnvironment = DEFAULT_ENVIRONMENT,
                     progress: Progress | None = None) -> GradeResult:
    """Grade one submission; never raises for anything the submission does (see module docstring). Writes
    nothing: the job (orchestration/job.py) writes its results.json and report."""
    lang = grading_language(Path(submission), request)
    with use_language(lang):  # every message of this grading in its language (grader/i18n.py)
        result = _grade_submission(Path(submission), request, environment, progress)
    result.lang = lang
    return result


def _grade_submission(submission: Path, request: GradeRequest, environment: GradeEnvironment,
                      progress: Progress | None) -> GradeResult:
    grading: Grader = _Grading(Path(submission), request, environment, progress)
    try:
        grading = choose(KINDS, Path(submission), request, environment, progress)  # the assignment's kind (kinds.py)
        result = grading.run()
    except Exception:  # noqa: BLE001 -- a grader bug must still produce a result document
        message = _("the grader failed (not your fault):") + "\n" + traceback.format_exc()
        try:
            result = grading.finish(Verdict.INTERNAL_ERROR, message)
        except Exception:  # noqa: BLE001 -- even the partial record failed: keep only what is certain
            result = result_document(Path(submission), request, environment, Verdict.INTERNAL_ERROR,
                                     message + traceback.format_exc(), seeds=grading.seeds.record())
    return result


def grade_on_seeds(submission: Path, request: GradeRequest, environment: GradeEnvironment, masters: list[str],
                   per_round: int = 1) -> list[GradeResult]:
    """One submission graded on each of several public seeds, as `grade submit --seed S` grades it on one:
    resolved, screened and built once, and every seed's rounds run in the same run-phase sandbox (seed sweeps,
    the batch's reference check); `per_round` seeds share each round (probe, correctness, perf) and its replay,
    every decision still taken per seed (policy.run_seeds_calls), at most MAX_SEEDS_PER_ROUND (more would not
    keep each seed's budgets: execute.py). A submission stopped before its calls (layout,
    build) gets that result per seed. Never raises for anything the submission does."""
    lang = grading_language(Path(submission), request)
    grading = _Grading(Path(submission), request, environment, None, masters, per_round)
    with use_language(lang):
        try:
            last = grading.run()
        except Exception:  # noqa: BLE001 -- a grader bug must still produce results
            last = grading.finish(Verdict.INTERNAL_ERROR, _("the grader failed (not your fault):") + "\n"
                                  + traceback.format_exc())
    graded = grading.per_seed[:len(masters)]  # a grader failure midway: the seeds left get its result
    graded += [last.model_copy(update={"seeds": SeedPlan.create("public", m).record()}) for m in masters[len(graded):]]
    for result in graded:
        result.lang = lang
    return graded


def submission_hash(root: Path) -> str:
    """Content hash of the submission; symlinks count by their target text, never followed."""
    digest = hashlib.sha256()
    if root.is_dir():
        for path in sorted(root.rglob("*")):
            if "__pycache__" in path.parts or not (path.is_symlink() or path.is_file()):
                continue
            digest.update(os.fsencode(path.relative_to(root)) + b"\0")  # names are bytes, not text
            data = os.fsencode(os.readlink(path)) if path.is_symlink() else path.read_bytes()
            digest.update(hashlib.sha256(data).digest())
    return digest.hexdigest()


class _Grading(Grader):
    """The kind of an extension module submission: assignments/<name>/assignment.toml (the default kind)."""

    spec_file = SPEC_FILE

    def __init__(self, root: Path, request: GradeRequest, environment: GradeEnvironment,
                 progress: Progress | None, masters: list[str] | None = None, per_round: int = 1) -> None:
        super().__init__(root, request, environment, progress)
        self.started = datetime.now(UTC)
        self.seeds = SeedPlan.create(request.seed_mode, request.seed)
        # grade_on_seeds: every seed's calls in the one sandbox, a result each
        self.seed_plans = [SeedPlan.create("public", m) for m in masters] if masters else [self.seeds]
        self.per_round = max(1, min(per_round, MAX_SEEDS_PER_ROUND))
        self.per_seed: list[GradeResult] = []
        self.spec: AssignmentSpec | None = None
        self.student = Student()
        self.backend: ResolvedBackend | None = None
        self.runner_name: str = environment.sandbox
        self.layout = "unknown"  # set once inspect_submission recognises one (grader/project_layouts.py)
        self.build_plan: BuildPlan | None = None
        self.module = "ops"  # the submission's Python module, once inspected
        self.build: BuildInfo | None = None
        self.cases: list[CaseResult] = []
        self.stages: list[StageResult] = []
        self.image = ""
        self.notes: list[str] = []
        self.screening: list[ScreeningFinding] = []
        self.integrity: list[str] = []
        self.executor: Executor | None = None  # the submission's sandboxes, until run() hands them to the tidy

    # -- progress and the result document --------------------------------------------------------------
    def progress(self, step: str, fraction: float) -> None:
        if self.on_progress is not None:
            try:
                self.on_progress(step, fraction)
            except Exception:  # noqa: BLE001 -- a broken progress display must not fail a grading
                pass

    def finish(self, verdict: Verdict | None, message: str = "") -> GradeResult:
        """The document of what was found so far (verdict None: graded, see document.result_document)."""
        spec, backend, environment = self.spec, self.backend, self.environment
        return apply_screening(result_document(
            self.root, self.request, environment, verdict, message, notes=self.notes, spec=spec,
            cases=self.cases, stages=self.stages,
            device=backend.device if backend else (environment.device or _default_device(environment.backend)),
            sandbox=self.runner_name, seeds=self.seeds.record(), versions=self._versions(), started_at=self.started,
            student=self.student, submission_hash=submission_hash(self.root),
            device_peaks=roofline.device_peaks(backend.device) if backend else None,  # what the floor scored with
            assignment_facts=spec.facts() if spec else None,  # the report renders from this document alone
            build=self.build, layout=self.layout, integrity=self.integrity,
        ), self.screening)

    def _versions(self) -> Versions:
        try:
            torch_version = metadata.version("torch")
        except metadata.PackageNotFoundError:
            torch_version = ""
        return Versions(grader=__version__, toolchain=self.build.toolchain if self.build else "", image=self.image,
                        torch=torch_version, python=platform.python_version())

    # -- the pipeline: resolve, build, run the calls, score ----------------------------------------------
    def run(self) -> GradeResult:
        self.progress(_("checking the layout"), 0.0)
        try:
            submission, entries, stages = self._resolve()
        except LayoutError as exc:
            self.layout = exc.layout or self.layout
            self.spec = self.spec or guess_spec(self.root, self.request)
            return self.finish(Verdict.UNGRADABLE_LAYOUT, str(exc))
        except ModuleSyntaxError as exc:
            self.build = BuildInfo(ok=False, toolchain="python", compiler_output=str(exc))
            return self.finish(Verdict.COMPILE_ERROR, _("{file} does not compile:").format(file=f"{self.module}.py")
                               + f"\n{exc}")
        except SpecError as exc:
            return self.finish(Verdict.INTERNAL_ERROR, str(exc))
        try:
            self.backend, runner = resolve_environment(self.environment)
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
            return self._build_and_grade(runner, submission, entries, stages, work)
        except SandboxError as exc:
            return self.finish(Verdict.INTERNAL_ERROR, _("the sandbox failed (not your fault): {error}").format(
                error=exc))
        finally:
            # beside the answer (afterwards.py): every output is read and scored by now
            executor, self.executor = self.executor, None
            tidy(partial(_tidy, executor, None if keep else work), "grading-tidy")

    def _resolve(self) -> tuple[Submission, dict[str, str], list[str]]:
        """The submission's layout, its assignment, the entry serving each selected stage; screening."""
        submission = inspect_submission(self.root)
        self.layout, self.build_plan = submission.layout, submission.plan
        self.student, self.module = submission.student, submission.module
        self.spec = load_spec(self.request, submission)
        submission = bind_entry(submission, self.spec)
        self.notes += submission.warnings
        entries = resolve_entries(submission, self.spec, stage_keys(all_specs(self.spec)))
        stages = selected_stages(self.spec, self.request)
        needed: dict[str, list[str]] = {}
        for stage in stages:
            needed.setdefault(entries[stage], []).append(stage)
        check_entry_functions(submission, needed)
        # On the host, before anything is built: escape hatches in the sources (checks/screening.py).
        self.screening = screen_submission(self.root, self.spec)
        return submission, entries, stages

    def _build_and_grade(self, runner: Runner, submission: Submission, entries: dict[str, str], stages: list[str],
                         work: Path) -> GradeResult:
        assert self.spec is not None and self.backend is not None
        step = BuildStep(runner, self.backend, self.root, self.build_plan, submission.extension,
                         self.spec.build_timeout_seconds, self.environment.build_cache, self.progress, self.image)
        build_dir = step.folder(work)
        per_round = min(self.per_round, len(self.seed_plans))
        executor = self.executor = Executor(runner, self.backend, self.spec, self.root, submission.module,
                                            submission.extension, build_dir, self.progress, self.notes,
                                            seeds_per_round=per_round)
        # The run sandbox imports torch while the build compiles (its folder, read-only there, is filled before any
        # round reads it) or, when the build is kept, while the host reads the build's facts. A build that fails
        # leaves it unused: run()'s tidy ends it.
        executor.start(work)
        built = step.build(build_dir, work)
        self.build = built.info
        if built.failure is not None:
            return self.finish(*built.failure)
        executor.engine = EngineMaker(runner, self.backend, build_dir, self.environment.build_cache, work, step.recipe)
        started = time.perf_counter()
        executor.facts = host_facts(self.backend, build_dir, submission.extension, self.environment.build_cache)
        executor.integrity_seconds += time.perf_counter() - started
        self.notes += executor.facts.notes
        scorer = Scorer(self.spec, self.backend)
        shared_notes = len(self.notes)  # the build's and the host's; each round's own come after
        several = len(self.seed_plans) > 1
        for start in range(0, len(self.seed_plans), per_round):
            del self.notes[shared_notes:]
            chunk = list(enumerate(self.seed_plans))[start:start + per_round]
            chunk_work = work / f"seeds{start}" if several else work
            chunk_work.mkdir(exist_ok=True)
            self.per_seed += self._grade_seeds(executor, scorer, entries, stages, chunk, chunk_work, several)
            executor.drop_finished_rounds()
        return self.per_seed[-1]  # its sandboxes (shared by its rounds and seeds) end in run()'s tidy

    def _grade_seeds(self, executor: Executor, scorer: Scorer, entries: dict[str, str], stages: list[str],
                     chunk: list[tuple[int, SeedPlan]], work: Path, several: bool) -> list[GradeResult]:
        """The seeds of `chunk` graded in shared rounds, a result each (a single seed: `grade submit`)."""
        assert self.spec is not None and self.backend is not None
        planned = [(seeds, plan_calls(self.spec, seeds, entries, stages, self.backend.impl,
                                      tag=f"s{index}_" if several else ""))
                   for index, seeds in chunk]
        thresholds = load_thresholds(self.spec, self.backend.name, self.backend.device)
        results = []
        for (seeds, calls), ran in zip(planned, run_seeds_calls(executor, scorer, planned, work), strict=True):
            self.seeds, self.integrity = seeds, []
            self.cases = [ran.judged[c.id] for c in calls if c.id in ran.judged]
            self.stages = [scorer.stage_result(c, ran.judged, ran.outcomes.get(c.id), ran.samples[c.stage],
                                               thresholds)
                           for c in calls if c.stage is not None]
            self.integrity += apply_integrity(calls, ran.outcomes, ran.judged, self.cases, self.stages)
            results.append(self.finish(None))
        return results


# The grader kinds, the default (an assignment.toml's extension module) last: kinds.choose picks one per submission.
KINDS: tuple[type[Grader], ...] = (ProgramsGrader, _Grading)


def _tidy(executor: Executor | None, work: Path | None) -> None:
    """A grading's sandboxes ended, then its work folder discarded (None: kept): in that order, so that a run's
    capped /io mounted in the folder (grader/sandbox/io_cap.py) is unmounted with its sandbox first."""
    try:
        if executor is not None:
            executor.close()
    finally:
        if work is not None:
            discard(work)  # in the background too: the answer does not wait for ~200 MB of files to go


def _default_device(name: str) -> str:
    try:
        return str(get_backend(name).default_device)
    except ValueError:
        return ""
