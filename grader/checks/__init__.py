"""Correctness strategies (mlu-ops DIFF1/2/3, NaN/Inf positions, zero guard, unwritten), each with self-tests."""

from grader.checks import metrics, nan_inf, unwritten, zero_guard
from grader.checks.compare import CheckOutcome, compare

STRATEGIES = {"accuracy": metrics, "nan_inf": nan_inf, "unwritten": unwritten, "zero_guard": zero_guard}


def self_test_all() -> dict[str, list[str]]:
    """Failures per strategy; all lists empty means every check still tells good from bad."""
    return {name: module.self_test() for name, module in STRATEGIES.items()}


__all__ = ["STRATEGIES", "CheckOutcome", "compare", "self_test_all"]
