"""Strict NaN/Inf positions (mlu-ops compareNanInfStrict): every NaN, +Inf and -Inf must sit where the reference has it."""

from __future__ import annotations

import numpy as np

from grader.checks.base import CheckContext, CheckFinding, SelfTest, run_self_tests
from grader.i18n import ngettext

NAME = "nan_inf"
KIND = "nan_output"
ORDER = 20


def kind_mismatch(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Where a and b are not the same kind of value (finite, NaN, +Inf, -Inf): two isfinite passes, the kinds
    compared only where both sides are non-finite (rare: the reference's NaN/Inf cases)."""
    finite_a, finite_b = np.isfinite(a), np.isfinite(b)
    bad = finite_a != finite_b
    both = ~(finite_a | finite_b)
    if both.any():
        bad[both] = ~((a[both] == b[both]) | (np.isnan(a[both]) & np.isnan(b[both])))
    return bad


def check(actual: np.ndarray, expected: np.ndarray, mode: str = "strict", exclude: np.ndarray | None = None) -> CheckFinding:
    a, b = np.asarray(actual, dtype=np.float64), np.asarray(expected, dtype=np.float64)
    if mode == "loose":
        # Loose: only non-finite values where the reference is finite count (the other direction is forgiven).
        bad = ~np.isfinite(a) & np.isfinite(b)
    else:
        bad = kind_mismatch(a, b)
    if exclude is not None:
        bad &= ~exclude  # already blamed on another check (unwritten elements)
    count = int(bad.sum())
    message = ngettext("{count} element with NaN/Inf where the reference differs",
                       "{count} elements with NaN/Inf where the reference differs", count).format(count=count) \
        if count else ""
    return CheckFinding(NAME, count == 0, message, {"nan_inf_mismatch": float(count)}, bad, "" if count == 0 else KIND)


def run(actual: np.ndarray, expected: np.ndarray, ctx: CheckContext) -> CheckFinding:
    if ctx.all_finite():  # no NaN or Inf on either side: every element is the same kind
        return CheckFinding(NAME, True, "", {"nan_inf_mismatch": 0.0})
    return check(actual, expected, ctx.policy.nan_inf, exclude=ctx.blamed)


def _with(value: float, in_actual: bool) -> tuple[np.ndarray, np.ndarray]:
    a, b = np.linspace(0, 1, 50), np.linspace(0, 1, 50)
    (a if in_actual else b)[7] = value
    return a, b


SELF_TESTS = [
    SelfTest("matching inf", lambda: (np.array([1.0, np.inf, -np.inf, np.nan]), np.array([1.0, np.inf, -np.inf, np.nan])), True),
    SelfTest("NaN produced", lambda: _with(np.nan, True), False),
    SelfTest("NaN swallowed", lambda: _with(np.nan, False), False),
    SelfTest("inf sign flipped", lambda: (np.array([np.inf]), np.array([-np.inf])), False),
]


def self_test() -> list[str]:
    return run_self_tests(check, SELF_TESTS)
