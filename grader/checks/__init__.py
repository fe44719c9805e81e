"""Correctness checks (mlu-ops DIFF1/2/3, NaN/Inf positions, zero guard, unwritten), each with self-tests.

A check is one module of this package with NAME (what its findings and the spec's `[checks] run` call it),
KIND (the failure kind its findings carry, an advice registry key), ORDER, `run(actual, expected, ctx) ->
CheckFinding | None` and `self_test() -> list[str]`; compare.checks() finds them (DMOJ's checkers, by name).
"""

from grader.checks.compare import CheckOutcome, checks, compare


def self_test_all() -> dict[str, list[str]]:
    """Failures per check; all lists empty means every check still tells good from bad."""
    return {name: module.self_test() for name, module in checks().items()}


__all__ = ["CheckOutcome", "checks", "compare", "self_test_all"]
