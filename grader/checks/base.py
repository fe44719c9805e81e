"""What every check strategy returns, and the self-test harness they share (DMOJ-style self-tests)."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import TypeVar

import numpy as np

from grader.spec.models import MLU_OPS_TH, CheckPolicy, Tolerance


@dataclass
class CheckFinding:
    """One check's verdict on one output. `check` is the check's NAME, `kind` (when it failed) the failure kind
    the advice registry (grader/reporting/advice.py) names: each check says what it found, nobody guesses it
    back from numbers."""

    check: str
    passed: bool
    message: str = ""
    metrics: dict[str, float] = field(default_factory=dict)
    bad_mask: np.ndarray | None = None  # elements this check blames, for the mismatch listing
    kind: str = ""


T = TypeVar("T")

# Facts of a reference array alone (its finiteness, sums, the few elements below a threshold), per array object:
# every output compared with a reference (the run's, the replay's, a batch's every student's) pays only its own
# passes. Kept only for arrays nobody can write (spec/cases._Drawn keeps references read-only); dropped with the
# array (weakref.finalize runs before its id can be reused).
_FACTS: dict[int, dict[tuple, object]] = {}
_FACTS_LOCK = threading.Lock()


def _read_only(array: np.ndarray) -> bool:
    """Nobody can change its values: neither it nor anything it views is writeable."""
    base: object = array
    while isinstance(base, np.ndarray):
        if base.flags.writeable:
            return False
        base = base.base
    return True


def reference_fact(b: np.ndarray, key: tuple, compute: Callable[[], T]) -> T:
    """compute() of reference `b`, kept with `b` under `key` when `b` is read-only (computed afresh otherwise)."""
    if not _read_only(b):
        return compute()
    with _FACTS_LOCK:
        facts = _FACTS.get(id(b))
        if facts is None:
            facts = _FACTS[id(b)] = {}
            weakref.finalize(b, _FACTS.pop, id(b), None)
        elif key in facts:
            return facts[key]  # type: ignore[return-value]
    value = compute()
    with _FACTS_LOCK:
        facts[key] = value
    return value


class Pair:
    """An output and its float64 reference as compare() hands them to every check (same shape), with what several
    checks need computed once: whether both are finite everywhere (then the NaN/Inf checks have nothing to find
    and the metrics need no masking). The output may be in its own float dtype (compare() passes it so when both
    are finite): every float16/float32 value is exactly a float64, and the checks' passes over both, and over the
    reference alone for its facts, read them in float64 a cache-sized part at a time (pairwise_sums)."""

    def __init__(self, a: np.ndarray, b: np.ndarray) -> None:
        self.a, self.b = a, b

    @cached_property
    def finite(self) -> bool:
        # A sum is finite only if every term is (NaN propagates, an infinity stays or meets its opposite in a
        # NaN); a finite sum of finite terms can still overflow, which only sends this down the general path.
        return bool(np.isfinite(np.sum(self.a, dtype=np.float64))) and reference_fact(
            self.b, ("finite",), lambda: bool(np.isfinite(self.b).all()))


@dataclass(frozen=True)
class CheckContext:
    """What compare() gives every check's `run` besides the two arrays: the output in float64 -- or, when
    all_finite(), as the kernel returned it (float16/float32: the same values), which the checks read through
    `pair` -- and the float64 reference."""

    dtype: str
    tolerance: Tolerance
    policy: CheckPolicy
    blamed: np.ndarray | None = None  # elements an earlier check already blamed: not blamed twice
    pair: Pair | None = None  # the same two arrays with what checks share (None: a check called on its own)

    def all_finite(self) -> bool:
        """Both arrays finite everywhere (known only through `pair`)."""
        return self.pair is not None and self.pair.finite


@dataclass(frozen=True)
class SelfTest:
    """A crafted (actual, expected) pair with the verdict the check must reach on it."""

    name: str
    make: Callable[[], tuple[np.ndarray, np.ndarray]]
    must_pass: bool


def run_self_tests(check: Callable[[np.ndarray, np.ndarray], CheckFinding], tests: list[SelfTest]) -> list[str]:
    """Names of the self-tests the check got wrong (empty when it behaves)."""
    failures = []
    for test in tests:
        actual, expected = test.make()
        if check(actual, expected).passed != test.must_pass:
            failures.append(f"{test.name}: expected {'pass' if test.must_pass else 'fail'}")
    return failures


# numpy sums a float array pairwise (pairwise_sum in its loops): longer than 128 elements, it splits at n2 = n/2
# rounded down to a multiple of 8 and sums each part the same way. So np.sum of a slice that is one part of that
# tree is that part's sum, bit for bit, and the parts added as the tree adds them are np.sum of the whole
# (tests/test_checks.py holds it to numpy for every size kind). pairwise_sums walks the tree down to parts of
# at most this many elements, which a few float64 scratch buffers of that length keep in the CPU's cache.
PAIRWISE_PART = 1 << 15


def _first_half(n: int) -> int:
    """How many of n elements numpy's pairwise summation sums in its first half."""
    return n // 2 - n // 2 % 8


def pairwise_sums(n: int, part: Callable[[int, int], np.ndarray], lo: int = 0) -> np.ndarray:
    """Sums over elements [lo, lo + n), bit for bit the np.sum of each summand's whole array: `part(start, stop)`
    returns, for one part of numpy's pairwise tree, the vector of np.sum of each summand over [start, stop)
    (several sums share one pass over the data, a part at a time)."""
    if n <= PAIRWISE_PART:
        return part(lo, lo + n)
    half = _first_half(n)
    return pairwise_sums(half, part, lo) + pairwise_sums(n - half, part, lo + half)


def pairwise_parts(n: int, lo: int = 0) -> list[int]:
    """Where pairwise_sums' parts of [lo, lo + n) start, in order."""
    if n <= PAIRWISE_PART:
        return [lo]
    half = _first_half(n)
    return pairwise_parts(half, lo) + pairwise_parts(n - half, lo + half)


def eps_threshold(dtype: str) -> float:
    # mlu-ops: below this |reference| a point error is absolute, above it relative.
    return MLU_OPS_TH.get(dtype, MLU_OPS_TH["float32"])
