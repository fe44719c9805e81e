"""mlu-ops accuracy metrics DIFF1/DIFF2/DIFF3/DIFF3_2, on the elements where both sides are finite."""

from __future__ import annotations

import numpy as np

from grader.checks.base import CheckFinding, SelfTest, eps_threshold, run_self_tests

EPSILON = 1e-9


def point_errors(actual: np.ndarray, expected: np.ndarray, dtype: str) -> np.ndarray:
    """DIFF3's per-element error: absolute where |b| < th, relative elsewhere."""
    err = np.abs(actual - expected)
    scale = np.abs(expected)
    small = scale < eps_threshold(dtype)
    scale += EPSILON
    scale[small] = 1.0  # absolute error there
    return np.divide(err, scale, out=err)


def compute(actual: np.ndarray, expected: np.ndarray, dtype: str) -> dict[str, float]:
    # asarray: no copy when compare.py already made them float64 (outputs are up to millions of elements)
    a = np.asarray(actual, dtype=np.float64).reshape(-1)
    b = np.asarray(expected, dtype=np.float64).reshape(-1)
    both = np.isfinite(a) & np.isfinite(b)
    if not both.all():
        a, b = a[both], b[both]
    if a.size == 0:
        return {"diff1": 0.0, "diff2": 0.0, "diff3": 0.0, "diff3_2": 0.0}
    diff = a - b
    return {
        "diff1": float(np.abs(diff).sum() / (np.abs(b).sum() + EPSILON)),
        "diff2": float(np.sqrt((diff**2).sum() / ((b**2).sum() + EPSILON))),
        "diff3": float(point_errors(a, b, dtype).max()),
        "diff3_2": float(np.abs(diff).max()),
    }


def check(actual: np.ndarray, expected: np.ndarray, dtype: str = "float32",
          limits: dict[str, float | None] | None = None) -> CheckFinding:
    limits = limits if limits is not None else {"diff1": 1e-5, "diff2": 1e-5}
    values = compute(actual, expected, dtype)
    over = [f"{k.upper()} {values[k]:.3g} > {v:g}" for k, v in limits.items() if v is not None and values[k] > v]
    return CheckFinding("accuracy", not over, "; ".join(over), values)


def _noisy(rel: float) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    b = rng.uniform(-1, 1, 4096)
    return b * (1 + rng.uniform(-rel, rel, b.size)), b


def _tail_dropped() -> tuple[np.ndarray, np.ndarray]:
    b = np.random.default_rng(2).uniform(-1, 1, 1000)
    a = b.copy()
    a[-3:] = 0.0
    return a, b


SELF_TESTS = [
    SelfTest("exact", lambda: (np.arange(10.0), np.arange(10.0)), True),
    SelfTest("fp32 rounding", lambda: (np.float32(np.linspace(-3, 3, 999)).astype(np.float64), np.linspace(-3, 3, 999)), True),
    SelfTest("1e-3 relative noise", lambda: _noisy(1e-3), False),
    SelfTest("tail of 3 zeroed", _tail_dropped, False),
    SelfTest("all zeros", lambda: (np.zeros(64), np.ones(64)), False),
]


def self_test() -> list[str]:
    return run_self_tests(lambda a, b: check(a, b), SELF_TESTS)
