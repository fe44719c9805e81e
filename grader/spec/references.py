"""Float64 host references and the minimal work each operator must do: for the roofline floor (`work`) and for
the host's integrity check of the emulator's counted work (`required`, DESIGN.md "Threat model"); and the
operator's known misreadings (`misreadings`): what a kernel outputs when it reads an operand in a layout it
never arranged, so a wrong answer can name its cause.

These run on the host with inputs the host drew itself; student code never sees or calls them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from bang_emu.wram_layout import matmul_rhs_rows

from grader.i18n import _


@dataclass(frozen=True)
class Work:
    """What any correct implementation must at least do: bytes over GDRAM and arithmetic operations."""

    bytes_moved: int
    flops: int
    unit: str  # which peak bounds the flops: "tensor" (matmul unit) or "vector"


# Elements per block of the element-wise references: their float64 scratch (a few blocks) stays in the CPU's cache
# and is allocated once, where whole-array temporaries of a 4M-element case cost fresh pages each (issue 41).
BLOCK = 1 << 15


def _sigmoid(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x)  # any dtype: each block is cast to float64 (exactly, for the float cases) first
    # exp(-|x|) never overflows: 1/(1+e^-x) for x >= 0, e^x/(1+e^x) below, exact to float64 rounding on both tails.
    # Block by block, in place: the same operations on the same values as the whole-array
    # np.where(x >= 0, 1 / (1 + t), t / (1 + t)) with t = exp(-|x|), so the same bits (tests/test_references.py).
    out = np.empty(x.shape, dtype=np.float64)
    flat_x, flat_out = x.reshape(-1), out.reshape(-1)
    scratch = np.empty((2, min(x.size, BLOCK)), dtype=np.float64)
    masks = np.empty(scratch.shape[1], dtype=bool)
    for start in range(0, x.size, BLOCK):
        xs, t = flat_x[start:start + BLOCK], flat_out[start:start + BLOCK]
        d, r, nonneg = scratch[0, :xs.size], scratch[1, :xs.size], masks[:xs.size]
        np.copyto(t, xs, casting="unsafe")  # x in float64
        np.greater_equal(t, 0, out=nonneg)  # NaN: False, as np.where saw it
        np.abs(t, out=t)
        np.negative(t, out=t)
        np.exp(t, out=t)
        np.add(t, 1.0, out=d)  # 1 + t
        np.divide(1.0, d, out=r)  # 1 / (1 + t), taken where x >= 0
        np.divide(t, d, out=t)  # t / (1 + t), kept elsewhere (both whole: faster than two masked divisions)
        np.copyto(t, r, where=nonneg)
    return out


def _sigmoid_work(shapes: dict[str, tuple[int, ...]], itemsize: int) -> Work:
    n = int(np.prod(shapes["x"]))
    return Work(bytes_moved=2 * n * itemsize, flops=4 * n, unit="vector")


def _matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.asarray(a, dtype=np.float64) @ np.asarray(b, dtype=np.float64)  # a copy only of what is not float64


def _matmul_work(shapes: dict[str, tuple[int, ...]], itemsize: int) -> Work:
    (m, k), (_, n) = shapes["a"], shapes["b"]
    return Work(bytes_moved=(m * k + k * n + m * n) * itemsize, flops=2 * m * k * n, unit="tensor")


# Builtin names (substrings) whose counted elements are evidence of the work. Activations: a sigmoid may be
# __bang_active_sigmoid, a Taylor variant, or exp + reciprocal/division. Multiplies: __bang_matmul and conv
# count as tensor multiply-adds in the record; an element-wise multiply on vectors is a multiply-add each.
ACTIVATION_BUILTINS = ("active", "sigmoid", "exp", "recip", "div")
MULTIPLY_BUILTINS = ("mul", "mlp", "conv", "fma", "fusion")


@dataclass(frozen=True)
class RequiredWork:
    """What the launches of one call (its checked invocation) must at least have counted.

    Elements read/written are counted from GDRAM DMA bytes (over the case's item size) plus scalar GDRAM loads
    and stores, by kernel code only. `activation_elements`: elements through an ACTIVATION_BUILTINS builtin, or
    min(scalar loads, scalar stores) for a scalar path (the emulator cannot see scalar math, only its accesses).
    `multiply_adds`: tensor multiply-adds + elements of MULTIPLY_BUILTINS builtins + scalar loads (a scalar
    multiply-add loads its operands; 2x2 register blocking still loads one per multiply-add).
    """

    gdram_read_elements: int
    gdram_write_elements: int
    activation_elements: int = 0
    multiply_adds: int = 0


def _sigmoid_required(shapes: dict[str, tuple[int, ...]]) -> RequiredWork:
    n = int(np.prod(shapes["x"]))
    return RequiredWork(gdram_read_elements=n, gdram_write_elements=n, activation_elements=n)


def _matmul_required(shapes: dict[str, tuple[int, ...]]) -> RequiredWork:
    (m, k), (_, n) = shapes["a"], shapes["b"]
    return RequiredWork(gdram_read_elements=m * k + k * n, gdram_write_elements=m * n, multiply_adds=m * n * k)


@dataclass(frozen=True)
class Misreading:
    """What the kernel's output would be had it read an operand as it lies in memory, and what that says."""

    expected: np.ndarray  # float64, as the reference computes
    explanation: str  # the cause and the fix, for the student


def _no_misreadings(inputs: dict[str, np.ndarray]) -> list[Misreading]:
    return []


def _matmul_misreadings(inputs: dict[str, np.ndarray]) -> list[Misreading]:
    """The lab's untransposed right matrix in WRAM: b (K x N) taken as the N rows of K __bang_matmul reads there,
    in the row order __bang_reshape_filter writes (bang_emu.wram_layout), when N allows that order."""
    a, b = inputs["a"], inputs["b"]
    k, n = b.shape
    if not (n <= 64 or n % 64 == 0):
        return []
    wram = b.astype(np.float64).reshape(-1).reshape(n, k)[matmul_rhs_rows(n)]
    return [Misreading(a.astype(np.float64) @ wram.T, _(
        "The output is right read from WRAM as it lies in memory: __bang_matmul takes its right-hand matrix in "
        "WRAM as N rows of K (column-major, Cambricon's BANG C guide), and for more than 64 columns column j in "
        "row (j % 64) * (N / 64) + j / 64 (the order __bang_reshape_filter writes), so transpose right and "
        "arrange its rows so before it goes to WRAM. The lab's own check (inputs in [1, 1.1], 10% tolerance) "
        "cannot tell layouts apart, which is why the program prints PASSED"))]


@dataclass(frozen=True)
class Reference:
    # compute(*inputs): the inputs as the student's kernel saw them, in the case's dtype (ConcreteCase.
    # reference_inputs, no float64 copy made for it); it computes in float64 and returns float64 (casting each
    # input itself: exact for the float cases), the precision every check compares against
    compute: Callable[..., np.ndarray]
    work: Callable[[dict[str, tuple[int, ...]], int], Work]
    required: Callable[[dict[str, tuple[int, ...]]], RequiredWork]
    misreadings: Callable[[dict[str, np.ndarray]], list[Misreading]] = _no_misreadings  # inputs by name


REFERENCES: dict[str, Reference] = {
    "sigmoid": Reference(_sigmoid, _sigmoid_work, _sigmoid_required),
    "matmul": Reference(_matmul, _matmul_work, _matmul_required, _matmul_misreadings),
}
