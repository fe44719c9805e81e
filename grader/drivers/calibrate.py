"""`grade calibrate`: time the reference kernels on this backend/device and write the stage thresholds.

Each stage's reference is reference_kernels/<assignment>/<stage>/ (or one submission serving every stage,
e.g. the bundled example). A reference must pass every correctness case of its stage; a threshold from a wrong
kernel would be meaningless, so calibration stops with the reason instead.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from grader.orchestration.kinds import kind_named
from grader.orchestration.options import GradeEnvironment, GradeRequest
from grader.orchestration.pipeline import KINDS, grade_submission
from grader.results import GradeResult
from grader.scoring.thresholds import StageThreshold, compute_thresholds, load_thresholds, write_thresholds
from grader.spec import REFERENCE_ROOT, load_assignment


class CalibrationError(Exception):
    """A reference kernel failed or is missing; no thresholds were written."""


@dataclass
class Calibration:
    path: Path
    thresholds: dict[str, StageThreshold]
    results: list[GradeResult] = field(default_factory=list)


def calibrate(assignment: str, environment: GradeEnvironment, stages: tuple[str, ...] | None = None,
              seed: str | None = None, reference: Path | None = None, reference_root: Path = REFERENCE_ROOT,
              log: Callable[[str], None] = print, thresholds_root: Path | None = None) -> Calibration:
    """Times `stages` (None: all) of the references on the public `seed` in `environment`."""
    assignment = calibrated_assignment(assignment, log)
    spec = load_assignment(assignment)
    stage_names = list(stages or [s.name for s in spec.stages])
    plan: list[tuple[Path, list[str]]]
    if reference is not None:
        plan = [(reference, stage_names)]
    else:
        plan = []
        for stage in stage_names:
            folder = reference_root / spec.name / stage
            if not folder.is_dir():
                raise CalibrationError(f"no reference kernel for stage {stage}: {folder} does not exist")
            plan.append((folder, [stage]))
    times: dict[str, float] = {}
    sources: dict[str, str] = {}
    results = []
    device_label = ""
    for folder, folder_stages in plan:
        log(f"timing {', '.join(folder_stages)} with {folder}")
        request = GradeRequest(assignment=spec.name, stages=tuple(folder_stages), seed_mode="public",
                               seed=seed)
        result = grade_submission(folder, request, environment)
        results.append(result)
        device_label = result.device_profile
        for stage in result.stages:
            if not stage.correct or stage.timing is None:
                raise CalibrationError(f"reference {folder} is not usable for stage {stage.name}: "
                                       f"{stage.verdict.value}: {stage.message}\n{result.message}")
            unmet = [r.name for r in stage.requirements if not r.passed]
            if unmet:
                raise CalibrationError(f"reference {folder} does not meet stage {stage.name}'s requirements {unmet}")
            times[stage.name] = stage.timing.median_us
            sources[stage.name] = _display(folder)
            log(f"  {stage.name}: {stage.timing.median_us:.6g} us ({stage.timing.source}, {result.device_profile})")
        if not result.stages:
            raise CalibrationError(f"reference {folder} could not be graded: {result.verdict.value}: {result.message}")
    existing = load_thresholds(spec, environment.backend, device_label, thresholds_root)
    if existing is not None:
        # A partial calibration (--stages) keeps the other stages' references when their shape still holds.
        for name, old in existing.stages.items():
            if name not in times and name in {s.name for s in spec.stages} and old.perf_dims == spec.stage(name).perf.dims:
                times[name] = old.reference_us
    times = {s.name: times[s.name] for s in spec.stages if s.name in times}
    thresholds = compute_thresholds(spec, times)
    source = results[0].stages[0].timing.source if results and results[0].stages and results[0].stages[0].timing else ""
    path = write_thresholds(spec, environment.backend, device_label, thresholds, source, notes=sources,
                            root=thresholds_root)
    return Calibration(path=path, thresholds=thresholds, results=results)


def calibrated_assignment(assignment: str, log: Callable[[str], None] = print) -> str:
    """The assignment whose thresholds `assignment` is scored with: itself, or the one its kind calibrates it
    as (kinds.Grader.calibrated_as: a lab-programs assignment's base, carried to their dims)."""
    kind = kind_named(KINDS, assignment)
    base = kind.calibrated_as(assignment) if kind is not None else assignment
    if base != assignment:
        log(f"{assignment} is scored with {base}'s thresholds (at its own dims): calibrating {base}")
    return base


def _display(folder: Path) -> str:
    """The reference's path as the thresholds file records it: relative to the checkout when inside it."""
    root = REFERENCE_ROOT.parent
    resolved = folder.resolve()
    return str(resolved.relative_to(root)) if resolved.is_relative_to(root) else str(folder)
