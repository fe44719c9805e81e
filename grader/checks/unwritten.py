"""Unwritten outputs: the output is NaN-poisoned before each call, so NaN where the reference is finite means
the kernel never wrote that element (a dropped tail, a task that skipped its rows) -- or computed a NaN."""

from __future__ import annotations

import numpy as np

from grader.checks.base import CheckContext, CheckFinding, SelfTest, run_self_tests
from grader.i18n import ngettext

NAME = "unwritten"
KIND = "unwritten_output"
ORDER = 10  # first: an element never written is blamed as that, not again as NaN or as wrong


def mask(actual: np.ndarray, expected: np.ndarray) -> np.ndarray:
    return np.isnan(actual) & np.isfinite(expected)


def check(actual: np.ndarray, expected: np.ndarray) -> CheckFinding:
    # asarray: no copies of the float64 arrays compare.py passes (outputs are up to millions of elements)
    bad = mask(np.asarray(actual, dtype=np.float64), np.asarray(expected, dtype=np.float64))
    count = int(bad.sum())
    fraction = count / bad.size if bad.size else 0.0
    message = ""
    if count:
        first = [int(i) for i in np.unravel_index(int(np.flatnonzero(bad)[0]), bad.shape)]
        message = ngettext("{count} of {total} output elements was never written ({fraction:.1%}; it still "
                           "holds the NaN poison), first at index {first}",
                           "{count} of {total} output elements were never written ({fraction:.1%}; still hold the "
                           "NaN poison), first at index {first}", count).format(count=count, total=bad.size,
                                                                                fraction=fraction, first=first)
    return CheckFinding(NAME, count == 0, message, {"unwritten_fraction": fraction}, bad, "" if count == 0 else KIND)


def run(actual: np.ndarray, expected: np.ndarray, ctx: CheckContext) -> CheckFinding | None:
    if not ctx.policy.unwritten:
        return None
    if ctx.all_finite():  # no NaN anywhere: nothing was left unwritten
        return CheckFinding(NAME, True, "", {"unwritten_fraction": 0.0})
    return check(actual, expected)


def _partly(n_unwritten: int) -> tuple[np.ndarray, np.ndarray]:
    b = np.linspace(-1, 1, 130)
    a = b.copy()
    if n_unwritten:
        a[-n_unwritten:] = np.nan
    return a, b


SELF_TESTS = [
    SelfTest("fully written", lambda: _partly(0), True),
    SelfTest("last element unwritten", lambda: _partly(1), False),
    SelfTest("tail of 66 unwritten", lambda: _partly(66), False),
    SelfTest("NaN expected", lambda: (np.array([np.nan, 1.0]), np.array([np.nan, 1.0])), True),
]


def self_test() -> list[str]:
    return run_self_tests(check, SELF_TESTS)
