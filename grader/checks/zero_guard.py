"""Guard against trivial outputs: an (almost) all-zero output never passes when the reference is not zero.

DIFF1/DIFF2 are relative, so a reference that is itself tiny (e.g. sigmoid of very negative inputs) would
let zeros through; this check closes that door (KernelBench #165).
"""

from __future__ import annotations

import numpy as np

from grader.checks.base import CheckContext, CheckFinding, Pair, SelfTest, reference_fact, run_self_tests
from grader.i18n import _

NAME = "zero_guard"
KIND = "zero_output"
ORDER = 40


def check(actual: np.ndarray, expected: np.ndarray, ratio: float = 1e-3, floor: float = 0.0,
          pair: Pair | None = None) -> CheckFinding:
    """`floor`: reference magnitudes below it may legitimately come back as zero and do not count. `pair`: the
    same two arrays, known finite everywhere: the same sums, the reference's once per reference."""
    a, b = np.asarray(actual, dtype=np.float64), np.asarray(expected, dtype=np.float64)
    if pair is not None:
        def kept() -> tuple[np.ndarray | None, float]:
            magnitude = pair.abs_b.reshape(b.shape)  # np.abs(b), as below
            counts = magnitude >= floor
            if counts.all():
                return None, float(magnitude.sum())
            return counts, float(magnitude[counts].sum())

        counted, ref_mass = reference_fact(b, ("zero_guard", floor), kept)
        out_mass = float(np.abs(a if counted is None else a[counted]).sum())
    else:
        finite = np.isfinite(a) & np.isfinite(b) & (np.abs(b) >= floor)
        if not finite.all():
            a, b = a[finite], b[finite]
        ref_mass = float(np.abs(b).sum())
        out_mass = float(np.abs(a).sum())
    if ref_mass == 0.0 or out_mass >= ratio * ref_mass:
        return CheckFinding(NAME, True)
    return CheckFinding(NAME, False,
                        _("the output is (almost) all zeros (sum|out| = {out:.3g}, reference {ref:.3g})").format(
                            out=out_mass, ref=ref_mass), kind=KIND)


def run(actual: np.ndarray, expected: np.ndarray, ctx: CheckContext) -> CheckFinding | None:
    policy = ctx.policy
    if not policy.zero_guard:
        return None
    return check(actual, expected, policy.zero_guard_ratio, policy.zero_guard_floor,
                 ctx.pair if ctx.all_finite() else None)


SELF_TESTS = [
    SelfTest("zeros vs tiny reference", lambda: (np.zeros(100), np.full(100, 1e-7)), False),
    SelfTest("zeros vs zeros", lambda: (np.zeros(8), np.zeros(8)), True),
    SelfTest("small but real output", lambda: (np.full(100, 1e-7), np.full(100, 1.1e-7)), True),
]
# With a floor (sigmoid's saturation), zeros where the reference is below it pass, zeros elsewhere still fail.
FLOORED_SELF_TESTS = [
    SelfTest("saturated sigmoid flushed to zero", lambda: (np.zeros(1), np.array([6.05e-39])), True),
    SelfTest("zeros where sigmoid is not saturated", lambda: (np.zeros(4), np.array([1e-9, 0.2, 0.5, 0.9])), False),
]


def self_test() -> list[str]:
    return (run_self_tests(check, SELF_TESTS)
            + run_self_tests(lambda a, b: check(a, b, floor=5e-4), FLOORED_SELF_TESTS))
