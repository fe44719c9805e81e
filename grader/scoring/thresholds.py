"""Per-stage time thresholds per backend and device profile: assignments/<name>/thresholds/<backend>-<device>.toml.

`grade calibrate` writes them from the reference kernels' times. Rule (documented in the README):
threshold = reference x slack (stage slack from the spec), but never above the geometric mean of this stage's
reference and the previous stage's when both are timed on the same shape -- so the previous stage's technique
cannot pass on speed alone -- and never below reference x 1.05 (MIN_MARGIN).
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from grader import __version__
from grader.atomic_file import atomic_write_text
from grader.spec.loader import assignment_dir
from grader.spec.models import AssignmentSpec
from grader.spec.references import REFERENCES

MIN_MARGIN = 1.05


@dataclass(frozen=True)
class StageThreshold:
    reference_us: float
    threshold_us: float
    perf_dims: dict[str, int]


@dataclass(frozen=True)
class ThresholdTable:
    backend: str
    device: str
    stages: dict[str, StageThreshold]
    path: Path | None = None


def thresholds_path(spec: AssignmentSpec, backend: str, device: str, root: Path | None = None) -> Path:
    folder = assignment_dir(spec.name) if root is None else root / spec.name
    return folder / "thresholds" / f"{backend}-{device}.toml"


def load_thresholds(spec: AssignmentSpec, backend: str, device: str, root: Path | None = None) -> ThresholdTable | None:
    path = thresholds_path(spec, backend, device, root)
    if not path.is_file():
        return None
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    stages = {name: StageThreshold(float(v["reference_us"]), float(v["threshold_us"]), dict(v.get("perf_dims", {})))
              for name, v in data.get("stages", {}).items()}
    return ThresholdTable(backend=backend, device=device, stages=stages, path=path)


def compute_thresholds(spec: AssignmentSpec, reference_us: dict[str, float]) -> dict[str, StageThreshold]:
    out: dict[str, StageThreshold] = {}
    previous: tuple[dict[str, int], float] | None = None
    for stage in spec.stages:
        ref = reference_us.get(stage.name)
        if ref is None:
            previous = None
            continue
        threshold = ref * stage.slack
        if previous is not None and previous[0] == stage.perf.dims and previous[1] > ref:
            threshold = min(threshold, math.sqrt(previous[1] * ref))
        # Never tighter than MIN_MARGIN: the reference itself must pass on every run (the emulator's core
        # interleaving moves multi-core times by a few percent). Where a stage buys almost no speed, its
        # structural requirements, not the clock, tell it from the previous one.
        threshold = max(threshold, ref * min(MIN_MARGIN, stage.slack))
        out[stage.name] = StageThreshold(reference_us=ref, threshold_us=threshold, perf_dims=dict(stage.perf.dims))
        previous = (dict(stage.perf.dims), ref)
    return out


def write_thresholds(spec: AssignmentSpec, backend: str, device: str, stages: dict[str, StageThreshold],
                     time_source: str, notes: dict[str, str] | None = None, root: Path | None = None) -> Path:
    path = thresholds_path(spec, backend, device, root)
    lines = [
        f"# Written by `grade calibrate` ({datetime.now(UTC):%Y-%m-%d %H:%M} UTC, grader {__version__}).",
        "# threshold_us = reference_us x stage slack, capped at the geometric mean with the previous stage's",
        "# reference when both use the same perf shape, and at least reference_us x 1.05.",
        "# Re-run `grade calibrate` after changing a perf shape or the cost model.",
        f'backend = "{backend}"',
        f'device = "{device}"',
        f'time_source = "{time_source}"',
        "",
    ]
    for name, t in stages.items():
        dims = ", ".join(f"{k} = {v}" for k, v in t.perf_dims.items())
        lines += [f"[stages.{name}]", f"reference_us = {t.reference_us:.10g}", f"threshold_us = {t.threshold_us:.10g}",
                  f"perf_dims = {{ {dims} }}"]
        if notes and name in notes:
            lines.append(f'reference = "{notes[name]}"')
        lines.append("")
    return atomic_write_text(path, "\n".join(lines))


def at_shape(spec: AssignmentSpec, threshold: StageThreshold, dims: dict[str, int]) -> StageThreshold:
    """A calibrated stage threshold carried to another shape of the same stage in proportion to its work (flops;
    the stages run at a larger shape are throughput-bound): a lab program timed at the lab's 524288 rows is held
    to the 16384-row calibration x 32, per backend and device, from the one table `grade calibrate` writes."""
    if dims == threshold.perf_dims:
        return threshold
    ratio = _flops(spec, dims) / _flops(spec, threshold.perf_dims)
    return StageThreshold(reference_us=threshold.reference_us * ratio, threshold_us=threshold.threshold_us * ratio,
                          perf_dims=dict(dims))


def _flops(spec: AssignmentSpec, dims: dict[str, int]) -> int:
    shapes = {i.name: tuple(dims[d] for d in i.dims) for i in spec.inputs}
    return REFERENCES[spec.reference].work(shapes, 4).flops
