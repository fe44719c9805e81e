"""Float64 host references and the minimal work each operator must do (for the roofline floor).

These run on the host with inputs the host drew itself; student code never sees or calls them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Work:
    """What any correct implementation must at least do: bytes over GDRAM and arithmetic operations."""

    bytes_moved: int
    flops: int
    unit: str  # which peak bounds the flops: "tensor" (matmul unit) or "vector"


def _sigmoid(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    # Split by sign so exp never overflows; the result is exact to float64 rounding on both tails.
    out = np.empty_like(x)
    pos = x >= 0
    out[pos] = 1.0 / (1.0 + np.exp(-x[pos]))
    ex = np.exp(x[~pos])
    out[~pos] = ex / (1.0 + ex)
    return out


def _sigmoid_work(shapes: dict[str, tuple[int, ...]], itemsize: int) -> Work:
    n = int(np.prod(shapes["x"]))
    return Work(bytes_moved=2 * n * itemsize, flops=4 * n, unit="vector")


def _matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return a.astype(np.float64) @ b.astype(np.float64)


def _matmul_work(shapes: dict[str, tuple[int, ...]], itemsize: int) -> Work:
    (m, k), (_, n) = shapes["a"], shapes["b"]
    return Work(bytes_moved=(m * k + k * n + m * n) * itemsize, flops=2 * m * k * n, unit="tensor")


@dataclass(frozen=True)
class Reference:
    compute: Callable[..., np.ndarray]
    work: Callable[[dict[str, tuple[int, ...]], int], Work]


REFERENCES: dict[str, Reference] = {
    "sigmoid": Reference(_sigmoid, _sigmoid_work),
    "matmul": Reference(_matmul, _matmul_work),
}
