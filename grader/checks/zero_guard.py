"""Guard against trivial outputs: an (almost) all-zero output never passes when the reference is not zero.

DIFF1/DIFF2 are relative, so a reference that is itself tiny (e.g. sigmoid of very negative inputs) would
let zeros through; this check closes that door (KernelBench #165).
"""

from __future__ import annotations

import numpy as np

from grader.checks.base import (
    PAIRWISE_PART,
    CheckContext,
    CheckFinding,
    Pair,
    SelfTest,
    pairwise_parts,
    pairwise_sums,
    reference_fact,
    run_self_tests,
)
from grader.i18n import _

NAME = "zero_guard"
KIND = "zero_output"
ORDER = 40


def check(actual: np.ndarray, expected: np.ndarray, ratio: float = 1e-3, floor: float = 0.0,
          pair: Pair | None = None) -> CheckFinding:
    """`floor`: reference magnitudes below it may legitimately come back as zero and do not count. `pair`: the
    same two arrays, known finite everywhere: the same sums, the reference's once per reference."""
    b = np.asarray(expected, dtype=np.float64)
    if pair is not None:
        def kept() -> tuple[np.ndarray | None, float, dict[int, int]]:
            flat_b = b.reshape(-1)
            counts = np.empty(flat_b.size, dtype=bool)  # np.abs(b) >= floor, a part at a time
            scratch = np.empty(min(PAIRWISE_PART, flat_b.size))
            for start in range(0, flat_b.size, PAIRWISE_PART):
                part = flat_b[start:start + PAIRWISE_PART]
                np.greater_equal(np.abs(part, out=scratch[:part.size]), floor, out=counts[start:start + part.size])
            if counts.all():
                return None, kept_mass(flat_b, None, {}), {}
            starts = kept_starts(counts)
            return counts, kept_mass(flat_b, counts, starts), starts

        counted, ref_mass, starts = reference_fact(b, ("zero_guard", floor), kept)
        out_mass = kept_mass(np.asarray(actual).reshape(-1), counted, starts)
    else:
        a = np.asarray(actual, dtype=np.float64)
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


def kept_starts(counted: np.ndarray) -> dict[int, int]:
    """For kept_mass: where in the whole array each part of the kept elements' pairwise sum starts (the kept
    element it starts with), and the array's size at the kept elements' count."""
    blocks = range(0, counted.size, PAIRWISE_PART)
    before = np.cumsum([0] + [np.count_nonzero(counted[i:i + PAIRWISE_PART]) for i in blocks])
    starts = {int(before[-1]): counted.size}
    if before[-1]:
        for p in pairwise_parts(int(before[-1])):
            block = int(np.searchsorted(before, p, side="right")) - 1
            at = block * PAIRWISE_PART
            starts[p] = at + int(np.flatnonzero(counted[at:at + PAIRWISE_PART])[p - before[block]])
    return starts


def kept_mass(flat: np.ndarray, counted: np.ndarray | None, starts: dict[int, int]) -> float:
    """np.abs(flat[counted]).sum() in float64 (`flat` any float dtype: counted None, all of it), bit for bit, read
    a part at a time: each part of the kept elements' pairwise sum (base.pairwise_sums) is exactly the kept
    elements of one slice of the whole array (compaction keeps their order), `starts` saying where each part's
    slice starts (and, at the kept elements' count, where the last one ends)."""
    n = flat.size if counted is None else max(starts, default=0)
    if n == 0:
        return 0.0
    scratch = np.empty(min(PAIRWISE_PART, n))

    def part(start: int, stop: int) -> np.ndarray:
        if counted is None:
            return np.array([np.abs(flat[start:stop], out=scratch[:stop - start]).sum()])
        lo, hi = starts[start], starts[stop]
        return np.array([np.abs(flat[lo:hi][counted[lo:hi]], out=scratch[:stop - start]).sum()])

    return float(pairwise_sums(n, part)[0])


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
