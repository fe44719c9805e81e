"""grade_programs(): a folder of standalone lab programs, each file one stage (assignments/<name>/programs.toml).

The flow beside pipeline._Grading (which grades an extension); the programs' own pieces, their spec and the
reading of their captures, sit below in grader.programs, so orchestration imports programs and never the reverse.

Built and run inside the runner (bang_harness.programs), then replayed from their device journals in a sandbox of
their own (the run's process holds no key; DESIGN.md "Threat model"), each launch of the kernel on the host's twin
inputs (grader.programs.captures.twin_plan); on the host: each program's launch records as the replay signed them
(grader.programs.captures), the twin inputs the host draws (the captured ones must be them) -> float64 left @ right
-> compared with the captured output under the base assignment's tolerances and checks; the modelled time of the kernel's launches against the
stage's threshold, at the stage's shape only; the base stage's structural requirements on the launch record.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from bang_emu.wram_layout import matmul_rhs_rows
from bang_harness.protocol import KEY_FILE, PROGRAM_TWIN_FILE, program_key

from grader import __version__
from grader.backends import get_backend
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
from grader.orchestration.environment import UnavailableError, resolve_backend, resolve_runner
from grader.orchestration.options import GradeOptions
from grader.orchestration.replay import JOURNAL_MAX_BYTES, copy_untrusted, write_trace_key
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
from grader.programs.spec import ProgramsSpec, ProgramStage, load_programs
from grader.results import BuildInfo, GradeResult, StageResult, Timing, TraceSummary, Verdict, Versions, worst
from grader.sandbox.base import Limits, Mounts, Phase, Runner, SandboxError
from grader.sandbox.capped import UntrustedFileError, read_json_capped
from grader.spec import REFERENCES, AssignmentSpec, SeedPlan

BUILD_SECONDS = 900.0
RUN_SECONDS = 3600.0


def grade_programs(folder: Path, options: GradeOptions) -> GradeResult:
    spec, base = load_programs(options.assignment or "matmul_programs")
    started = datetime.now(UTC)
    result = GradeResult(assignment=spec.name, assignment_title=spec.title, submission_path=str(folder.resolve()),
                         submission_hash="", backend=options.backend, device_profile=options.device or "",
                         time_source="modelled", sandbox=options.sandbox, verdict=Verdict.PASSED, score=0.0,
                         max_score=0.0, seeds=SeedPlan.create("public", None).record(), versions=Versions(grader=__version__),
                         started_at=started, finished_at=started, layout="programs")
    stems = {p.stem: spec.stage_for(p.stem) for p in sorted(folder.glob("*.mlu"))}
    stems = {stem: stage for stem, stage in stems.items() if stage is not None}
    result.max_score = len(spec.stages) * (spec.correct_points + spec.speed_points)
    if not stems:
        prefixes = ", ".join(s.prefix + "*.mlu" for s in spec.stages)
        return _finish(result, Verdict.UNGRADABLE_LAYOUT, _("no lab program found: expected files {files}").format(files=prefixes))
    if not get_backend(options.backend).kernel_trace:  # captures and signed launch records: the emulator's
        return _finish(result, Verdict.ENVIRONMENT_ERROR, _("lab programs are graded on the emu backend only"))
    try:
        backend = resolve_backend(options)
        runner = resolve_runner(options, backend)
    except UnavailableError as exc:
        return _finish(result, Verdict.ENVIRONMENT_ERROR, str(exc))
    result.device_profile = backend.device
    result.sandbox = getattr(runner, "name", type(runner).__name__)
    work = Path(tempfile.mkdtemp(prefix="bang-programs-"))
    try:
        built, log = _build(runner, folder, work, dict(backend.env))
        result.build = BuildInfo(ok=bool(built), toolchain="cncc-emu", compiler_output=log)
        _run(runner, folder, work, dict(backend.env))
        seeds = draw_twin_seeds(built)
        master, replayed = _replay(runner, folder, work, dict(backend.env), built, twin_plan(spec, seeds))
        for stem, stage in stems.items():
            if stem not in built:
                result.stages.append(_stage(spec, base, stage, stem, Verdict.COMPILE_ERROR,
                                            _("{file} did not compile (see the compiler output)").format(file=f"{stem}.mlu"),
                                            points=0.0, correct=False))
                continue
            # what the replay did, never what the program's own process recorded
            launches = read_launches(replayed / stem / "trace.jsonl", program_key(master, stem))
            facts = HostFacts(backend.device, device_profile(backend.device),
                              KernelSymbols.from_library(work / "build" / "programs" / stem))
            result.stages.append(_judge(spec, base, stage, stem, launches, replayed / stem, facts, seeds[stem]))
    except SandboxError as exc:
        return _finish(result, Verdict.INTERNAL_ERROR, _("the sandbox failed (not your fault): {error}").format(error=exc))
    finally:
        if not os.environ.get("BANG_GRADER_KEEP_WORK"):
            shutil.rmtree(work, ignore_errors=True)
    result.score = round(sum(s.points for s in result.stages), 4)
    return _finish(result, worst([s.verdict for s in result.stages]), "")


def _finish(result: GradeResult, verdict: Verdict, message: str) -> GradeResult:
    result.verdict = verdict
    result.message = message
    result.finished_at = datetime.now(UTC)
    return result


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


def _run(runner: Runner, folder: Path, work: Path, env: dict[str, str]) -> None:
    """Each program once, journaled, with no key (bang_harness.programs.run_programs)."""
    runner.run(Phase.RUN, ["python3", "-m", "bang_harness", "run-programs"],
               Mounts(submission=folder.resolve(), build=work / "build", io=work / "io"),
               Limits(wall_seconds=RUN_SECONDS), env=env)


def _replay(runner: Runner, folder: Path, work: Path, env: dict[str, str], built: set[str],
            twin: dict[str, Any]) -> tuple[bytes, Path]:
    """The programs' journals replayed in a sandbox of their own (orchestration/replay.py says why), the graded
    kernel's inputs replaced by the twin: the key the replay signs with, and the folder of its per-program traces
    and captures."""
    io = work / "replay"
    (io / "journals").mkdir(parents=True)
    (io / "outputs").mkdir()
    run_outputs = work / "io" / "outputs"
    for stem in built:
        copy_untrusted(run_outputs / stem / "journal", io / "journals" / f"{stem}.journal", run_outputs,
                       JOURNAL_MAX_BYTES)
    key = write_trace_key(io)
    (io / PROGRAM_TWIN_FILE).write_text(json.dumps(twin), encoding="utf-8")
    try:
        runner.run(Phase.RUN, ["python3", "-m", "bang_harness", "replay-programs"],
                   Mounts(submission=folder.resolve(), build=work / "build", io=io),
                   Limits(wall_seconds=RUN_SECONDS), env=env)
    finally:
        (io / KEY_FILE).unlink(missing_ok=True)
        (io / PROGRAM_TWIN_FILE).unlink(missing_ok=True)
    return key, io / "outputs"


def _stage(spec: ProgramsSpec, base: AssignmentSpec, stage: ProgramStage, stem: str, verdict: Verdict,
           message: str, **fields: Any) -> StageResult:
    title = next(s.title for s in base.stages if s.name == stage.stage)
    return StageResult(name=stage.stage, title=f"{stem}.mlu: {title}", entry=spec.kernel, verdict=verdict,
                       message=message, points_possible=spec.correct_points + spec.speed_points,
                       threshold_us=stage.threshold_us,
                       perf_shape={"left": [stage.shape["m"], stage.shape["n"]],
                                   "right": [stage.shape["n"], stage.shape["k"]]}, **fields)


def _judge(spec: ProgramsSpec, base: AssignmentSpec, stage: ProgramStage, stem: str, launches: Launches,
           folder: Path, facts: HostFacts, twin_seed: int) -> StageResult:
    ours = [r for r in launches.records if base_name(str(r.get("kernel") or "")) == spec.kernel]
    times = [float(r.get("modelled_time_us", 0.0)) for r in ours]
    median = float(np.median(times)) if times else 0.0
    timing = Timing(source="modelled", median_us=median, min_us=min(times), max_us=max(times), spread=0.0,
                    repeats=len(times)) if times and not launches.findings else None

    def fail(verdict: Verdict, message: str) -> StageResult:
        return _stage(spec, base, stage, stem, verdict, message, points=0.0, correct=False, timing=timing)

    if launches.findings:
        return fail(Verdict.INTEGRITY, "; ".join(launches.findings))
    findings = []  # the launch records against the host's device table, the program's symbols, the time floor
    for r in launches.records:
        checks = CallIntegrity("", facts, None, 4)
        checks.launch(r)
        findings += checks.all_findings()
    if findings:
        return fail(Verdict.INTEGRITY, "; ".join(findings[:4]))
    if not ours:
        return fail(Verdict.NOT_USING_KERNEL, _("no verified launch of {kernel} (the program's own output is not "
                      "believed)").format(kernel=spec.kernel))
    errors = [d for r in ours for d in r.get("diagnostics") or [] if d.get("severity") == "error"]
    if errors:
        return fail(Verdict.RUNTIME_ERROR, f"{errors[0].get('kind')}: {errors[0].get('message')}")
    messages, shapes = [], set()
    try:
        for r in ours:
            verdict, message, shape = _check_output(spec, base, r, folder, twin_seed)
            if verdict is not None:
                return fail(verdict, message)
            messages.append(message)
            shapes.add(shape)
    except (CaptureError, UntrustedFileError, KeyError, IndexError, TypeError, ValueError) as exc:
        return fail(Verdict.INTEGRITY, _("captured arguments do not add up: {error}").format(error=exc))
    first = ours[0]
    trace = TraceSummary(kernel=spec.kernel, dim=tuple(first.get("dim", (1, 1, 1))), func_type=first.get("func_type",
                         "BLOCK"), device_profile=facts.device, modelled_time_us=median,
                         onchip_peak_bytes=first.get("onchip_peak_bytes") or {},
                         builtin_counts=first.get("builtin_counts") or {}, cores_used=int(first.get("cores_used", 1)),
                         launches=len(ours))
    requirements = next(s.requirements for s in base.stages if s.name == stage.stage)
    reqs = check_requirements(requirements, trace, True)
    want = (stage.shape["m"], stage.shape["n"], stage.shape["k"])
    points = spec.correct_points
    verdict = Verdict.PASSED
    if shapes != {want}:
        verdict = Verdict.TOO_SLOW
        messages.append(_("ran at m, n, k = {shapes}, not the lab's {want}: the threshold applies there only").format(
            shapes=sorted(shapes), want=want))
    elif not all(q.passed for q in reqs):
        verdict = Verdict.TOO_SLOW
        messages.append(_("structural requirement not met:") + " " + "; ".join(q.detail for q in reqs if not q.passed))
    elif median > stage.threshold_us:
        verdict = Verdict.TOO_SLOW
        messages.append(_("modelled {time:.3f} us > threshold {threshold:.3f} us ({device})").format(
            time=median, threshold=stage.threshold_us, device=facts.device))
    else:
        points += spec.speed_points
    return _stage(spec, base, stage, stem, verdict, "; ".join(messages), points=points, correct=True, timing=timing,
                  requirements=reqs, trace=trace)


def _check_output(spec: ProgramsSpec, base: AssignmentSpec, record: dict[str, Any], folder: Path,
                  twin_seed: int) -> tuple[Verdict | None, str, tuple[int, int, int]]:
    """One launch: (failing verdict or None, message, (m, n, k)) from its captured arguments, its inputs the twin."""
    a = spec.args
    m, n, k = (int_arg(record, a[x]) for x in ("m", "n", "k"))
    if any(d <= 0 for d in (m, n, k)):
        raise CaptureError(f"shape m={m}, n={n}, k={k} is empty")
    out_arg = pointer_arg(record, a["result"])
    itemsize = np.dtype(CAPTURE_DTYPES.get(out_arg.get("dtype"), np.float32)).itemsize
    if out_arg.get("written", 0) < m * k * itemsize:
        return Verdict.WRONG_ANSWER, _("the kernel wrote {written} of the {size} bytes of result[{m}][{k}]").format(
            written=out_arg.get("written", 0), size=m * k * itemsize, m=m, k=k), (m, n, k)
    rows_l, left, right = twin_inputs(folder, record, spec, twin_seed, m, n, k)
    rows_r, result = load_rows(folder, record, a["result"], "out", m, k)
    rows = np.intersect1d(rows_l, rows_r)  # a capture over the segment cap holds head and tail rows only
    expected = left[np.searchsorted(rows_l, rows)].astype(np.float64) @ right.astype(np.float64)
    actual = result[np.searchsorted(rows_r, rows)]
    outcome = compare(actual, expected, str(actual.dtype), base.tolerances[str(actual.dtype)], base.checks)
    covered = "" if len(rows) == m else " " + _("(rows captured and checked: {rows} of {m})").format(rows=len(rows), m=m)
    if not outcome.passed:
        message = _("captured output vs float64 left @ right: {message}").format(message=outcome.message) + covered
        # The lab's untransposed right matrix in WRAM: recognised, so the message names the cause, not a number.
        if k <= 64 or k % 64 == 0:
            wram = right.astype(np.float64).reshape(-1).reshape(k, n)[matmul_rhs_rows(k)]
            as_rows = left[np.searchsorted(rows_l, rows)].astype(np.float64) @ wram.T
            if compare(actual, as_rows, str(actual.dtype), base.tolerances[str(actual.dtype)], base.checks).passed:
                message += ". " + _("The output is right read from WRAM as it lies in memory: __bang_matmul takes "
                                    "its right-hand matrix in WRAM as N rows of K (column-major, Cambricon's BANG C "
                                    "guide), and for more than 64 columns column j in row (j % 64) * (N / 64) + "
                                    "j / 64 (the order __bang_reshape_filter writes), so transpose right and "
                                    "arrange its rows so before it goes to WRAM. The lab's own check (inputs in "
                                    "[1, 1.1], 10% tolerance) cannot tell layouts apart, which is why the program "
                                    "prints PASSED")
        return Verdict.WRONG_ANSWER, message, (m, n, k)
    # right values the kernel did not compute (e.g. DMA'd from a buffer host code filled) are not its own
    work = WorkTotals()
    work.add(record, itemsize)
    shortfalls = work.shortfalls(REFERENCES[base.reference].required({"a": (m, n), "b": (n, k)}))
    if shortfalls:
        return Verdict.INTEGRITY, _("right output, but") + " " + "; ".join(shortfalls), (m, n, k)
    return None, _("captured output matches float64 left @ right (DIFF1 {diff1:.2e})").format(
        diff1=outcome.metrics.get("diff1", 0)) + covered, (m, n, k)
