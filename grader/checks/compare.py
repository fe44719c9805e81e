"""Runs every check strategy on one output and folds them into one decision with a student-readable message."""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field
from functools import cache
from types import ModuleType

import numpy as np

from grader.checks import metrics, nan_inf, unwritten
from grader.checks.base import CheckContext, CheckFinding, Pair
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
    b = np.asarray(expected, dtype=np.float64)  # the reference is float64 already (and read-only: kept, shared)
    pair = Pair(actual, b)
    # Finite everywhere (an honest output): every check reads the output through the pair, in float64 a part at a
    # time, so no float64 copy of millions of elements is made; otherwise each check gets that copy.
    a = actual if pair.finite else actual.astype(np.float64)
    registry = checks()
    findings: list[CheckFinding] = []
    blamed: np.ndarray | None = None
    for name in selected(policy):
        finding = registry[name].run(a, b, CheckContext(dtype, tolerance, policy, blamed, pair))
        if finding is None:  # switched off by the policy
            continue
        findings.append(finding)
        if not finding.passed and finding.bad_mask is not None:
            blamed = finding.bad_mask if blamed is None else blamed | finding.bad_mask
    by_name = {f.check: f for f in findings}
    accuracy = by_name[metrics.NAME]
    failed = [f for f in findings if not f.passed]
    outcome = CheckOutcome(
        passed=not failed,
        message="; ".join(f.message for f in failed),
        metrics=accuracy.metrics,
        unwritten_fraction=by_name[unwritten.NAME].metrics["unwritten_fraction"] if unwritten.NAME in by_name else 0.0,
        nan_inf_mismatch=int(by_name[nan_inf.NAME].metrics["nan_inf_mismatch"]) if nan_inf.NAME in by_name else 0,
    )
    if failed:
        a = a.astype(np.float64, copy=False)
        bad, errors = _blamed(a, b, dtype, tolerance)
        outcome.mismatches = first_mismatches(a, b, bad, errors, policy.max_mismatches)
        if not accuracy.passed:
            accuracy.kind = metrics.failure_kind(a, b, bad)
        outcome.findings = [CaseFinding(check=f.check, kind=f.kind, message=f.message) for f in failed]
    return outcome


@cache
def checks() -> dict[str, ModuleType]:
    """Every output check, found by discovery: a module of grader.checks with NAME, KIND, ORDER, run(actual,
    expected, ctx) and self_test() -- adding a check adds its module, nothing else. In ORDER."""
    found: dict[str, ModuleType] = {}
    for info in pkgutil.iter_modules(importlib.import_module("grader.checks").__path__):
        module = importlib.import_module(f"grader.checks.{info.name}")
        if all(hasattr(module, attr) for attr in ("NAME", "KIND", "ORDER", "run", "self_test")):
            if module.NAME in found:
                raise ImportError(f"two checks named {module.NAME!r}: {found[module.NAME]} and {module}")
            found[module.NAME] = module
    return dict(sorted(found.items(), key=lambda item: item[1].ORDER))


def selected(policy: CheckPolicy) -> list[str]:
    """The checks the spec runs, by name, in order (CheckPolicy.run; default: all); accuracy always runs."""
    registry = checks()
    names = list(policy.run) if policy.run is not None else list(registry)
    unknown = [name for name in names if name not in registry]
    if unknown:
        raise ValueError(f"[checks] run names unknown checks {unknown}; known: {', '.join(registry)}")
    return names if metrics.NAME in names else [*names, metrics.NAME]


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
