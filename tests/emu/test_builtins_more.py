"""Conversions in the six rounding modes, comparisons with a scalar, __bang_fusion and the atomics, built from a real
.mlu with cncc-emu and compared with references computed here independently (numpy; exact neighbours by search)."""

from __future__ import annotations

import numpy as np
import pytest
from emu_helpers import PROGRAMS, read_trace, run

N = 256
MODES = ["rn", "rd", "tz", "oz", "up", "dn"]


def make_inputs() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """x: exact halves, midpoints between neighbouring halves (ties), quarter points, overflow, subnormals, both
    signs; y: a smooth vector; k: int32 around 2**24 + 1 (a float detour would merge them)."""
    rng = np.random.default_rng(12)
    h = rng.choice(np.arange(0x0001, 0x7BFF, dtype=np.uint16), size=40).view(np.float16).astype(np.float64)
    up = np.nextafter(h.astype(np.float16), np.float16(np.inf)).astype(np.float64)
    vals = np.concatenate([h, (h + up) / 2, h + (up - h) / 4, h + 3 * (up - h) / 4,
                           [65504.0, 65519.0, 65520.0, 65535.0, 70000.0, 1e-8, 2.0**-25, 3 * 2.0**-26, 0.0, 1.0]])
    vals = np.concatenate([vals, -vals])
    x = np.resize(vals, N).astype(np.float32)
    x[-6:] = [1.0 + 2.0**-8, 1.0 + 3 * 2.0**-9, 3.0e38, -3.0e38, 1.0 + 2.0**-9, -(1.0 + 2.0**-9)]  # bf16 cases
    y = np.linspace(-3, 5, N, dtype=np.float32)
    k = (16777217 + np.arange(N) % 5 - 2).astype(np.int32)
    return x, y, k


def neighbours(x: np.ndarray, table: np.ndarray, overflow: float) -> tuple[np.ndarray, np.ndarray]:
    """The largest value of `table` (sorted finite values, with ±overflow standing for ±inf) <= x and the smallest >= x."""
    grid = np.concatenate([[-overflow], table, [overflow]])
    inside = np.clip(x, np.nextafter(-overflow, 0), np.nextafter(overflow, 0))  # beyond: (max finite, inf)
    lo = grid[np.searchsorted(grid, inside, side="right") - 1]
    hi = grid[np.searchsorted(grid, inside, side="left")]
    return lo, hi


def rounded(x: np.ndarray, table: np.ndarray, overflow: float, mode: str) -> np.ndarray:
    x = x.astype(np.float64)
    lo, hi = neighbours(x, table, overflow)
    toward = np.where(x >= 0, lo, hi)
    away = np.where(x >= 0, hi, lo)
    if mode == "tz":
        r = toward
    elif mode == "oz":
        r = away
    elif mode == "up":
        r = hi
    elif mode == "dn":
        r = lo
    else:
        d_t, d_a = np.abs(x - toward), np.abs(away - x)
        tie_value = away if mode == "rd" else np.nan  # rn ties: decided by the even pattern (test below)
        r = np.where((d_t < d_a) | (toward == away), toward, np.where(d_a < d_t, away, tie_value))
    r = np.where(np.abs(r) == overflow, np.copysign(np.inf, r), r)
    return r


def table_of(dtype: str) -> tuple[np.ndarray, float]:
    bits = np.arange(0x10000, dtype=np.uint32).astype(np.uint16)
    with np.errstate(invalid="ignore"):
        v = as_values(bits, dtype)
    return np.unique(v[np.isfinite(v)]), 65536.0 if dtype == "half" else 2.0**128


def as_values(bits: np.ndarray, dtype: str) -> np.ndarray:
    b = bits.astype(np.uint16)
    if dtype == "half":
        return b.view(np.float16).astype(np.float64)
    return (b.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


@pytest.fixture(scope="module")
def results(build, tmp_path_factory):
    x, y, k = make_inputs()
    data = tmp_path_factory.mktemp("builtins-more") / "inputs.bin"
    data.write_bytes(x.tobytes() + y.tobytes() + k.tobytes())
    trace = data.parent / "trace.jsonl"
    proc = run(build(PROGRAMS / "builtins_more.mlu"), data, env={"BANG_EMU_TRACE": str(trace)})
    assert proc.returncode == 0, proc.stderr
    out = {ln.split()[0]: np.array([int(v) for v in ln.split()[1:]], dtype=np.int64) for ln in proc.stdout.splitlines()}
    return out, read_trace(trace), (x, y, k)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", ["half", "bfloat16"])
def test_float_conversion_applies_the_rounding_mode(results, mode, dtype):
    out, _, (x, _, _) = results
    table, overflow = table_of(dtype)
    ref = rounded(x, table, overflow, mode)
    if mode == "rn":  # ties to even: numpy's own conversion
        with np.errstate(over="ignore"):
            ref = x.astype(np.float16).astype(np.float64) if dtype == "half" else ref
    names = [f"float2half_{mode}", f"scalar_float2half_{mode}"] if dtype == "half" else [f"float2bfloat16_{mode}"]
    for name in names:
        got = as_values(out[name], dtype)
        known = ~np.isnan(ref)  # bf16 rn ties: checked below
        np.testing.assert_array_equal(got[known], ref[known], err_msg=name)
    if dtype == "bfloat16" and mode == "rn":
        b = out["float2bfloat16_rn"]
        ties = np.isnan(ref)
        assert ties.any() and np.all(b[ties] % 2 == 0)  # ties went to the even pattern


def test_the_modes_differ_where_they_should(results):
    out, _, (x, _, _) = results
    table, overflow = table_of("half")
    lo, hi = neighbours(x.astype(np.float64), table, overflow)
    half_ties = np.flatnonzero((lo != hi) & (x - lo == hi - x) & (np.abs(x) < 65504))
    assert half_ties.size, "the inputs contain half ties"
    rn, rd = out["float2half_rn"][half_ties], out["float2half_rd"][half_ties]
    assert np.any(rn != rd)  # ties to even vs ties away


def test_bfloat16_widens_exactly(results):
    out, _, (x, _, _) = results
    got = out["bfloat162float"].astype(np.uint32).view(np.float32)
    table, overflow = table_of("bfloat16")
    np.testing.assert_array_equal(got, as_values(out["float2bfloat16_rn"], "bfloat16").astype(np.float32))


@pytest.mark.parametrize("op,fn", [("eq", np.equal), ("ne", np.not_equal), ("lt", np.less), ("le", np.less_equal),
                                   ("gt", np.greater), ("ge", np.greater_equal)])
def test_comparisons_with_a_scalar(results, op, fn):
    out, _, (x, _, k) = results
    got = out[op].astype(np.uint32).view(np.float32)
    np.testing.assert_array_equal(got, fn(x, np.float32(0.5)).astype(np.float32))
    np.testing.assert_array_equal(out[f"{op}_int"], fn(k, 16777217).astype(np.int64))  # exact in int32


def test_fusion_operations(results):
    out, _, (x, y, k) = results
    a, b = x.astype(np.float64), y.astype(np.float64)
    c = 0.5
    ref = {"FMA": a * b + c, "FMS": a * b - c, "FAM": (a + b) * c, "FSM": (a - b) * c, "FAA": a + b + c,
           "FAS": a + b - c, "FSA": a - b + c, "FSS": a - b - c, "FMA_scalar_src1": a * 2 + b,
           "FMS_cycle": a * np.tile(b[: N // 4], 4) - c}
    for name, r in ref.items():
        got = out[name].astype(np.uint32).view(np.float32)
        with np.errstate(over="ignore"):
            want = r.astype(np.float32)  # one rounding of the exact result (3e38 * y overflows to inf)
        np.testing.assert_array_equal(got, want, err_msg=name)
    np.testing.assert_array_equal(out["FAM_int"], (k.astype(np.int64) + 1) * -1)


def test_elementwise_families_and_fixed_point_conversions(results):
    out, _, (x, y, k) = results
    f = {name: out[name].astype(np.uint32).view(np.float32) for name in
         ["maxequal", "minequal", "and", "abs", "floor", "div", "cycle_lt", "int322float_dn"]}
    np.testing.assert_array_equal(f["maxequal"], np.maximum(x, y))
    np.testing.assert_array_equal(f["minequal"], np.minimum(x, y))
    np.testing.assert_array_equal(f["and"], ((x != 0) & (y != 0)).astype(np.float32))
    np.testing.assert_array_equal(f["abs"], np.abs(x))
    np.testing.assert_array_equal(f["floor"], np.floor(y))
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(f["div"], (x.astype(np.float64) / y).astype(np.float32))
    np.testing.assert_array_equal(f["cycle_lt"], (x < np.tile(y[: N // 4], 4)).astype(np.float32))
    j = k.astype(np.int64) - 16777215
    np.testing.assert_array_equal(out["band_int"], k & j)
    np.testing.assert_array_equal(out["bor_int"], k | j)
    np.testing.assert_array_equal(out["or_int"], (j != 0).astype(np.int64))
    y4 = y.astype(np.float64) * 4
    np.testing.assert_array_equal(out["float2int32_rd"], np.sign(y4) * np.floor(np.abs(y4) + 0.5))  # ties away
    np.testing.assert_array_equal(out["float2int32"], np.trunc(y))
    exact = k.astype(np.float64) * 2  # 2**25 + small: not all representable in float
    want = np.where(exact.astype(np.float32) > exact, np.nextafter(exact.astype(np.float32), np.float32(-np.inf)),
                    exact.astype(np.float32))
    np.testing.assert_array_equal(f["int322float_dn"], want)


def test_atomics_are_atomic_across_tasks(results):
    out, _, _ = results
    assert out["counter"][0] == 16
    assert sorted(out["olds"].tolist()) == list(range(16))  # every task saw a distinct old value
    assert np.float32(out["fsum"].astype(np.uint32).view(np.float32)[0]) == np.float32(8.0)
    np.testing.assert_array_equal(out["vec"].astype(np.uint32).view(np.float32), np.full(64, sum(range(1, 17)),
                                                                                           np.float32))
    assert out["imax"][0] == 45
    assert out["cas_wins"][0] == 1 and 100 <= out["cas_word"][0] < 116


def test_new_builtins_are_counted_and_charged(results):
    _, launches, _ = results
    conv, fuse, atomics, _ = launches
    assert conv["work"]["vector_elements"]["__bang_float2half_rd"] == N
    assert conv["work"]["vector_elements"]["__bang_float2bfloat16_up"] == N
    assert fuse["work"]["vector_elements"]["__bang_fusion"] == 11 * N
    assert fuse["work"]["vector_elements"]["__bang_ge_scalar"] == 2 * N
    assert atomics["work"]["vector_elements"]["__bang_atomic_reduce_add"] == 16 * 64
    # the atomics read and write GDRAM (every call, old values or not): counted in the traffic the host checks ...
    moved = 16 * (4 + 4 + 256 + 4 + 4) + 4
    assert atomics["bytes_moved"] == {"GDRAM2ATOMIC": moved, "ATOMIC2GDRAM": moved}
    # ... and charged as blocking IO: 16 tasks x 5 round trips of at least the IO latency, spread over 16 cores
    assert atomics["time_split_us"]["io"] >= 5 * 0.7


def test_builtin_operands_are_bounds_checked(build, tmp_path):
    src = tmp_path / "overrun.mlu"
    src.write_text("""#include <bang.h>
__mlu_global__ void k(float *out) {
  __nram__ float a[64];
  __nram__ half h[32];
  __bang_write_zero(a, 64);
  __bang_float2half_rd(h, a, 64);
}
int main() {
  float *d; cnrtMalloc((void **)&d, 256); cnrtQueue_t q; cnrtQueueCreate(&q);
  k<<<cnrtDim3_t{1, 1, 1}, cnrtFuncTypeBlock, q>>>(d);
  return cnrtQueueSync(q) == cnrtSuccess ? 0 : 7;
}
""")
    proc = run(build(src))
    assert proc.returncode == 7
    assert "onchip-out-of-bounds" in proc.stderr and "__bang_float2half_rd" in proc.stderr and "'h'" in proc.stderr


def test_atomic_target_must_be_device_memory(build, tmp_path):
    src = tmp_path / "atomic_nram.mlu"
    src.write_text("""#include <bang.h>
__mlu_global__ void k(int *out) {
  __nram__ int old[1];
  __nram__ int local[1];
  __bang_atomic_add(old, local, 1);
}
int main() {
  int *d; cnrtMalloc((void **)&d, 4); cnrtQueue_t q; cnrtQueueCreate(&q);
  k<<<cnrtDim3_t{1, 1, 1}, cnrtFuncTypeBlock, q>>>(d);
  return cnrtQueueSync(q) == cnrtSuccess ? 0 : 7;
}
""")
    proc = run(build(src))
    assert proc.returncode == 7
    assert "__bang_atomic_add" in proc.stderr and "GDRAM" in proc.stderr
