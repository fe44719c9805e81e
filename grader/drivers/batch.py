"""`grade batch`: grades a whole class, resumably, on one worker process per device slot.

    run_batch(Path("submissions/"), "matmul", Path("out/matmul"), workers=2, backend="emu",
              sandbox="auto", force=False, seed=None, progress=True)

Rerunning the same command skips every submission whose result is stored under the same key (student,
assignment, submission content, spec, grader version, backend/device, seed), so an interrupted batch
resumes where it stopped; `force=True` regrades everything. The exports (gradebook, Canvas CSV,
Gradescope results.json, per-student reports, class dashboard) are rebuilt from the stored results at the
end of every run.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

import grader
from grader.atomic_file import atomic_write_text
from grader.backends import BACKENDS, DEFAULT_BACKEND, get_backend
from grader.batch.dashboard import write_dashboard
from grader.batch.distributed import make_self_contained, write_kubernetes_job, write_plan
from grader.batch.exports import ClassRow, write_exports
from grader.batch.intake import IntakeError, IntakeLimits, StudentSubmission, collect_submissions
from grader.batch.jobs import GradeJob, failure_result
from grader.batch.pool import Slot, WorkerPool
from grader.batch.similarity import SimilarityOptions, similarity_step
from grader.batch.similarity import check_options as check_similarity_options
from grader.batch.store import KeyParts, ResultStore, seed_digest
from grader.drivers.reference_check import FileRecord, guard_message, guard_seed
from grader.i18n import N_, _, ngettext, resolve_language, use_language
from grader.orchestration.build_cache import default_build_cache
from grader.orchestration.job import write_report
from grader.orchestration.options import (
    GradeEnvironment,
    GradeObserver,
    GradeRequest,
    SeedMode,
    sandbox_name,
    seed_mode,
)
from grader.results import GradeResult, Student, Verdict, verdict_label
from grader.spec import REFERENCE_ROOT

if TYPE_CHECKING:
    from grader.orchestration.environment import Prepared

GRADE_ENTRY = "grader.drivers.batch:grade_batch_job"  # the GradeFn real batches run (a test resolves it)
BREAKER_FAILURES = 4  # consecutive grader failures from the start that stop the batch
UNSANDBOXED = ("none", "process", "bwrap")  # bwrap has no cgroup limits: self-checks only
# The summary's names for what the batch wrote (BatchSummary.outputs keys), shown in the batch's language.
OUTPUT_LABELS = {"plan": N_("plan"), "kubernetes": N_("kubernetes"), "similarity": N_("similarity"),
                 "gradebook": N_("gradebook"), "canvas": N_("canvas"), "dashboard": N_("dashboard"),
                 "gradescope": N_("gradescope"), "reports": N_("reports")}


class BatchError(Exception):
    """The batch as a whole cannot start (bad input, unknown assignment, refused settings, no sandbox) or
    had to stop (the grader failed on every submission)."""


class BatchInterrupted(Exception):
    """Ctrl-C (or SIGTERM) stopped the grading: the workers and their containers are gone, every result
    committed before stays (the next run with the same command resumes after it). str(): one line saying so."""

    def __init__(self, committed: int, total: int, graded_now: int) -> None:
        super().__init__(_("interrupted: {committed} of {total} results committed ({now} graded in this run); "
                           "run the same command again to grade the other {left}").format(
            committed=committed, total=total, now=graded_now, left=total - committed))
        self.committed, self.total, self.graded_now = committed, total, graded_now


@dataclass
class BatchSummary:
    out_dir: Path
    assignment: str
    total: int  # students in the batch
    graded: int  # graded in this run
    skipped: int  # already graded under the same key
    worker_failures: int  # graded now but failed on the grader's side: verdict internal_error
    verdicts: dict[str, int]  # verdict -> students, over the whole class
    mean_score: float
    max_score: float
    wall_seconds: float
    per_minute: float  # submissions graded per minute in this run
    outputs: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    lang: str = "en"  # the batch's language: lines() is meant to be read in it
    not_graded: dict[str, str] = field(default_factory=dict)  # class folder entry -> why it was not graded
    planned: int | None = None  # --plan-only: jobs left to the cluster (nothing graded or exported here)

    @property
    def complete(self) -> bool:
        """Every entry of the class graded (planned, with --plan-only), none by a failing grader: the command's
        exit status."""
        return not self.worker_failures and not self.not_graded

    def lines(self) -> list[str]:
        """A plain-text summary for the terminal, in the batch's language."""
        with use_language(self.lang):
            return self._plan_lines() if self.planned is not None else self._lines()

    def _plan_lines(self) -> list[str]:
        out = [_("{assignment}: planned {planned} of {total} submissions for the cluster ({skipped} already "
                 "graded); nothing was graded or exported here: run the Job, then rerun without --plan-only "
                 "to collect the grades").format(assignment=self.assignment, planned=self.planned,
                                                 total=self.total, skipped=self.skipped)]
        out += [f"{name}: {path}" for name, path in self.outputs.items()]
        return out + self._not_graded_lines()

    def _not_graded_lines(self) -> list[str]:
        if not self.not_graded:
            return []
        head = ngettext("not graded: {n} entry of the class folder (no score is exported for it; fix it and rerun):",
                        "not graded: {n} entries of the class folder (no score is exported for them; fix them and "
                        "rerun):",
                        len(self.not_graded)).format(n=len(self.not_graded))
        return [head] + [f"  {entry}: {why}" for entry, why in self.not_graded.items()]

    def _lines(self) -> list[str]:
        verdicts = ", ".join(f"{verdict_label(v)} {n}"
                             for v, n in sorted(self.verdicts.items(), key=lambda kv: -kv[1]))
        first = ngettext("{assignment}: {total} student; graded {graded} now, {skipped} already done",
                         "{assignment}: {total} students; graded {graded} now, {skipped} already done",
                         self.total).format(assignment=self.assignment, total=self.total, graded=self.graded,
                                            skipped=self.skipped)
        if self.worker_failures:
            first += _(", {n} worker failures").format(n=self.worker_failures)
        wall = _("{seconds:.1f} s wall").format(seconds=self.wall_seconds)
        if self.graded:
            wall += _(", {rate:.1f} submissions/min").format(rate=self.per_minute)
        out = [
            first,
            _("verdicts: {verdicts}").format(verdicts=verdicts),
            _("mean score {mean:.2f} / {max:g}").format(mean=self.mean_score, max=self.max_score),
            wall,
        ]
        out += [f"{_(OUTPUT_LABELS[name]) if name in OUTPUT_LABELS else name}: {path}"
                for name, path in self.outputs.items()]
        out += [_("note: {note}").format(note=n) for n in self.notes]
        return out + self._not_graded_lines()


def grade_batch_job(job: GradeJob, work_dir: Path) -> GradeResult:
    """The batch's GradeFn: the one job entry (orchestration/job.py) on the job's submission with the job's
    settings, sandboxed as a batch, its results.json and report written into `work_dir`, the roster's
    student."""
    from grader.orchestration.job import run_job

    request = GradeRequest(assignment=job.assignment, seed_mode=job.seed_mode, seed=job.seed, lang=job.lang)
    environment = GradeEnvironment(backend=job.backend, device=job.device, sandbox=sandbox_name(job.sandbox),
                                   build_cache=Path(job.build_cache) if job.build_cache else None, batch=True)
    return run_job(Path(job.submission), request, environment, GradeObserver(out_dir=work_dir),
                   student=Student(id=job.student_id, name=job.student_name or job.student_id)).result


@dataclass(frozen=True)
class BatchGrading:
    """How this machine grades a batch: the GradeFn its workers run (`entry`, "module:function", each
    GradeJob names it) and what the machine is asked around the jobs: set up and checked before any
    (prepare, preflight), the assignment's reference kernels graded on the batch's seed before anyone
    (reference_check.py), the sandboxes of killed workers swept. SANDBOXED is the real one; a test injects its
    own (tests/batch/entries.py: quick grading functions on no machine)."""

    entry: str = GRADE_ENTRY

    def prepare(self, environment: GradeEnvironment, log: Callable[[str], None]) -> Prepared:
        """The machine set up for the batch's sandbox (environment.prepare_environment; raises
        EnvironmentProblem naming the fix)."""
        from grader.orchestration.environment import prepare_environment

        return prepare_environment(environment, log=log, install=True)

    def preflight(self, environment: GradeEnvironment) -> None:
        """Fails the batch before it starts when the grader cannot work here at all (no sandbox image, no
        toolchain), instead of turning every student into an internal error. `environment`: the first
        slot's."""
        from grader.orchestration.environment import UnavailableError, resolve_environment

        try:
            resolve_environment(environment)
        except UnavailableError as exc:
            raise BatchError(f"cannot grade on this machine: {exc}") from exc

    def sweep(self) -> list[str]:
        """The sandbox containers of dead workers removed (sweep_dead_workers_containers)."""
        return sweep_dead_workers_containers()

    def check_references(self, store: ResultStore, spec_hash: str, root: Path, request: GradeRequest,
                         environment: GradeEnvironment) -> None:
        """BatchError (nobody graded) when a reference kernel fails on the batch's seed (_references_pass)."""
        _references_pass(store, spec_hash, root, request, environment)


SANDBOXED = BatchGrading()


# ------------------------------------------------------------------------------------------- settings


@dataclass(frozen=True)
class AssignmentInfo:
    spec_hash: str  # over every file of the assignment's folder: recalibrating thresholds regrades
    title: str
    points_possible: float
    columns: tuple[dict[str, float], dict[str, float]]  # (group -> points, stage -> points)
    lang: str | None = None  # the instructor's language for the feedback (assignment.toml `lang`)


def assignment_fingerprint(assignment: str) -> AssignmentInfo:
    """What the batch needs to know of an assignment's spec."""
    from grader.spec import SpecError, load_assignment
    from grader.spec.loader import assignment_dir

    try:
        folder = assignment_dir(assignment)
        spec = load_assignment(assignment)
    except SpecError as exc:
        raise BatchError(str(exc)) from exc
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        digest.update(path.relative_to(folder).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    groups = {g.name: g.points for g in spec.groups}
    stages = {s.name: s.points for s in spec.stages}
    return AssignmentInfo(digest.hexdigest()[:24], spec.title, sum(groups.values()) + sum(stages.values()),
                          (groups, stages), spec.lang)


def device_slots(backend: str, workers: int | None, device: str | None) -> list[Slot]:
    """One worker slot per device the backend hands out for a batch (Backend.batch_devices)."""
    try:
        return [Slot(i, d) for i, d in enumerate(get_backend(backend).batch_devices(workers, device))]
    except ValueError as exc:
        raise BatchError(str(exc)) from exc


def sweep_dead_workers_containers() -> list[str]:
    """Removes sandbox containers whose worker died (killed batch, timed-out worker); they would otherwise
    keep running to their own time limit. Containers of live graders are left alone."""
    try:
        from grader.sandbox.docker_runner import sweep_leftovers

        return sweep_leftovers(only_dead_owners=True)
    except Exception:  # noqa: BLE001 - no daemon, no containers to sweep; the preflight reports real problems
        return []


# ---------------------------------------------------------------------------------------------- batch


def _progress_bar(total: int):  # noqa: ANN202 - (rich Progress, task id)
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    bar = Progress(TextColumn("[bold]" + _("grading")), BarColumn(), MofNCompleteColumn(), TextColumn(_("elapsed")),
                   TimeElapsedColumn(), TextColumn(_("eta")), TimeRemainingColumn(), TextColumn("{task.description}"),
                   console=Console(stderr=True))
    return bar, bar.add_task("", total=total)


def _plan(store: ResultStore, subs: list[StudentSubmission], *, assignment: str, spec_hash: str, backend: str,
          device: str | None, sandbox: str, seed_mode: SeedMode, seed: str, cache: Path,
          entry: str, lang: str) -> dict[str, tuple[StudentSubmission, GradeJob]]:
    plan: dict[str, tuple[StudentSubmission, GradeJob]] = {}
    for sub in subs:
        parts = KeyParts(student_id=sub.student_id, assignment=assignment, content_hash=sub.content_hash,
                         spec_hash=spec_hash, grader_version=grader.__version__, backend=backend,
                         device=get_backend(backend).result_key_device(device), seed_digest=seed_digest(seed),
                         lang=lang)
        job = GradeJob(key=parts.key(), student_id=sub.student_id, student_name=sub.name,
                       submission=str(sub.path or sub.origin), assignment=assignment,
                       backend=backend, device=device, sandbox=sandbox, seed_mode=seed_mode,
                       batch_dir=str(store.root), build_cache=str(cache), seed=seed,
                       content_hash=sub.content_hash, entry=entry, lang=lang)
        plan[job.key] = (sub, job)
    return plan


def run_batch(submissions: Path, assignment: str, out_dir: Path, *, workers: int | None = None,
              backend: str = DEFAULT_BACKEND, sandbox: str = "auto", force: bool = False, seed: str | None = None,
              progress: bool = True, device: str | None = None, build_cache: Path | None = None,
              job_timeout: float = 1800.0, limits: IntakeLimits | None = None, plan_only: bool = False,
              image: str | None = None, grading: BatchGrading = SANDBOXED,
              similarity: SimilarityOptions | None = None, lang: str | None = None,
              reference_root: Path = REFERENCE_ROOT) -> BatchSummary:
    """Grades every submission under `submissions` for `assignment` into `out_dir` (see module doc).

    `plan_only`: grade nothing here; write DIR/plan.jsonl and a Kubernetes Indexed Job (DIR/k8s-job.json,
    container `image`) that grades the pending jobs on a cluster; rerun without it to collect and export.
    `similarity`: the code-similarity step's template folders and threshold (default: on, the assignment's).
    `lang`: the feedback's language (en, zh); None: the assignment's `lang`, then the locale.
    `grading`: the grading function the workers run and the machine's checks around them (BatchGrading);
    tests inject quick functions on no machine.
    `reference_root`: where the assignment's reference kernels are, graded on the batch's seed before anyone
    (reference_check.py).
    Raises BatchError when the batch cannot start; a broken submission or worker never raises, it
    becomes that student's result."""
    started = time.monotonic()
    if not submissions.exists():  # before the batch folder is made: a typo writes nothing
        raise BatchError(f"{submissions} does not exist")
    if sandbox in UNSANDBOXED:
        raise BatchError(f"batch grading runs student code only in the docker sandbox, not {sandbox!r}; "
                         "use --sandbox docker or auto")
    try:
        sandbox_name(sandbox)
    except ValueError as exc:
        raise BatchError(str(exc)) from exc
    if backend not in BACKENDS:
        raise BatchError(f"unknown backend {backend!r}")
    try:
        check_similarity_options(similarity)
    except ValueError as exc:
        raise BatchError(str(exc)) from exc
    info = assignment_fingerprint(assignment)
    try:
        lang = resolve_language(lang, info.lang)
    except ValueError as exc:
        raise BatchError(str(exc)) from exc
    with use_language(lang):  # the exports, dashboard and summary in the batch's language
        return _run_batch(submissions, assignment, out_dir, info, started, lang, workers=workers,
                          backend=backend, sandbox=sandbox, force=force, seed=seed, progress=progress,
                          device=device, build_cache=build_cache, job_timeout=job_timeout, limits=limits,
                          plan_only=plan_only, image=image, grading=grading, similarity=similarity,
                          reference_root=reference_root)


def _run_batch(submissions: Path, assignment: str, out_dir: Path, info: AssignmentInfo, started: float,
               lang: str, *, workers: int | None, backend: str, sandbox: str, force: bool, seed: str | None,
               progress: bool, device: str | None, build_cache: Path | None, job_timeout: float,
               limits: IntakeLimits | None, plan_only: bool, image: str | None, grading: BatchGrading,
               similarity: SimilarityOptions | None, reference_root: Path) -> BatchSummary:
    spec_hash, title, points_possible = info.spec_hash, info.title, info.points_possible
    store = ResultStore(out_dir.resolve())
    manifest = store.load_or_create_manifest(assignment, backend, seed)
    try:
        subs = collect_submissions(submissions, store.intake_dir, limits or IntakeLimits())
    except IntakeError as exc:
        raise BatchError(str(exc)) from exc
    slots = [] if plan_only else device_slots(backend, workers, device)
    environment = GradeEnvironment(backend=backend, device=slots[0].device if slots else device,
                                   sandbox=sandbox_name(sandbox), batch=True)
    if not plan_only:
        grading.preflight(environment)
        grading.sweep()
    # The same content-keyed cache as `grade submit` (a student's self-check build is reused); a cluster plan
    # keeps it in the batch folder, which its pods share.
    cache = (build_cache or (store.root / "build-cache" if plan_only else default_build_cache())).resolve()
    cache.mkdir(parents=True, exist_ok=True)
    if not plan_only:
        for leftover in store.runs_dir.glob("*.partial-*"):
            shutil.rmtree(leftover, ignore_errors=True)  # grading dirs of workers a killed batch left behind
    plan = _plan(store, subs, assignment=assignment, spec_hash=spec_hash, backend=backend, device=device,
                 sandbox=sandbox, seed_mode=seed_mode(manifest.seed_mode), seed=manifest.seed, cache=cache,
                 entry=grading.entry, lang=lang)

    to_grade: list[GradeJob] = []
    skipped = 0
    for key, (sub, job) in plan.items():
        if not force and store.is_done(key):
            skipped += 1
            store.log("skipped", key=key, student=sub.student_id)
        elif sub.problem is not None:
            store.save(key, failure_result(job, Verdict.UNGRADABLE_LAYOUT, sub.problem, max_score=points_possible))
            store.log("intake_problem", key=key, student=sub.student_id, problem=sub.problem)
        else:
            to_grade.append(job)
    store.log("batch_started", students=len(subs), to_grade=len(to_grade), skipped=skipped, pid=os.getpid(),
              slots=[asdict(s) for s in slots], force=force, plan_only=plan_only)

    # Entries of the class folder the batch could not take in: each a gradebook row with its reason, no score.
    not_graded = {sub.origin: sub.problem for sub, _job in plan.values() if sub.problem is not None}
    counts = {"graded": 0, "failures": 0}
    outputs: dict[str, str] = {}
    if plan_only:
        # The plan and the cluster's manifests only: no grade exists yet, so no export of one is written.
        for job in to_grade:
            make_self_contained(store, plan[job.key][0], job)
        outputs["plan"] = str(write_plan(store, to_grade))
        outputs["kubernetes"] = str(write_kubernetes_job(store, to_grade, backend=backend,
                                                         parallelism=workers or 4, image=image))
        return BatchSummary(out_dir=store.root, assignment=assignment, total=len(plan), graded=0,
                            skipped=skipped, worker_failures=0, verdicts={}, mean_score=0.0,
                            max_score=points_possible, wall_seconds=time.monotonic() - started, per_minute=0.0,
                            outputs=outputs, lang=lang, not_graded=not_graded, planned=len(to_grade))
    if to_grade:
        grading.check_references(store, spec_hash, reference_root, GradeRequest(
            assignment=assignment, seed_mode=seed_mode(manifest.seed_mode), seed=manifest.seed, lang=lang),
            replace(environment, build_cache=cache))
        try:
            _grade(store, to_grade, slots, counts, job_timeout=job_timeout, progress=progress)
        except KeyboardInterrupt:
            grading.sweep()  # the killed workers' containers, before the batch exits
            committed = sum(store.is_done(key) for key in plan)
            store.log("batch_interrupted", committed=committed, total=len(plan))
            raise BatchInterrupted(committed, len(plan), counts["graded"]) from None
        if counts["failures"]:
            grading.sweep()
    graded, failures = counts["graded"], counts["failures"]
    grading_seconds = time.monotonic() - started

    rows = []
    for key, (sub, job) in plan.items():
        result = store.load(key)
        if result is None:  # a cluster's plan this run collects, with the cluster not done with it yet
            not_graded[sub.origin] = _("not graded yet: the cluster has not committed its result")
            result = failure_result(job, Verdict.INTERNAL_ERROR, not_graded[sub.origin], max_score=points_possible)
        if not result.max_score:
            result.max_score = points_possible
        stored = store.result_path(key)
        rows.append(ClassRow(sub, result, store.run_dir(key) if store.run_dir(key).is_dir() else None,
                             stored_as=f"{key}@{stored.stat().st_mtime_ns}" if stored.exists() else "",
                             not_graded=not_graded.get(sub.origin, "")))
    notes = write_exports(rows, store.root, title or assignment, write_report, info.columns)
    similar, similarity_notes = similarity_step(rows, assignment, store.root, similarity)
    notes += similarity_notes
    if similar is not None:
        outputs["similarity"] = str(store.root / "similarity.csv")
        store.log("similarity", students=similar.students, pairs=len(similar.pairs), seconds=round(similar.seconds, 2))
    write_dashboard(rows, store.root / "dashboard.html", assignment_title=title or assignment,
                    backend=backend, seed_mode=manifest.seed_mode, similarity=similar)

    graded_rows = [r for r in rows if not r.not_graded]  # the others are listed apart, never averaged as zeros
    summary = BatchSummary(
        out_dir=store.root, assignment=assignment, total=len(rows), graded=graded, skipped=skipped,
        worker_failures=failures, verdicts=dict(Counter(str(r.result.verdict) for r in graded_rows)),
        mean_score=sum(r.result.score for r in graded_rows) / len(graded_rows) if graded_rows else 0.0,
        max_score=points_possible, wall_seconds=time.monotonic() - started,
        per_minute=60.0 * graded / grading_seconds if graded and grading_seconds > 0 else 0.0,
        outputs={**outputs, "gradebook": str(store.root / "gradebook.csv"), "canvas": str(store.root / "canvas.csv"),
                 "gradescope": str(store.root / "gradescope"), "reports": str(store.root / "reports"),
                 "dashboard": str(store.root / "dashboard.html")},
        notes=notes, lang=lang, not_graded=not_graded)
    atomic_write_text(store.root / "summary.json", json.dumps(asdict(summary), indent=2, default=str))
    store.log("batch_finished", graded=graded, skipped=skipped, failures=failures,
              seconds=round(summary.wall_seconds, 2))
    return summary


def _references_pass(store: ResultStore, spec_hash: str, root: Path, request: GradeRequest,
                     environment: GradeEnvironment) -> None:
    """Raises BatchError (nobody graded) when a reference kernel fails on the batch's seed (reference_check.py);
    a seed the references passed is not checked again in this batch directory."""
    check = guard_seed(request.assignment or "", request, environment, FileRecord(store.root), spec_hash=spec_hash,
                       device=environment.device, root=root)
    if check is None:
        return
    store.log("references_checked", references=check.references, failures=check.failures,
              seconds=round(check.seconds, 1))
    if check.failures:
        raise BatchError(guard_message(check, seed_digest(request.seed or ""), request.seed_mode, store.root))


def _grade(store: ResultStore, jobs: list[GradeJob], slots: list[Slot], counts: dict[str, int], *,
           job_timeout: float, progress: bool) -> None:
    """Runs `jobs` on the local pool with a live progress bar, counting into `counts` (graded, failures) as
    they finish. Ctrl-C stops the pool (its workers killed) and is re-raised."""
    bar, task = _progress_bar(len(jobs)) if progress else (None, None)
    pool = WorkerPool(store, slots, job_timeout=job_timeout)
    broken: list[str] = []

    def on_start(job: GradeJob, slot: Slot) -> None:
        store.log("started", key=job.key, student=job.student_id, slot=slot.index)

    def on_finish(job: GradeJob, result: GradeResult, seconds: float) -> None:
        counts["graded"] += 1
        counts["failures"] += result.verdict == Verdict.INTERNAL_ERROR
        store.log("done", key=job.key, student=job.student_id, verdict=str(result.verdict),
                  score=result.score, seconds=round(seconds, 2))
        if bar is not None and task is not None:
            bar.update(task, advance=1, description=f"{job.student_id}: {result.verdict}")
        # Circuit breaker: when the grader fails on every submission so far, the fault is ours (a dead
        # daemon, a broken image); stop instead of filling the class with internal errors.
        if counts["failures"] == counts["graded"] >= BREAKER_FAILURES and not broken:
            broken.append(result.message.strip().splitlines()[0] if result.message.strip() else "")
            pool.stop()

    if bar is not None:
        bar.start()
    try:
        pool.run(jobs, on_start=on_start, on_finish=on_finish)
    finally:
        if bar is not None:
            bar.stop()
    if broken:
        store.log("batch_stopped", reason=broken[0])
        raise BatchError(f"stopped: the first {counts['graded']} submissions all failed inside the grader "
                         f"({broken[0]}); fix that and rerun (internal errors are regraded)")
