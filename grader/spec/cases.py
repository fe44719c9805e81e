"""Concrete cases: a spec's symbolic cases turned into shapes, dtypes, seeds and input arrays."""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from grader.spec import array_cache
from grader.spec.models import AssignmentSpec, Distribution
from grader.spec.references import BLOCK, REFERENCES
from grader.spec.seeds import SeedPlan

PERF_GROUP = "performance"


class _Drawn:
    """Inputs and references computed last, up to a byte budget: the executor draws a round's cases to write
    them and the scorer draws them again for the reference (it never reads them back from /io, which the
    sandbox can write); a batch worker judges every student on the same cases (seeds derive from the spec)."""

    def __init__(self, budget_bytes: int) -> None:
        self.budget = budget_bytes
        self.entries: OrderedDict[tuple, dict[str, np.ndarray]] = OrderedDict()
        self.size = 0
        # Threads share it (orchestration/execute.py: references drawn beside a round, a replay read beside the
        # next): a key is computed once, by the first thread that asks; the others wait for it.
        self._lock = threading.Lock()
        self._computing: dict[tuple, threading.Event] = {}

    def kept(self, key: tuple, compute: Callable[[], dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
        """The arrays kept under key, computed (and kept) first if they are not."""
        while True:
            with self._lock:
                found = self.entries.get(key)
                if found is not None:
                    self.entries.move_to_end(key)
                    return found
                underway = self._computing.get(key)
                if underway is None:
                    self._computing[key] = threading.Event()
                    break
            underway.wait()  # then kept (or evicted already, or its computing failed: computed here then)
        try:
            found = compute()
            self.put(key, found)
        finally:
            with self._lock:
                self._computing.pop(key).set()
        return found

    def put(self, key: tuple, arrays: dict[str, np.ndarray]) -> None:
        for array in arrays.values():
            array.setflags(write=False)  # shared by every later caller: nobody may change them
        with self._lock:
            self.size += _nbytes(arrays) - _nbytes(self.entries.pop(key, {}))
            self.entries[key] = arrays
            while self.size > self.budget and len(self.entries) > 1:
                self.size -= _nbytes(self.entries.popitem(last=False)[1])


def _nbytes(arrays: dict[str, np.ndarray]) -> int:
    return sum(a.nbytes for a in arrays.values())


# A whole grading's inputs and float64 references (18 cases, three 4M-element perf inputs) are ~250 MB.
_DRAWN = _Drawn(384 << 20)


@dataclass(frozen=True)
class ConcreteCase:
    name: str
    group: str
    dtype: str
    shapes: dict[str, tuple[int, ...]]
    output_shape: tuple[int, ...]
    seed: int
    distributions: dict[str, Distribution] = field(default_factory=dict)
    # Drawn from the fixed public seed plan (SeedPlan.fixed): its inputs and references may be kept on disk between
    # processes (spec/array_cache.py). Never a replay twin's (replay_twin) nor a secret seed's.
    on_disk: bool = False

    @cached_property
    def _inputs_key(self) -> tuple:
        # cached: repr() of the pydantic distributions was most of a small case's cost in a seed sweep
        return (self.seed, self.dtype, tuple(self.shapes.items()),
                tuple(sorted((k, repr(v)) for k, v in self.distributions.items())))

    def make_inputs(self) -> dict[str, np.ndarray]:
        """Inputs in call order, drawn from this case's own seed (one generator per input); read-only arrays,
        kept for the round's reference (_Drawn), which draws the same case again."""
        def drawn() -> dict[str, np.ndarray]:
            children = np.random.SeedSequence(self.seed).spawn(len(self.shapes))
            return {name: draw(self.distributions[name], shape, np.dtype(self.dtype), np.random.default_rng(child))
                    for (name, shape), child in zip(self.shapes.items(), children, strict=True)}

        return dict(self._kept(self._inputs_key, drawn))

    def replay_twin(self, salt: bytes) -> ConcreteCase:
        """The same case with other inputs, from a seed derived from this one and a `salt` only the host holds:
        what the grader's replay of the kernels computes on (orchestration/replay.py). The run never sees them,
        and cannot compute them either: with the public seed a case's own seed is known to anyone, so a twin
        derived from it alone would let a run upload the twin's answer for its kernel to copy (issue 26)."""
        digest = hmac.new(salt, b"bang-grader-replay:%d" % self.seed, hashlib.sha256).digest()
        return dataclasses.replace(self, seed=int.from_bytes(digest[:8], "little"), on_disk=False)

    def expected(self, reference: str) -> np.ndarray:
        """The named reference's float64 output for this case's inputs: read-only, kept beside them."""
        def computed() -> dict[str, np.ndarray]:
            return {"out": REFERENCES[reference].compute(*self.reference_inputs(self.make_inputs()))}

        return self._kept(("expected", reference, *self._inputs_key), computed)["out"]

    def _kept(self, key: tuple, compute: Callable[[], dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
        """compute()'s arrays kept in this process (_DRAWN) and, for a public case, on disk (array_cache)."""
        folder = array_cache.default_array_cache() if self.on_disk else None
        if folder is None:
            return _DRAWN.kept(key, compute)

        def from_disk() -> dict[str, np.ndarray]:
            found = array_cache.load(folder, key)
            if found is None:
                found = compute()
                array_cache.store(folder, key, found)
            return found

        return _DRAWN.kept(key, from_disk)

    def reference_inputs(self, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
        # The reference sees exactly what the student saw (after rounding to the case dtype); it computes in
        # float64 and casts them itself (without a whole float64 copy where it works block by block).
        return [inputs[name] for name in self.shapes]


def draw(dist: Distribution, shape: tuple[int, ...], dtype: np.dtype, rng: np.random.Generator) -> np.ndarray:
    """Values of `dist` rounded to `dtype`. Drawn block by block into the result (a generator's stream does not
    depend on how its draws are split): the same values as one whole float64 draw cast at the end, without its
    float64 temporary (tests/test_references.py holds the whole-array formula as the oracle)."""
    values = np.empty(shape, dtype=dtype)
    flat = values.reshape(-1)
    for start in range(0, flat.size, BLOCK):
        size = min(BLOCK, flat.size - start)
        if dist.kind == "uniform":
            flat[start:start + size] = rng.uniform(dist.low, dist.high, size=size)
        else:
            flat[start:start + size] = rng.normal(dist.mean, dist.std, size=size)
    if dist.special_values and dist.special_fraction > 0 and values.size:
        count = max(1, int(values.size * dist.special_fraction))
        where = rng.choice(values.size, size=min(count, values.size), replace=False)
        flat[where] = rng.choice(np.asarray(dist.special_values, dtype=np.float64), size=where.size)
    return values


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
                                      output_shape=out_shape, distributions=dists, on_disk=seeds.fixed,
                                      seed=seeds.derive(spec.name, "case", case.name, dtype)))
    return cases


def perf_case(spec: AssignmentSpec, stage: str, seeds: SeedPlan, repeat: int = 0) -> ConcreteCase:
    """The stage's timed shape; `repeat` gives fresh inputs for every timed call."""
    perf = spec.stage(stage).perf
    shapes, out_shape = _shapes(spec, perf.dims)
    dists = {inp.name: inp.distribution for inp in spec.inputs}
    return ConcreteCase(name=f"perf_{stage}" + (f"_{repeat}" if repeat else ""), group=PERF_GROUP,
                        dtype=perf.dtype, shapes=shapes, output_shape=out_shape, distributions=dists,
                        seed=seeds.derive(spec.name, "perf", stage, str(repeat)), on_disk=seeds.fixed)
