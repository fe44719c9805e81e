"""The host's references and draws (grader/spec/references.py, cases.draw) give the same bits as the whole-array
formulas they replaced (issue 41: block by block, in place, without float64 temporaries of the whole case), which
stay here as the oracle: on random inputs, the tails, +-inf, NaN, signed zeros, subnormals, float16, every size
around the block, and the shipped assignments' own cases."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from grader.spec import SeedPlan, correctness_cases, load_assignment, perf_case
from grader.spec.cases import draw
from grader.spec.models import Distribution
from grader.spec.references import BLOCK, REFERENCES


def old_sigmoid(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    t = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + t), t / (1.0 + t))


def old_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return a.astype(np.float64).astype(np.float64) @ b.astype(np.float64).astype(np.float64)


def old_draw(dist: Distribution, shape: tuple[int, ...], dtype: np.dtype, rng: np.random.Generator) -> np.ndarray:
    if dist.kind == "uniform":
        values = rng.uniform(dist.low, dist.high, size=shape)
    else:
        values = rng.normal(dist.mean, dist.std, size=shape)
    if dist.special_values and dist.special_fraction > 0 and values.size:
        count = max(1, int(values.size * dist.special_fraction))
        where = rng.choice(values.size, size=min(count, values.size), replace=False)
        values.reshape(-1)[where] = rng.choice(np.asarray(dist.special_values, dtype=np.float64), size=where.size)
    return values.astype(dtype)


SPECIALS = [0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 5e-324, -5e-324, 1e-310, 709.0, -709.0, 710.0, -745.0,
            -746.0, 36.7, -36.7, 1e300, -1e300, 65504.0, 6e-8, 88.0, -88.0, 7.75, -7.75]


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


@pytest.mark.parametrize("dtype", ["float64", "float32", "float16"])
def test_sigmoid_gives_the_whole_array_formulas_bits(dtype):
    rng = np.random.default_rng(41)
    sizes = [0, 1, 2, 7, BLOCK - 1, BLOCK, BLOCK + 1, 3 * BLOCK + 17]
    for size in sizes:
        for scale in (1.0, 30.0, 800.0):
            x = (rng.standard_normal(size) * scale)
            if size:
                where = rng.choice(size, size=max(1, size // 10))
                x[where] = rng.choice(np.array(SPECIALS), size=where.size)
            x = x.astype(dtype)
            assert same_bits(REFERENCES["sigmoid"].compute(x), old_sigmoid(x.astype(np.float64))), (size, scale)
    specials = np.array(SPECIALS).astype(dtype)
    assert same_bits(REFERENCES["sigmoid"].compute(specials), old_sigmoid(specials.astype(np.float64)))
    grid = rng.standard_normal((5, 3 * BLOCK // 5 + 3)).astype(dtype)  # any shape, kept
    assert same_bits(REFERENCES["sigmoid"].compute(grid), old_sigmoid(grid.astype(np.float64)))


def test_sigmoid_reads_integers_as_their_float64_values():
    x = np.arange(-40, 40)
    assert same_bits(REFERENCES["sigmoid"].compute(x), old_sigmoid(x))


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_matmul_gives_the_whole_array_formulas_bits(dtype):
    rng = np.random.default_rng(7)
    for m, k, n in [(1, 1, 1), (3, 5, 7), (64, 257, 65), (300, 256, 128)]:
        a = rng.uniform(-2, 2, (m, k)).astype(dtype)
        b = rng.uniform(-2, 2, (k, n)).astype(dtype)
        if m * k > 10:
            a.reshape(-1)[::7] = np.array(SPECIALS[:7] * (a.size // 7 // 7 + 1))[:a.reshape(-1)[::7].size]
        assert same_bits(REFERENCES["matmul"].compute(a, b), old_matmul(a, b))


def distributions() -> list[Distribution]:
    return [Distribution(kind="uniform", low=-12.0, high=12.0),
            Distribution(kind="uniform", low=-12.0, high=12.0, special_values=SPECIALS, special_fraction=0.05),
            Distribution(kind="normal", mean=0.5, std=3.0),
            Distribution(kind="normal", mean=0.0, std=1e5, special_values=[np.nan, -0.0, 7.7],
                         special_fraction=0.5),
            Distribution(kind="uniform", low=1.0, high=1.1, special_values=[2.0], special_fraction=0.5)]


@pytest.mark.parametrize("dtype", ["float32", "float16", "float64"])
def test_draws_give_the_whole_array_draws_bits_and_leave_the_generator_where_it_did(dtype):
    shapes = [(), (0,), (1,), (7,), (BLOCK,), (BLOCK + 1,), (2 * BLOCK + 5,), (3, 5), (129, 257), (5, BLOCK // 3)]
    for i, dist in enumerate(distributions()):
        for j, shape in enumerate(shapes):
            new_rng, old_rng = np.random.default_rng([i, j]), np.random.default_rng([i, j])
            new, old = draw(dist, shape, np.dtype(dtype), new_rng), old_draw(dist, shape, np.dtype(dtype), old_rng)
            assert same_bits(new, old), (dist, shape)
            assert new_rng.integers(1 << 62) == old_rng.integers(1 << 62)  # the same number of draws taken


def test_the_shipped_cases_inputs_and_references_are_the_old_formulas():
    seeds = SeedPlan.create("public")
    for name in ("sigmoid", "matmul"):
        spec = load_assignment(name)
        cases = correctness_cases(spec, seeds) + [perf_case(spec, spec.stages[0].name, seeds)]
        for case in cases:
            inputs = case.make_inputs()
            children = np.random.SeedSequence(case.seed).spawn(len(case.shapes))
            old = {n: old_draw(case.distributions[n], shape, np.dtype(case.dtype), np.random.default_rng(child))
                   for (n, shape), child in zip(case.shapes.items(), children, strict=True)}
            assert all(same_bits(inputs[n], old[n]) for n in old), case.name
            oracle = old_sigmoid if name == "sigmoid" else old_matmul
            reference = oracle(*[old[n].astype(np.float64) for n in case.shapes])
            assert same_bits(case.expected(spec.reference), reference), case.name


def test_every_front_door_gives_the_host_one_blas_thread():
    """grader/__init__.py sets OpenBLAS to one thread before numpy loads it: a fresh `grade` process (nothing set in
    its environment) computes its matmul references on one thread, so they are the same bits on every machine and
    no BLAS pool spins beside the worker slots."""
    probe = """
import grader.cli.app, numpy, ctypes
maps = [line.split()[-1] for line in open("/proc/self/maps") if "openblas" in line]
if not maps:
    print("no-openblas")
else:
    lib = ctypes.CDLL(maps[0])
    get = [n for n in ("scipy_openblas_get_num_threads64_", "openblas_get_num_threads64_", "openblas_get_num_threads")
           if hasattr(lib, n)]
    print(getattr(lib, get[0])() if get else "no-openblas")
"""
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    threads = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True,
                             timeout=120).stdout.strip()
    if threads == "no-openblas":
        pytest.skip("this numpy does not use OpenBLAS")
    assert threads == "1"
