"""mlu-ops accuracy metrics DIFF1/DIFF2/DIFF3/DIFF3_2, on the elements where both sides are finite.

mlu-ops (docs/MLU-OPS-Accuracy-Acceptance-Standard.md; test/mlu_op_gtest/pb_gtest/include/evaluator.h) divides
DIFF1 and DIFF2 by sum|b| (+1e-9) and splits DIFF3 at a threshold th: relative error where |b| > th, absolute
below. Its DIFF1 of a case whose reference is all tiny divides by almost nothing: sigmoid(-20) = 2e-9, which a
saturating __bang_active_sigmoid correctly returns as 0, scores DIFF1 0.67. Here the same split holds for DIFF1 and
DIFF2: each |b| in their denominators counts as at least `tiny` (the tolerance's, default mlu-ops' th for the
dtype), so an element whose reference is below it is judged on its absolute error (|e-b| <= diff1 * tiny when it
stands alone), and no sum is ever smaller than (elements) x tiny. Elements above `tiny` keep mlu-ops' definition.
"""

from __future__ import annotations

import numpy as np

from grader.checks.base import (
    PAIRWISE_PART,
    CheckContext,
    CheckFinding,
    Pair,
    SelfTest,
    eps_threshold,
    pairwise_sums,
    reference_fact,
    run_self_tests,
)

EPSILON = 1e-9


NAME = "accuracy"
KIND = "wrong_values"
ORDER = 30  # always run: its metrics are the case's DIFF1/2/3
PRECISION_SHARE = 2e-2  # every blamed element within 2% of the reference: a precision problem, not a logic one


def point_errors(actual: np.ndarray, expected: np.ndarray, dtype: str) -> np.ndarray:
    """DIFF3's per-element error: absolute where |b| < th, relative elsewhere."""
    err = np.abs(actual - expected)
    scale = np.abs(expected)
    small = scale < eps_threshold(dtype)
    scale += EPSILON
    scale[small] = 1.0  # absolute error there
    return np.divide(err, scale, out=err)


def scaled_errors(actual: np.ndarray, expected: np.ndarray, dtype: str, tiny: float | None = None) -> np.ndarray:
    """Each element's share of DIFF1: |e-b| / max(|b|, tiny), relative above tiny, absolute (over tiny) below."""
    return np.abs(actual - expected) / np.maximum(np.abs(expected), eps_threshold(dtype) if tiny is None else tiny)


def compute(actual: np.ndarray, expected: np.ndarray, dtype: str, tiny: float | None = None) -> dict[str, float]:
    """`tiny`: the floor of each |b| in DIFF1/DIFF2's denominators (None: mlu-ops' th for the dtype)."""
    # asarray: no copy when compare.py already made them float64 (outputs are up to millions of elements)
    a = np.asarray(actual, dtype=np.float64).reshape(-1)
    b = np.asarray(expected, dtype=np.float64).reshape(-1)
    both = np.isfinite(a) & np.isfinite(b)
    if not both.all():
        a, b = a[both], b[both]
    if a.size == 0:
        return {"diff1": 0.0, "diff2": 0.0, "diff3": 0.0, "diff3_2": 0.0}
    diff = a - b
    scale = np.maximum(np.abs(b), eps_threshold(dtype) if tiny is None else tiny)  # as in scaled_errors
    return {
        "diff1": float(np.abs(diff).sum() / scale.sum()),
        "diff2": float(np.sqrt((diff**2).sum() / (scale**2).sum())),
        "diff3": float(point_errors(a, b, dtype).max()),
        "diff3_2": float(np.abs(diff).max()),
    }


def compute_finite(pair: Pair, dtype: str, tiny: float | None = None) -> dict[str, float]:
    """compute() of two arrays finite everywhere, bit for bit: the same sums over the same values, with what
    depends on the reference alone (its scale's sums) computed once per reference, and the rest in one pass a
    cache-sized part at a time (base.pairwise_sums: each sum is np.sum's, part by part) -- an output of millions
    of elements is read once instead of a dozen times."""
    b = pair.b
    if b.size == 0:
        return {"diff1": 0.0, "diff2": 0.0, "diff3": 0.0, "diff3_2": 0.0}
    floor = eps_threshold(dtype) if tiny is None else tiny
    th = eps_threshold(dtype)

    a, flat_b = pair.a.reshape(-1), b.reshape(-1)
    ad_part, points_part = np.empty(min(PAIRWISE_PART, b.size)), np.empty(min(PAIRWISE_PART, b.size))

    def scale_part(start: int, stop: int) -> np.ndarray:
        """max(|b|, floor) and its square, summed."""
        scale = np.abs(flat_b[start:stop], out=points_part[:stop - start])
        np.maximum(scale, floor, out=scale)
        return np.array([scale.sum(), np.square(scale, out=scale).sum()])

    scale_sum, scale_sq_sum = reference_fact(b, ("scale_sums", floor), lambda: pairwise_sums(b.size, scale_part))
    maxima = [0.0, 0.0]  # max point error (DIFF3), max |a-b| (DIFF3_2): no order to keep

    def part(start: int, stop: int) -> np.ndarray:
        n = stop - start
        ad = np.subtract(a[start:stop], flat_b[start:stop], out=ad_part[:n])
        np.abs(ad, out=ad)
        # point_errors(): |a-b| / (|b| + EPSILON), and |a-b| itself (over 1.0) where |b| < th
        points = np.abs(flat_b[start:stop], out=points_part[:n])
        small = points < th
        np.add(points, EPSILON, out=points)
        np.divide(ad, points, out=points)
        np.copyto(points, ad, where=small)
        maxima[0], maxima[1] = max(maxima[0], float(points.max())), max(maxima[1], float(ad.max()))
        return np.array([ad.sum(), np.square(ad, out=points).sum()])  # (a-b)**2 == |a-b|**2 exactly

    ad_sum, ad_sq_sum = pairwise_sums(b.size, part)
    return {"diff1": float(ad_sum / scale_sum), "diff2": float(np.sqrt(ad_sq_sum / scale_sq_sum)),
            "diff3": maxima[0], "diff3_2": maxima[1]}


def check(actual: np.ndarray, expected: np.ndarray, dtype: str = "float32",
          limits: dict[str, float | None] | None = None, tiny: float | None = None,
          pair: Pair | None = None) -> CheckFinding:
    """`pair`: the same two arrays, known finite everywhere (compute_finite)."""
    limits = limits if limits is not None else {"diff1": 1e-5, "diff2": 1e-5}
    values = compute_finite(pair, dtype, tiny) if pair is not None else compute(actual, expected, dtype, tiny)
    over = [f"{k.upper()} {values[k]:.3g} > {v:g}" for k, v in limits.items() if v is not None and values[k] > v]
    return CheckFinding(NAME, not over, "; ".join(over), values, kind="" if not over else KIND)


def run(actual: np.ndarray, expected: np.ndarray, ctx: CheckContext) -> CheckFinding:
    t = ctx.tolerance
    return check(actual, expected, ctx.dtype, {"diff1": t.diff1, "diff2": t.diff2, "diff3": t.diff3, "diff3_2": t.diff3_2},
                 t.tiny, ctx.pair if ctx.all_finite() else None)


def failure_kind(a: np.ndarray, b: np.ndarray, bad: np.ndarray) -> str:
    """What an accuracy failure is, from every element the check blames (`bad`), not from a few listed ones:
    zero_output (each written one is 0 where the reference is not), precision (all within 2% of the reference)
    or wrong_values. With no single element clearly wrong (the sums are over), every differing element counts."""
    written = (bad if bad.any() else a != b) & np.isfinite(a)
    if not written.any():
        return KIND
    got, want = a[written], b[written]
    if not got.any() and want.any():
        return "zero_output"
    if float((np.abs(got - want) / np.maximum(np.abs(want), 1e-6)).max()) < PRECISION_SHARE:
        return "precision"
    return KIND


def _noisy(rel: float) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    b = rng.uniform(-1, 1, 4096)
    return b * (1 + rng.uniform(-rel, rel, b.size)), b


def _tail_dropped() -> tuple[np.ndarray, np.ndarray]:
    b = np.random.default_rng(2).uniform(-1, 1, 1000)
    a = b.copy()
    a[-3:] = 0.0
    return a, b


def _saturated(x: float) -> tuple[np.ndarray, np.ndarray]:
    # One element the way __bang_active_sigmoid returns it below -7.75: 0 for sigmoid(x).
    return np.zeros(1), np.array([1.0 / (1.0 + np.exp(-x))])


SELF_TESTS = [
    SelfTest("exact", lambda: (np.arange(10.0), np.arange(10.0)), True),
    SelfTest("fp32 rounding", lambda: (np.float32(np.linspace(-3, 3, 999)).astype(np.float64), np.linspace(-3, 3, 999)), True),
    SelfTest("1e-3 relative noise", lambda: _noisy(1e-3), False),
    SelfTest("tail of 3 zeroed", _tail_dropped, False),
    SelfTest("all zeros", lambda: (np.zeros(64), np.ones(64)), False),
]


# Sigmoid's bounds (diff1 1e-2, tiny 0.05): a lone saturated element passes at any depth, zeros where the
# reference is not tiny still fail.
SIGMOID_SELF_TESTS = [
    SelfTest("lone element saturated at -20", lambda: _saturated(-20.0), True),
    SelfTest("lone element saturated at -7.75", lambda: _saturated(-7.75), True),
    SelfTest("lone element zeroed at -5", lambda: _saturated(-5.0), False),
    SelfTest("lone element zeroed at 0", lambda: _saturated(0.0), False),
]


def self_test() -> list[str]:
    return (run_self_tests(lambda a, b: check(a, b), SELF_TESTS)
            + run_self_tests(lambda a, b: check(a, b, limits={"diff1": 1e-2, "diff2": 1e-2}, tiny=0.05),
                             SIGMOID_SELF_TESTS))
