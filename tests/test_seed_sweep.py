"""Seed sweeps on the host (issue 27): a grade must not depend on the seed a class draws.

Every case of every assignment is drawn as the grader draws it, for thousands of seeds, and judged by the grader's own compare(): outputs modelled from the builtins' documented behaviour
(__bang_active_sigmoid: 0/1 beyond +-7.75 and up to 1% relative error inside; fp16 rounding; fp32 sums in
sequential, K-tiled and BLAS orders, fp16 operands summed in fp32) must pass every case on every seed, and the
known-bad outputs (reference_kernels/known_bad, tests/test_checks.py: dropped tail, offset, zeros, stale half,
bias, transposed B, half running sum ...) must fail the groups they break on every seed. The lab programs
(assignments/matmul_programs) are swept the same way at their own shapes and inputs.

Seeds are the masters "sweep-0", "sweep-1", ... so a failure reproduces with `grade submit DIR --seed sweep-N`.
Cases whose model costs more than SMALL_WORK (65536 sigmoid elements and more, the long-K and many-row matmuls)
are seed-insensitive by their size and swept on LARGE_SEEDS seeds; the stages' perf shapes (the same
distributions, 2^20 elements and more) only in benchmarks/seed_sweep.py. BANG_GRADER_SWEEP_SEEDS and
BANG_GRADER_SWEEP_LARGE_SEEDS change the counts.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import cache

import numpy as np
import pytest

from grader.checks import compare
from grader.programs.spec import load_programs
from grader.spec import AssignmentSpec, ConcreteCase, SeedPlan, load_assignment
from grader.spec.cases import correctness_cases

SEEDS = int(os.environ.get("BANG_GRADER_SWEEP_SEEDS", "2000"))
LARGE_SEEDS = int(os.environ.get("BANG_GRADER_SWEEP_LARGE_SEEDS", "5"))
# What a case may cost to be swept on every seed: sigmoid elements, matmul multiply-adds. The cases this leaves
# out are the ones a seed cannot move (65536 elements and more, long K, many rows).
SMALL_WORK = {"sigmoid": 1 << 13, "matmul": 1 << 20}
SHARDS = 4  # the small sweeps in four tests, which pytest-xdist spreads over its workers
SATURATION = 7.75  # __bang_active_sigmoid: 0 below -7.75, 1 above 7.75 (BANG header docs)
BUILTIN_REL = 0.0095  # "average relative error within 0.01": every element at 0.95% of it, either sign

Model = Callable[[ConcreteCase, np.random.Generator], np.ndarray]


def _work(case: ConcreteCase) -> int:
    return int(np.prod(case.shapes["x"])) if "x" in case.shapes else \
        case.shapes["a"][0] * case.shapes["a"][1] * case.shapes["b"][1]


def swept_cases(assignment: str, large: bool, shard: int = 0) -> list[tuple[str, list[ConcreteCase]]]:
    """(master, cases) per seed: the small cases on SEEDS seeds (this shard's share), or the large ones on
    LARGE_SEEDS."""
    spec = _spec(assignment)
    limit = SMALL_WORK[assignment]
    out = []
    for i in range(LARGE_SEEDS) if large else range(shard, SEEDS, SHARDS):
        plan = SeedPlan.create("public", f"sweep-{i}")
        out.append((plan.master, [c for c in correctness_cases(spec, plan) if (_work(c) > limit) == large]))
    return out


# ---------------------------------------------------------------------------------------------- sigmoid

def _exact(case: ConcreteCase) -> tuple[np.ndarray, np.ndarray]:
    return case.make_inputs()["x"].astype(np.float64), case.expected("sigmoid")


def sigmoid_emulated(case: ConcreteCase, rng: np.random.Generator) -> np.ndarray:
    """The emulator's builtin: saturated at and beyond +-7.75, exact inside, rounded to the case's dtype."""
    x, exact = _exact(case)
    return np.where(x <= -SATURATION, 0.0, np.where(x >= SATURATION, 1.0, exact)).astype(case.dtype)


def sigmoid_documented(case: ConcreteCase, rng: np.random.Generator) -> np.ndarray:
    """The coarsest conformant builtin: saturated strictly beyond +-7.75, 0.95% off everywhere inside."""
    x, exact = _exact(case)
    noisy = exact * (1 + BUILTIN_REL * rng.choice([-1.0, 1.0], size=x.shape))
    return np.where(x < -SATURATION, 0.0, np.where(x > SATURATION, 1.0, noisy)).astype(case.dtype)


def _bad_sigmoid(change: Callable[[np.ndarray], None]) -> Model:
    def model(case: ConcreteCase, rng: np.random.Generator) -> np.ndarray:
        out = sigmoid_emulated(case, rng).copy()
        change(out)
        return out
    return model


def _tail(out: np.ndarray, value: float) -> None:
    out[out.size // 64 * 64:] = value  # the last partial vector never computed


def _stale_half(out: np.ndarray) -> None:
    half = out.size // 2
    out[half:] = out[:out.size - half]  # the second task wrote the first task's results


def _shifted(out: np.ndarray) -> None:
    out[1:] = out[:-1].copy()  # a wrong task offset: every element one place late


def _biased(out: np.ndarray) -> None:
    out *= 1.02


SIGMOID_GOOD = {"emulated builtin": sigmoid_emulated, "documented builtin": sigmoid_documented}
# bad model -> the groups it must fail on every seed (at least one case each)
SIGMOID_BAD: dict[str, tuple[Model, set[str]]] = {
    "tail unwritten": (_bad_sigmoid(lambda o: _tail(o, np.nan)), {"tiny", "tail"}),
    "tail zeros": (_bad_sigmoid(lambda o: _tail(o, 0.0)), {"tail"}),
    "offset by one": (_bad_sigmoid(_shifted), {"aligned", "tail", "saturation", "half"}),
    "all zeros": (_bad_sigmoid(lambda o: o.fill(0.0)), {"aligned", "tail", "saturation", "half"}),
    "stale half": (_bad_sigmoid(_stale_half), {"aligned", "tail", "saturation", "half"}),
    "two percent bias": (_bad_sigmoid(_biased), {"aligned", "tail", "saturation", "half"}),
}
SIGMOID_BAD_LARGE: dict[str, tuple[Model, set[str]]] = {
    "tail unwritten": (SIGMOID_BAD["tail unwritten"][0], {"large"}),
    **{k: (m, {"large", "half"}) for k, (m, _) in SIGMOID_BAD.items() if k not in ("tail unwritten", "tail zeros")},
}


# ----------------------------------------------------------------------------------------------- matmul

def _operands(case: ConcreteCase) -> tuple[np.ndarray, np.ndarray]:
    inputs = case.make_inputs()
    return inputs["a"].astype(np.float32), inputs["b"].astype(np.float32)  # fp16 products are exact in fp32


def sequential(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """One fp32 running sum per output, k = 0, 1, 2 ... (a scalar kernel)."""
    acc = np.zeros((a.shape[0], b.shape[1]), np.float32)
    for k in range(a.shape[1]):
        acc += np.outer(a[:, k], b[k, :])
    return acc


def k_tiled(a: np.ndarray, b: np.ndarray, tile: int = 64) -> np.ndarray:
    """fp32 partial sums per K tile of 64 (one __bang_matmul each), added in fp32 (a K-tiled kernel)."""
    acc = np.zeros((a.shape[0], b.shape[1]), np.float32)
    for k in range(0, a.shape[1], tile):
        acc += a[:, k:k + tile] @ b[k:k + tile, :]
    return acc


def blas(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return a @ b  # sgemm: blocked, FMA


def _matmul(order: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Model:
    def model(case: ConcreteCase, rng: np.random.Generator) -> np.ndarray:
        return order(*_operands(case)).astype(case.dtype)  # fp16: rounded once, when final
    return model


def half_running_sum(case: ConcreteCase, rng: np.random.Generator) -> np.ndarray:
    """known_bad/half_running_sum: the running sum kept in the case's dtype (fp16 rounds at every addition)."""
    a, b = _operands(case)
    acc = np.zeros((a.shape[0], b.shape[1]), case.dtype)
    for k in range(a.shape[1]):
        acc = (acc.astype(np.float32) + np.outer(a[:, k], b[k, :])).astype(case.dtype)
    return acc


def _bad_matmul(change: Callable[[np.ndarray, ConcreteCase], np.ndarray | None]) -> Model:
    def model(case: ConcreteCase, rng: np.random.Generator) -> np.ndarray:
        out = case.expected("matmul").astype(case.dtype)  # the right result, correctly rounded, then the bug
        changed = change(out, case)
        return out if changed is None else changed
    return model


def _b_as_rows(out: np.ndarray, case: ConcreteCase) -> np.ndarray:
    """B's row-major [K][N] buffer read as [N][K] (the WRAM layout confusion)."""
    a, b = _operands(case)
    k, n = b.shape
    return (a @ np.ascontiguousarray(b.reshape(-1).reshape(n, k).T)).astype(case.dtype)


def _set(where: Callable[[np.ndarray], None]) -> Callable[[np.ndarray, ConcreteCase], None]:
    return lambda out, case: where(out)


def _one_element(out: np.ndarray) -> None:
    out[out.shape[0] // 2, out.shape[1] // 2] += 0.05


MATMUL_GOOD = {"fp32 sequential": _matmul(sequential), "fp32 K tiles of 64": _matmul(k_tiled),
               "fp32 BLAS": _matmul(blas)}
MATMUL_GOOD_LARGE = {"fp32 K tiles of 64": MATMUL_GOOD["fp32 K tiles of 64"], "fp32 BLAS": MATMUL_GOOD["fp32 BLAS"]}
MATMUL_BAD: dict[str, tuple[Model, set[str]]] = {
    "B read as [N][K]": (_bad_matmul(_b_as_rows), {"aligned", "tail", "half"}),
    "last row unwritten": (_bad_matmul(_set(lambda o: o[-1].fill(np.nan))), {"tiny", "aligned", "tail", "half"}),
    "last column zero": (_bad_matmul(_set(lambda o: o[:, -1].fill(0.0))), {"tiny", "aligned", "tail", "half"}),
    "all zeros": (_bad_matmul(_set(lambda o: o.fill(0.0))), {"tiny", "aligned", "tail", "half"}),
    "one element off by 0.05": (_bad_matmul(_set(_one_element)), {"aligned", "tail"}),
}
MATMUL_BAD_LARGE: dict[str, tuple[Model, set[str]]] = {
    "half running sum": (half_running_sum, {"half"}),
    **{k: (m, {"large", "aligned"}) for k, (m, _) in MATMUL_BAD.items()},
}


# ---------------------------------------------------------------------------------------------- the sweep

@cache
def _spec(assignment: str) -> AssignmentSpec:
    return load_assignment(assignment)


def _judge(assignment: str, case: ConcreteCase, out: np.ndarray) -> bool:
    spec = _spec(assignment)
    return compare(out, case.expected(spec.reference), case.dtype, spec.tolerances[case.dtype], spec.checks).passed


def _sweep(assignment: str, large: bool, good: dict[str, Model], bad: dict[str, tuple[Model, set[str]]],
           shard: int = 0) -> None:
    failures: list[str] = []
    for master, cases in swept_cases(assignment, large, shard):
        rng = np.random.default_rng(abs(hash(master)) % (1 << 32))
        for name, model in good.items():
            failures += [f"{name} fails {c.name} on seed {master}" for c in cases
                         if not _judge(assignment, c, model(c, rng))]
        for name, (model, groups) in bad.items():
            for group in sorted(groups & {c.group for c in cases}):  # the groups this tier has cases of
                if all(_judge(assignment, c, model(c, rng)) for c in cases if c.group == group):
                    failures.append(f"{name} passes every {group} case on seed {master}")
    assert not failures, "\n".join(failures[:20])


@pytest.mark.parametrize("shard", range(SHARDS))
def test_documented_builtin_sigmoid_passes_and_known_bad_fails_on_every_seed(shard):
    _sweep("sigmoid", False, SIGMOID_GOOD, SIGMOID_BAD, shard)


def test_large_sigmoid_cases_pass_and_fail_alike_on_every_seed():
    _sweep("sigmoid", True, SIGMOID_GOOD, SIGMOID_BAD_LARGE)


@pytest.mark.parametrize("shard", range(SHARDS))
def test_fp32_accumulation_orders_pass_and_known_bad_matmuls_fail_on_every_seed(shard):
    _sweep("matmul", False, MATMUL_GOOD, MATMUL_BAD, shard)


def test_large_and_fp16_long_k_matmuls_pass_and_the_half_running_sum_fails_on_every_seed():
    _sweep("matmul", True, MATMUL_GOOD_LARGE, MATMUL_BAD_LARGE)


@pytest.mark.parametrize("stage", [s.stage for s in load_programs("matmul_programs")[0].stages])
def test_lab_programs_pass_in_every_accumulation_order_and_a_transposed_right_fails(stage):
    """exp_5_2's programs draw left and right from [1, 1.1) themselves (rand(), no srand: the same inputs every
    run; a student's srand(time(0)) draws others): any draw passes the base tolerance, the lab's untransposed
    right in WRAM fails. The 524288-row stages are checked on 512 of their rows (rows are independent)."""
    programs, base = load_programs("matmul_programs")
    dims = next(s.dims for s in programs.stages if s.stage == stage)
    m, n, k = min(dims["M"], 512), dims["K"], dims["N"]  # the kernel's left[m][n] x right[n][k]
    tolerance, policy = base.tolerances["float32"], base.checks
    for i in range(max(SEEDS // 20, LARGE_SEEDS)):
        rng = np.random.default_rng(i)
        left = rng.uniform(1.0, 1.1, (m, n)).astype(np.float32)
        right = rng.uniform(1.0, 1.1, (n, k)).astype(np.float32)
        expected = left.astype(np.float64) @ right.astype(np.float64)
        for order in (sequential, k_tiled, blas):
            outcome = compare(order(left, right), expected, "float32", tolerance, policy)
            assert outcome.passed, f"{order.__name__} on draw {i}: {outcome.message}"
        as_rows = left @ np.ascontiguousarray(right.reshape(-1).reshape(k, n).T)
        assert not compare(as_rows, expected, "float32", tolerance, policy).passed, f"draw {i}"
