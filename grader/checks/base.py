"""What every check strategy returns, and the self-test harness they share (DMOJ-style self-tests)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

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


@dataclass(frozen=True)
class CheckContext:
    """What compare() gives every check's `run` besides the two float64 arrays."""

    dtype: str
    tolerance: Tolerance
    policy: CheckPolicy
    blamed: np.ndarray | None = None  # elements an earlier check already blamed: not blamed twice


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


def eps_threshold(dtype: str) -> float:
    # mlu-ops: below this |reference| a point error is absolute, above it relative.
    return MLU_OPS_TH.get(dtype, MLU_OPS_TH["float32"])
