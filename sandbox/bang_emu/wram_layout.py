"""Where `__bang_matmul` reads each column of its right-hand matrix in WRAM, for host code that must reason about
it (the grader naming the cause of a wrong product). The emulator's definition is `filter_row` in
runtime/builtins.cpp (shared by __bang_reshape_filter, __bang_conv and __bang_matmul); README "__bang_matmul"."""

from __future__ import annotations

LINES = 64  # weight lines of the tensor unit


def matmul_rhs_rows(n: int) -> list[int]:
    """Row of the N x K right matrix in WRAM holding column j, for j in range(n): line j % 64, slot j // 64 (the
    order __bang_reshape_filter writes); plain row j when n <= 64. n above 64 must be a multiple of 64."""
    if n <= LINES:
        return list(range(n))
    if n % LINES:
        raise ValueError(f"__bang_matmul needs N <= 64 or a multiple of 64, got {n}")
    slots = n // LINES
    return [(j % LINES) * slots + j // LINES for j in range(n)]
