"""Correctness checks (mlu-ops DIFF1/2/3, NaN/Inf positions, zero guard, unwritten), each with self-tests.

Each check module has NAME (what its findings and the spec call it), KIND (the failure kind its findings carry,
an advice registry key), `check(...) -> CheckFinding` and `self_test() -> list[str]`.
"""

from types import ModuleType

from grader.checks import metrics, nan_inf, unwritten, zero_guard
from grader.checks.compare import CheckOutcome, compare

# In the order compare() runs them: a case's first failed finding is its kind.
CHECKS: dict[str, ModuleType] = {m.NAME: m for m in (unwritten, nan_inf, metrics, zero_guard)}


def self_test_all() -> dict[str, list[str]]:
    """Failures per check; all lists empty means every check still tells good from bad."""
    return {name: module.self_test() for name, module in CHECKS.items()}


__all__ = ["CHECKS", "CheckOutcome", "compare", "self_test_all"]
