"""Runs every check strategy on one output and folds them into one decision with a student-readable message."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from grader.checks import metrics, nan_inf, unwritten, zero_guard
from grader.checks.base import CheckFinding
from grader.i18n import _
from grader.results import CaseFinding, Mismatch
from grader.spec.models import CheckPolicy, Tolerance

SHAPE_CHECK = "shape"  # compare's own first check: the output's shape and dtype are the reference's


@dataclass
class CheckOutcome:
    passed: bool
    message: str
    metrics: dict[str, float] = field(default_factory=dict)
    unwritten_fraction: float = 0.0
    nan_inf_mismatch: int = 0
    mismatches: list[Mismatch] = field(default_factory=list)
    findings: list[CaseFinding] = field(default_factory=list)  # the failed checks, in the order they ran


def compare(actual: np.ndarray, expected: np.ndarray, dtype: str, tolerance: Tolerance,
            policy: CheckPolicy) -> CheckOutcome:
    if actual.shape != tuple(expected.shape):
        return _refused(_("output shape {actual} but expected {expected}").format(
            actual=list(actual.shape), expected=list(expected.shape)))
    if actual.dtype.kind != "f":
        return _refused(_("output dtype {actual} but expected {expected}").format(
            actual=actual.dtype, expected=dtype))
    if str(actual.dtype) != dtype:
        return _refused(_("output dtype {actual} but expected {expected} (same as the inputs)").format(
            actual=actual.dtype, expected=dtype))
    a = actual.astype(np.float64)
    b = np.asarray(expected, dtype=np.float64)  # the reference is float64 already (and read-only: kept, shared)
    findings: list[CheckFinding] = []
    unwritten_finding = unwritten.check(a, b) if policy.unwritten else None
    if unwritten_finding:
        findings.append(unwritten_finding)
    exclude = unwritten_finding.bad_mask if unwritten_finding else None
    findings.append(nan_inf.check(a, b, policy.nan_inf, exclude=exclude))
    limits = {"diff1": tolerance.diff1, "diff2": tolerance.diff2, "diff3": tolerance.diff3, "diff3_2": tolerance.diff3_2}
    accuracy = metrics.check(a, b, dtype, limits, tolerance.tiny)
    findings.append(accuracy)
    if policy.zero_guard:
        findings.append(zero_guard.check(a, b, policy.zero_guard_ratio, policy.zero_guard_floor))
    by_name = {f.check: f for f in findings}
    failed = [f for f in findings if not f.passed]
    outcome = CheckOutcome(
        passed=not failed,
        message="; ".join(f.message for f in failed),
        metrics=accuracy.metrics,
        unwritten_fraction=by_name[unwritten.NAME].metrics["unwritten_fraction"] if unwritten_finding else 0.0,
        nan_inf_mismatch=int(by_name[nan_inf.NAME].metrics["nan_inf_mismatch"]),
    )
    if failed:
        bad, errors = _blamed(a, b, dtype, tolerance)
        outcome.mismatches = first_mismatches(a, b, bad, errors, policy.max_mismatches)
        if not accuracy.passed:
            accuracy.kind = metrics.failure_kind(a, b, bad)
        outcome.findings = [CaseFinding(check=f.check, kind=f.kind, message=f.message) for f in failed]
    return outcome


def _refused(message: str) -> CheckOutcome:
    """An output of the wrong shape or dtype: no check can read it, so its values are wrong as a whole."""
    return CheckOutcome(False, message, findings=[CaseFinding(check=SHAPE_CHECK, kind=metrics.KIND, message=message)])


def _blamed(a: np.ndarray, b: np.ndarray, dtype: str, tolerance: Tolerance) -> tuple[np.ndarray, np.ndarray]:
    """(the elements that are clearly wrong, every element's scaled error)."""
    nonfinite = nan_inf.kind_mismatch(a, b)
    both = np.isfinite(a) & np.isfinite(b)
    errors = np.zeros(a.shape)
    # ranked as DIFF1 weighs them: a saturated element under `tiny` is not the worst of a case
    errors[both] = metrics.scaled_errors(a[both], b[both], dtype, tolerance.tiny)
    per_element = tolerance.diff3 or 10 * max(tolerance.diff1 or 0.0, tolerance.diff2 or 0.0) or 1e-3
    if tolerance.diff3_2 is not None:
        # An absolute ceiling is stricter than a point-error bound: list what breaks it.
        bad = nonfinite | (both & (np.abs(a - b) > tolerance.diff3_2))
    else:
        bad = nonfinite | (both & (errors > per_element))
    return bad, errors


def first_mismatches(a: np.ndarray, b: np.ndarray, bad: np.ndarray, errors: np.ndarray, limit: int) -> list[Mismatch]:
    """The first elements (in index order) that are clearly wrong; the worst ones when no single element is."""
    flat = np.flatnonzero(bad)[:limit]
    if flat.size == 0:
        flat = np.sort(np.argsort(errors.reshape(-1))[::-1][:limit])
    out = []
    for i in flat:
        index = [int(v) for v in np.unravel_index(int(i), a.shape)]
        actual = float(a.reshape(-1)[i])
        out.append(Mismatch(index=index, expected=_json_float(float(b.reshape(-1)[i])),
                            actual=None if np.isnan(actual) and np.isfinite(b.reshape(-1)[i]) else _json_float(actual)))
    return out


def _json_float(value: float) -> float | None:
    # JSON has no NaN/Inf; the report shows None as "never written / not a number".
    return value if np.isfinite(value) else None
