"""Concrete cases: a spec's symbolic cases turned into shapes, dtypes, seeds and input arrays."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from grader.spec.models import AssignmentSpec, Distribution
from grader.spec.seeds import SeedPlan

PERF_GROUP = "performance"


@dataclass(frozen=True)
class ConcreteCase:
    name: str
    group: str
    dtype: str
    shapes: dict[str, tuple[int, ...]]
    output_shape: tuple[int, ...]
    seed: int
    distributions: dict[str, Distribution] = field(default_factory=dict)

    def make_inputs(self) -> dict[str, np.ndarray]:
        """Inputs in call order, drawn from this case's own seed (one generator per input)."""
        seq = np.random.SeedSequence(self.seed)
        out: dict[str, np.ndarray] = {}
        for (name, shape), child in zip(self.shapes.items(), seq.spawn(len(self.shapes)), strict=True):
            out[name] = draw(self.distributions[name], shape, np.dtype(self.dtype), np.random.default_rng(child))
        return out

    def reference_inputs(self, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
        # The reference sees exactly what the student saw (after rounding to the case dtype), in float64.
        return [inputs[name].astype(np.float64) for name in self.shapes]


def draw(dist: Distribution, shape: tuple[int, ...], dtype: np.dtype, rng: np.random.Generator) -> np.ndarray:
    if dist.kind == "uniform":
        values = rng.uniform(dist.low, dist.high, size=shape)
    else:
        values = rng.normal(dist.mean, dist.std, size=shape)
    if dist.special_values and dist.special_fraction > 0 and values.size:
        count = max(1, int(values.size * dist.special_fraction))
        where = rng.choice(values.size, size=min(count, values.size), replace=False)
        values.reshape(-1)[where] = rng.choice(np.asarray(dist.special_values, dtype=np.float64), size=where.size)
    return values.astype(dtype)


def _shapes(spec: AssignmentSpec, dims: dict[str, int]) -> tuple[dict[str, tuple[int, ...]], tuple[int, ...]]:
    shapes = {inp.name: tuple(dims[d] for d in inp.dims) for inp in spec.inputs}
    return shapes, tuple(dims[d] for d in spec.output_dims)


def correctness_cases(spec: AssignmentSpec, seeds: SeedPlan, groups: set[str] | None = None) -> list[ConcreteCase]:
    """Every (case, dtype) of the given groups (all groups when None), in spec order."""
    cases: list[ConcreteCase] = []
    for case in spec.cases:
        if groups is not None and case.group not in groups:
            continue
        shapes, out_shape = _shapes(spec, case.dims)
        dists = {inp.name: case.distribution.get(inp.name, inp.distribution) for inp in spec.inputs}
        for dtype in case.dtypes:
            name = case.name if len(case.dtypes) == 1 else f"{case.name}_{dtype}"
            cases.append(ConcreteCase(name=name, group=case.group, dtype=dtype, shapes=shapes,
                                      output_shape=out_shape, distributions=dists,
                                      seed=seeds.derive(spec.name, "case", case.name, dtype)))
    return cases


def perf_case(spec: AssignmentSpec, stage: str, seeds: SeedPlan, repeat: int = 0) -> ConcreteCase:
    """The stage's timed shape; `repeat` gives fresh inputs for every timed call."""
    perf = spec.stage(stage).perf
    shapes, out_shape = _shapes(spec, perf.dims)
    dists = {inp.name: inp.distribution for inp in spec.inputs}
    return ConcreteCase(name=f"perf_{stage}" + (f"_{repeat}" if repeat else ""), group=PERF_GROUP,
                        dtype=perf.dtype, shapes=shapes, output_shape=out_shape, distributions=dists,
                        seed=seeds.derive(spec.name, "perf", stage, str(repeat)))
