"""Correctness checks: crafted outputs that must fail (real bugs) and must pass (the lecture's way)."""

from __future__ import annotations

import numpy as np
import pytest

from grader.checks import compare, metrics, nan_inf, self_test_all, unwritten, zero_guard
from grader.spec import SeedPlan, correctness_cases, load_assignment
from grader.spec.references import REFERENCES

SIGMOID = load_assignment("sigmoid")
MATMUL = load_assignment("matmul")
RNG = np.random.default_rng(7)


def _sigmoid_case(n: int = 4099) -> tuple[np.ndarray, np.ndarray]:
    x = np.float32(RNG.uniform(-12, 12, n))
    return x, REFERENCES["sigmoid"].compute(x)


def hardware_like_sigmoid(x: np.ndarray, rel: float = 0.01) -> np.ndarray:
    """What __bang_active_sigmoid is documented to do: saturate beyond +-7.75, ~1% relative error inside."""
    exact = REFERENCES["sigmoid"].compute(x)
    noisy = exact * (1 + RNG.uniform(-rel, rel, x.shape))
    noisy = np.where(x > 7.75, 1.0, np.where(x < -7.75, 0.0, noisy))
    return noisy.astype(np.float32)


def _check_sigmoid(actual: np.ndarray, expected: np.ndarray, dtype: str = "float32"):
    return compare(actual, expected, dtype, SIGMOID.tolerances[dtype], SIGMOID.checks)


def test_every_strategy_passes_its_self_tests():
    results = self_test_all()  # every check found, the four of the handout among them; a new one needs no edit here
    assert {"accuracy", "nan_inf", "unwritten", "zero_guard"} <= set(results)
    assert all(failures == [] for failures in results.values()), results


@pytest.mark.parametrize(("bug", "findings"), [
    ("tail_unwritten", [("unwritten", "unwritten_output")]),
    ("one_inf", [("nan_inf", "nan_output")]),
    ("all_zeros", [("accuracy", "zero_output"), ("zero_guard", "zero_output")]),
    ("tail_zeros", [("accuracy", "zero_output")]),
    ("two_percent_bias", [("accuracy", "wrong_values")]),
    ("one_percent_bias", [("accuracy", "precision")]),
    ("offset_by_one", [("accuracy", "wrong_values")]),
    ("wrong_shape", [("shape", "wrong_values")]),
])
def test_each_failed_check_names_itself_and_what_it_found(bug, findings):
    """Typed findings (issue 30): the check's name and the failure kind, in the order the checks ran; the
    report reads the kind from here and never guesses it back from the mismatches' numbers."""
    x, expected = _sigmoid_case(1000)
    out = expected.astype(np.float32)
    if bug == "tail_unwritten":
        out[-7:] = np.nan
    elif bug == "one_inf":
        out[500] = np.inf
    elif bug == "all_zeros":
        out[:] = 0.0
    elif bug == "tail_zeros":
        out[-7:] = 0.0
    elif bug == "two_percent_bias":
        out = out * 1.05
    elif bug == "one_percent_bias":
        out = out * 1.019
    elif bug == "offset_by_one":
        out[1:] = out[:-1].copy()
    elif bug == "wrong_shape":
        out = out[:-1]
    outcome = _check_sigmoid(out, expected)
    assert [(f.check, f.kind) for f in outcome.findings] == findings
    assert all(f.message for f in outcome.findings)
    assert _check_sigmoid(expected.astype(np.float32), expected).findings == []


def test_sigmoid_with_one_percent_noise_and_saturation_passes():
    x, expected = _sigmoid_case()
    outcome = _check_sigmoid(hardware_like_sigmoid(x), expected)
    assert outcome.passed, outcome.message
    assert 1e-3 < outcome.metrics["diff1"] < 1e-2


def test_sigmoid_fp16_rounding_passes():
    x = np.float16(RNG.uniform(-12, 12, 1000))
    expected = REFERENCES["sigmoid"].compute(x)
    assert _check_sigmoid(expected.astype(np.float16), expected, "float16").passed


@pytest.mark.parametrize("bug", ["tail_dropped_zeros", "tail_unwritten", "one_nan", "all_zeros", "offset_by_one",
                                 "stale_half", "two_percent_bias"])
def test_sigmoid_bugs_fail(bug):
    x, expected = _sigmoid_case(1000)
    out = hardware_like_sigmoid(x, rel=0.002)
    if bug == "tail_dropped_zeros":
        out[-7:] = 0.0  # the last partial vector never computed, output zero-initialised
    elif bug == "tail_unwritten":
        out[-7:] = np.nan  # same bug on a NaN-poisoned output
    elif bug == "one_nan":
        out[500] = np.nan
    elif bug == "all_zeros":
        out[:] = 0.0
    elif bug == "offset_by_one":
        out[1:] = out[:-1].copy()  # a wrong task offset: every element shifted
    elif bug == "stale_half":
        out[500:] = out[:500]  # second task wrote the first task's results
    elif bug == "two_percent_bias":
        out = out * 1.02
    outcome = _check_sigmoid(out, expected)
    assert not outcome.passed, bug
    assert outcome.mismatches, "a failure lists where"


def test_unwritten_elements_are_reported_as_never_written_with_their_index():
    x, expected = _sigmoid_case(130)
    out = expected.astype(np.float32)
    out[66:] = np.nan
    outcome = _check_sigmoid(out, expected)
    assert not outcome.passed
    assert "never written" in outcome.message and "first at index [66]" in outcome.message
    assert outcome.unwritten_fraction == pytest.approx(64 / 130)
    assert outcome.mismatches[0].index == [66] and outcome.mismatches[0].actual is None
    assert outcome.nan_inf_mismatch == 0  # blamed once, as unwritten, not twice


def _fp32_accumulated_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Sequential fp32 accumulation over K, as a scalar or vector kernel does it."""
    acc = np.zeros((a.shape[0], b.shape[1]), np.float32)
    for k in range(a.shape[1]):
        acc += np.outer(a[:, k], b[k, :]).astype(np.float32)
    return acc


@pytest.mark.parametrize("k", [1, 89, 2048])
def test_matmul_with_fp32_accumulation_passes_the_fp32_tolerance(k):
    a = np.float32(RNG.uniform(-1, 1, (33, k)))
    b = np.float32(RNG.uniform(-1, 1, (k, 29)))
    expected = REFERENCES["matmul"].compute(a, b)
    outcome = compare(_fp32_accumulated_matmul(a, b), expected, "float32", MATMUL.tolerances["float32"], MATMUL.checks)
    assert outcome.passed, outcome.message


@pytest.mark.parametrize("bug", ["b_transposed_layout", "last_row_dropped", "last_column_zero", "one_element",
                                 "fp16_accumulation"])
def test_matmul_bugs_fail(bug):
    m, k, n = 65, 63, 64
    a = np.float32(RNG.uniform(-1, 1, (m, k)))
    b = np.float32(RNG.uniform(-1, 1, (k, n)))
    expected = REFERENCES["matmul"].compute(a, b)
    out = _fp32_accumulated_matmul(a, b)
    if bug == "b_transposed_layout":
        # Treating row-major B[K][N] as [N][K] (the WRAM layout confusion) on a square-ish tail shape.
        bt = b.reshape(-1)[: k * n].reshape(n, k).T
        out = _fp32_accumulated_matmul(a, np.ascontiguousarray(bt))
    elif bug == "last_row_dropped":
        out[-1, :] = np.nan
    elif bug == "last_column_zero":
        out[:, -1] = 0.0
    elif bug == "one_element":
        out[10, 10] += 0.05
    elif bug == "fp16_accumulation":
        big_a = np.float32(RNG.uniform(-1, 1, (16, 1024)))
        big_b = np.float32(RNG.uniform(-1, 1, (1024, 16)))
        expected = REFERENCES["matmul"].compute(big_a, big_b)
        acc = np.zeros((16, 16), np.float16)
        for i in range(1024):
            acc = (acc + np.outer(big_a[:, i], big_b[i, :]).astype(np.float16)).astype(np.float16)
        out = acc.astype(np.float32)
    outcome = compare(out, expected, "float32", MATMUL.tolerances["float32"], MATMUL.checks)
    assert not outcome.passed, bug


def test_wrong_shape_and_dtype_are_named():
    expected = np.zeros((3, 4))
    tol, policy = MATMUL.tolerances["float32"], MATMUL.checks
    assert "output shape [4, 3] but expected [3, 4]" in compare(np.zeros((4, 3), np.float32), expected, "float32", tol,
                                                                   policy).message
    assert "output dtype float64 but expected float32" in compare(np.zeros((3, 4)), expected, "float32", tol,
                                                                     policy).message


def test_zero_guard_catches_zeros_where_relative_metrics_are_degenerate():
    expected = np.full(100, 1e-7)
    assert not zero_guard.check(np.zeros(100), expected).passed
    assert zero_guard.check(expected * 1.0001, expected).passed


def test_nan_inf_strict_and_loose():
    a = np.array([np.inf, 1.0])
    b = np.array([np.nan, 1.0])
    assert not nan_inf.check(a, b, "strict").passed
    assert nan_inf.check(a, b, "loose").passed
    assert not nan_inf.check(np.array([np.nan]), np.array([1.0]), "loose").passed


def test_metrics_follow_the_mlu_ops_definitions():
    b = np.array([1.0, -2.0, 1e-9])
    a = np.array([1.1, -2.0, 2e-9])
    values = metrics.compute(a, b, "float32")
    # mlu-ops' DIFF1/DIFF2, each |b| counted as at least th = 1e-6 (fp32): the 1e-9 element weighs 1e-6
    assert values["diff1"] == pytest.approx((0.1 + 1e-9) / (3 + 1e-6), rel=1e-12)
    assert values["diff2"] == pytest.approx(np.sqrt((0.01 + 1e-18) / (5 + 1e-12)), rel=1e-12)
    assert values["diff3"] == pytest.approx(0.1 / (1 + 1e-9))  # |b| < 1e-6 is absolute: 1e-9, not 100%
    assert values["diff3_2"] == pytest.approx(0.1)


def test_unwritten_ignores_nan_the_reference_expects():
    assert unwritten.check(np.array([np.nan, 2.0]), np.array([np.nan, 2.0])).passed


def test_sigmoid_saturated_to_zero_passes_under_a_secret_seed():
    """Regression: a 1-element case whose input is far below -7.75 (reference 6e-39) was failed as all-zeros."""
    spec = load_assignment("sigmoid")
    outcome = compare(np.zeros(1, np.float32), np.array([6.05e-39]), "float32",
                      spec.tolerances["float32"], spec.checks)
    assert outcome.passed, outcome.message
    zeros = compare(np.zeros(1000, np.float32), 1 / (1 + np.exp(-np.linspace(-3, 3, 1000))), "float32",
                    spec.tolerances["float32"], spec.checks)
    assert not zeros.passed


def test_strict_nan_inf_marks_exactly_the_elements_whose_kind_differs():
    """Every pair of kinds (finite, NaN, +Inf, -Inf) on both sides: bad exactly where the kinds differ."""
    kinds = [0.5, np.nan, np.inf, -np.inf]
    a = np.array([x for x in kinds for _ in kinds] * 3)
    b = np.array([y for _ in kinds for y in kinds] * 3)
    kind = lambda v: "nan" if np.isnan(v) else str(v) if np.isinf(v) else "finite"  # noqa: E731
    expected = np.array([kind(x) != kind(y) for x, y in zip(a, b, strict=True)])
    finding = nan_inf.check(a, b, "strict")
    np.testing.assert_array_equal(finding.bad_mask, expected)
    assert finding.metrics["nan_inf_mismatch"] == expected.sum() == 3 * 12


@pytest.mark.parametrize("x", [[-20.0], [-7.8, -11.244883], [-88.0], [-7.75], [-7.75, -7.75, -30.0]])
def test_a_saturated_tiny_case_passes_whatever_the_seed_drew(x):
    """Issue 27: seeds seed1 and seed7 drew n1 = [-20] and n2 = [-7.8, -11.24]; the builtin's documented 0 there
    failed DIFF1 (0.673 and 1), dividing by a sum of 2e-9. Each |b| now counts as at least tiny = 0.05."""
    x = np.float32(x)
    expected = REFERENCES["sigmoid"].compute(x)
    outcome = _check_sigmoid(np.zeros_like(x), expected)
    assert outcome.passed, outcome.message
    assert outcome.metrics["diff1"] <= 0.01 * (1 - 0.1)  # with margin: at most sigmoid(-7.75) / tiny


@pytest.mark.parametrize("x", [[-5.0], [-3.0, -20.0], [0.0], [7.0, -9.0]])
def test_zeros_where_sigmoid_is_not_tiny_still_fail_a_tiny_case(x):
    x = np.float32(x)
    assert not _check_sigmoid(np.zeros_like(x), REFERENCES["sigmoid"].compute(x)).passed


def test_the_floor_changes_nothing_where_the_reference_is_not_tiny():
    """Above tiny the metrics are mlu-ops' own: a 2% bias on values in [0.05, 1) is DIFF1 0.02 either way."""
    b = np.linspace(0.05, 0.99, 1000)
    values = metrics.compute(b * 1.02, b, "float32", tiny=0.05)
    assert values["diff1"] == pytest.approx(0.02) and values["diff2"] == pytest.approx(0.02)


def _general(actual: np.ndarray, expected: np.ndarray, spec, dtype: str) -> tuple[bool, dict[str, str]]:
    """Each check's general path, called on its own (no shared Pair): what compare() gave before its fast path."""
    a, b = actual.astype(np.float64), np.asarray(expected, dtype=np.float64)
    t, policy = spec.tolerances[dtype], spec.checks
    found = [unwritten.check(a, b), nan_inf.check(a, b, policy.nan_inf),
             metrics.check(a, b, dtype, {"diff1": t.diff1, "diff2": t.diff2, "diff3": t.diff3, "diff3_2": t.diff3_2},
                           t.tiny)]
    if policy.zero_guard:
        found.append(zero_guard.check(a, b, policy.zero_guard_ratio, policy.zero_guard_floor))
    values = metrics.compute(a, b, dtype, t.tiny)
    return all(f.passed for f in found), {k: float(v).hex() for k, v in values.items()}


@pytest.mark.parametrize("seed", range(6))
def test_the_finite_fast_path_gives_every_metric_bit_for_bit(seed):
    """compare() on outputs finite everywhere shares |a-b| and the reference's facts between the checks
    (checks/base.Pair); its verdicts and DIFF metrics are the general path's exactly, whatever the output."""
    rng = np.random.default_rng(seed)
    for spec, reference in ((SIGMOID, "sigmoid"), (MATMUL, "matmul")):
        for dtype in ("float32", "float16"):
            for _ in range(6):
                if reference == "sigmoid":
                    shape = (int(rng.integers(0, 3000)),)
                    inputs = [rng.uniform(-30, 30, shape).astype(dtype)]  # saturated tails: tiny references
                else:
                    m, k, n = (int(v) for v in rng.integers(1, 40, 3))
                    inputs = [rng.uniform(-1, 1, (m, k)).astype(dtype), rng.uniform(-1, 1, (k, n)).astype(dtype)]
                expected = REFERENCES[reference].compute(*[x.astype(np.float64) for x in inputs])
                expected.setflags(write=False)  # as spec/cases keeps references: their facts are kept
                honest = expected.astype(dtype)
                outputs = [honest, (expected * (1 + rng.uniform(-0.02, 0.02, expected.shape))).astype(dtype),
                           np.zeros_like(honest), np.where(rng.random(expected.shape) < 0.01, honest + 1, honest)]
                if honest.size:
                    flat = honest.copy().reshape(-1)
                    flat[-1:] = 0
                    outputs.append(flat.reshape(honest.shape))
                for actual in outputs:
                    outcome = compare(actual.astype(dtype), expected, dtype, spec.tolerances[dtype], spec.checks)
                    passed, values = _general(actual.astype(dtype), expected, spec, dtype)
                    assert outcome.passed == passed
                    assert {k: float(v).hex() for k, v in outcome.metrics.items()} == values


PARTS = 1 << 15  # base.PAIRWISE_PART, written out: the sizes below straddle it whatever it becomes
SIZES = [0, 1, 7, 8, 127, 128, 129, 1000, PARTS - 1, PARTS, PARTS + 1, 2 * PARTS + 8, 3 * PARTS + 13, 100_003,
         1 << 20]


@pytest.mark.parametrize("n", SIZES)
def test_sums_a_part_at_a_time_are_numpys_bit_for_bit(n):
    """base.pairwise_sums walks numpy's own pairwise summation tree: the parts' sums added as the tree adds them
    are np.sum of the whole exactly (a numpy that sums otherwise fails this, not a grade)."""
    from grader.checks.base import pairwise_sums

    rng = np.random.default_rng(n)
    x = rng.standard_normal(n) * 10.0 ** rng.uniform(-6, 6, n)  # magnitudes far apart: rounding shows
    y = np.abs(x)
    sums = pairwise_sums(n, lambda lo, hi: np.array([x[lo:hi].sum(), y[lo:hi].sum()]))
    assert [float(v).hex() for v in sums] == [float(np.sum(x)).hex(), float(np.sum(y)).hex()]
    if n and n % 8 == 0:  # a 2-D reference (a matmul's) is summed as its flat elements
        assert float(np.sum(x.reshape(8, -1))).hex() == float(np.sum(x)).hex()


@pytest.mark.parametrize("n", SIZES)
def test_the_kept_elements_mass_a_part_at_a_time_is_numpys(n):
    """zero_guard.kept_mass: np.abs(a[kept]).sum() bit for bit, the kept elements read slice by slice."""
    from grader.checks.base import pairwise_parts

    rng = np.random.default_rng(n + 1)
    a = rng.standard_normal(n) * 10.0 ** rng.uniform(-6, 6, n)
    for share in (0.0, 0.03, 0.5, 1.0):
        kept = rng.random(n) >= share
        at = np.flatnonzero(kept)
        starts = {p: int(at[p]) for p in pairwise_parts(at.size)} if at.size else {}
        starts[at.size] = n
        assert zero_guard.kept_starts(kept) == starts
        expected = float(np.abs(a[kept]).sum())
        assert float(zero_guard.kept_mass(a, kept, starts)).hex() == expected.hex()
    assert float(zero_guard.kept_mass(a, None, {})).hex() == float(np.abs(a).sum()).hex()


@pytest.mark.parametrize("seed", range(3))
def test_the_fast_path_over_outputs_of_many_parts_is_the_general_paths(seed):
    """The same bit-for-bit agreement as above on outputs long enough to be read in many parts (the perf cases'
    millions of elements), sigmoid with saturated tails (zero_guard's floor drops elements) and 2-D matmuls."""
    rng = np.random.default_rng(100 + seed)
    x = rng.uniform(-30, 30, int(rng.integers(3 * PARTS, 8 * PARTS))).astype(np.float32)
    m, k, n = (int(v) for v in rng.integers(200, 420, 3))
    a, w = rng.uniform(-1, 1, (m, k)).astype(np.float32), rng.uniform(-1, 1, (k, n)).astype(np.float32)
    for spec, expected in ((SIGMOID, REFERENCES["sigmoid"].compute(x.astype(np.float64))),
                           (MATMUL, REFERENCES["matmul"].compute(a.astype(np.float64), w.astype(np.float64)))):
        expected.setflags(write=False)
        honest = expected.astype(np.float32)
        noisy = (expected * (1 + rng.uniform(-2e-6, 2e-6, expected.shape))).astype(np.float32)
        tail = honest.copy().reshape(-1)
        tail[-PARTS - 5:] = 0
        scaled = (honest * np.float32(1e-4)).astype(np.float32)  # (almost) all zeros: the guard's edge
        for actual in (honest, noisy, tail.reshape(honest.shape), scaled):
            outcome = compare(actual, expected, "float32", spec.tolerances["float32"], spec.checks)
            passed, values = _general(actual, expected, spec, "float32")
            assert outcome.passed == passed
            assert {k: float(v).hex() for k, v in outcome.metrics.items()} == values


def test_reference_facts_are_kept_only_for_arrays_nobody_can_write():
    from grader.checks import base

    b = np.linspace(0.1, 1.0, 1000)
    honest = b.astype(np.float32)
    first = _check_sigmoid(honest, b)
    b[:] = 0.0  # a writeable reference changed in place: nothing computed from its old values may be reused
    assert not _check_sigmoid(honest, b).passed and first.passed
    view = np.linspace(0.1, 1.0, 1000)
    view.setflags(write=False)
    before = len(base._FACTS)
    assert view.base is not None and view.base.flags.writeable  # read-only itself, but what it views is not
    assert _check_sigmoid(honest, view).passed and len(base._FACTS) == before
    kept = view.copy()
    kept.setflags(write=False)
    assert _check_sigmoid(honest, kept).passed
    assert len(base._FACTS) == before + 1
    del kept  # its facts go with it
    assert len(base._FACTS) == before
    # and the references the grading keeps (spec/cases._Drawn) are such arrays
    case = next(c for c in correctness_cases(SIGMOID, SeedPlan.create("public")) if c.name == "n4096")
    reference = case.expected("sigmoid")
    assert _check_sigmoid(reference.astype(np.float32), reference).passed
    assert id(reference) in base._FACTS  # (another test may have compared with it first: the same facts)
