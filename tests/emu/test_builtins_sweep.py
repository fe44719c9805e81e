"""The builtins the public .mlu sweep found missing (__bang_move, __bang_lut, __bang_findfirst1, __bang_argmax/argmin,
the returning __bang_count, integer __bang_cycle_add, __bang_rotate90), each built from a real .mlu with cncc-emu and
compared with numpy, with its operand bounds check; and the sweep's failure classifier
(benchmarks/public_mlu_sweep.py) on compiler output captured here."""

from __future__ import annotations

import functools
import importlib.util
import sys
from types import ModuleType

import numpy as np
import pytest
from emu_helpers import REPO, cncc, read_trace, run

N = 64
H, W = 4, 16  # rotate90: src[H][W]

KERNEL = r"""
#include <bang.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#define N 64
#define H 4
#define W 16

// one line per result: its name and its raw bytes, for the test to reinterpret
__mlu_func__ void emit(const char *name, const void *p, int bytes) {
  printf("%s", name);
  for (int i = 0; i < bytes; ++i) printf(" %u", ((const unsigned char *)p)[i]);
  printf("\n");
}

__mlu_global__ void sweep(const float *gx, const uint32_t *gi, const int32_t *gt) {
  __nram__ float x[N], z[N], y[2 * N], zeros[N], ext[4];
  __nram__ half hx[N], hz[N], hext[6];
  __nram__ uint32_t idx[N];
  __nram__ uint16_t idx16[N];
  __nram__ int32_t tab[64], r32[N], seg32[W];
  __nram__ int16_t tab16[64], r16[N];
  __nram__ int8_t bx[N], bz[N];
  __nram__ unsigned int u[4], scalars[8];
  __memcpy(x, gx, N * sizeof(float), GDRAM2NRAM);
  __memcpy(idx, gi, N * sizeof(uint32_t), GDRAM2NRAM);
  __memcpy(tab, gt, 64 * sizeof(int32_t), GDRAM2NRAM);
  __bang_float2half_rn(hx, x, N);
  __bang_write_zero(zeros, N);
  for (int i = 0; i < N; ++i) {
    idx16[i] = (uint16_t)idx[i];
    tab16[i] = (int16_t)tab[i];
    bx[i] = (int8_t)(idx[i] - 32);
  }

  __bang_move(z, x, N * sizeof(float));
  emit("move", z, N * 4);
  __bang_write_zero(y, 2 * N);
  __bang_move(y, x, sizeof(float), 2 * sizeof(float), sizeof(float), N);  // interleave: N segments of 4 B
  emit("move_strided", y, 2 * N * 4);

  __bang_lut(r32, idx, tab, N, 64);
  emit("lut32", r32, N * 4);
  __bang_move(r32, idx, N * sizeof(int32_t));
  __bang_lut(r32, (uint32_t *)r32, tab, N, 64);  // in place, as mlu-ops does
  emit("lut32_inplace", r32, N * 4);
  __bang_lut(r16, idx16, tab16, N, 64);
  emit("lut16", r16, N * 2);

  __bang_count(u, x, N);
  __bang_findfirst1(u + 1, x, N);
  __bang_findfirst1(u + 2, zeros, N);
  scalars[0] = u[0];
  scalars[1] = __bang_count(x, N);
  scalars[2] = __bang_count(hx, N);
  scalars[3] = u[1];
  scalars[4] = __bang_findfirst1(x, N);
  scalars[5] = __bang_findfirst1(hx, N);
  scalars[6] = u[2];
  scalars[7] = __bang_findfirst1(zeros, N);
  emit("scan", scalars, 8 * 4);

  __bang_write_value(ext, 4, -1.0f);  // what argmax must leave alone after its 12 B
  __bang_argmax(ext, x, N);
  emit("argmax", ext, 16);
  __bang_write_value(ext, 4, -1.0f);
  __bang_argmin(ext, x, N);
  emit("argmin", ext, 16);
  __bang_write_value(hext, 6, (half)-1.0f);
  __bang_argmax(hext, hx, N);
  emit("argmax_half", hext, 12);

  __bang_rotate90(z, x, H, W);
  emit("rotate90", z, N * 4);
  __bang_rotate90(hz, hx, H, W);
  emit("rotate90_half", hz, N * 2);
  __bang_rotate90(bz, bx, H, W);
  emit("rotate90_int8", bz, N);

  for (int i = 0; i < W; ++i) seg32[i] = tab[i];
  __bang_cycle_add(r32, (int32_t *)idx, seg32, N, W);
  emit("cycle_add_int", r32, N * 4);
  __bang_cycle_sub(r32, (int32_t *)idx, seg32, N, W);
  emit("cycle_sub_int", r32, N * 4);
}

int main(int argc, char **argv) {
  float x[N];
  uint32_t idx[N];
  int32_t tab[64];
  FILE *in = fopen(argv[1], "rb");
  if (!in || fread(x, 4, N, in) != N || fread(idx, 4, N, in) != N || fread(tab, 4, 64, in) != 64) return 2;
  fclose(in);
  float *gx; uint32_t *gi; int32_t *gt;
  cnrtMalloc((void **)&gx, sizeof x); cnrtMalloc((void **)&gi, sizeof idx); cnrtMalloc((void **)&gt, sizeof tab);
  cnrtMemcpy(gx, x, sizeof x, cnrtMemcpyHostToDev);
  cnrtMemcpy(gi, idx, sizeof idx, cnrtMemcpyHostToDev);
  cnrtMemcpy(gt, tab, sizeof tab, cnrtMemcpyHostToDev);
  cnrtQueue_t q;
  cnrtQueueCreate(&q);
  sweep<<<cnrtDim3_t{1, 1, 1}, cnrtFuncTypeBlock, q>>>(gx, gi, gt);
  return cnrtQueueSync(q) == cnrtSuccess ? 0 : 7;
}
"""


def make_inputs() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """x: small integers with zeros, a repeated maximum and minimum (first index wins) and a leading zero run;
    idx: table indices; tab: distinct signed values that fit int16."""
    rng = np.random.default_rng(12)
    x = rng.integers(-4, 5, size=N).astype(np.float32)
    x[:3] = 0.0
    x[[9, 30, 50]] = 7.0
    x[[12, 40]] = -6.0
    idx = rng.integers(0, 64, size=N).astype(np.uint32)
    tab = (rng.permutation(64) * 37 - 1000).astype(np.int32)
    return x, idx, tab


@pytest.fixture(scope="module")
def results(build, tmp_path_factory):
    x, idx, tab = make_inputs()
    work = tmp_path_factory.mktemp("builtins-sweep")
    src = work / "builtins_sweep.mlu"
    src.write_text(KERNEL)
    data = work / "inputs.bin"
    data.write_bytes(x.tobytes() + idx.tobytes() + tab.tobytes())
    trace = work / "trace.jsonl"
    proc = run(build(src), data, env={"BANG_EMU_TRACE": str(trace)})
    assert proc.returncode == 0, proc.stderr
    out = {ln.split()[0]: np.array([int(v) for v in ln.split()[1:]], dtype=np.uint8).tobytes()
           for ln in proc.stdout.splitlines()}
    return out, read_trace(trace), (x, idx, tab)


def as_(raw: bytes, dtype: str) -> np.ndarray:
    return np.frombuffer(raw, dtype=dtype)


def test_move_contiguous_and_strided(results):
    out, _, (x, _, _) = results
    np.testing.assert_array_equal(as_(out["move"], "<f4"), x)
    ref = np.zeros(2 * N, np.float32)
    ref[0::2] = x  # N segments of one float, written every 8 B
    np.testing.assert_array_equal(as_(out["move_strided"], "<f4"), ref)


def test_lut_looks_up_each_index(results):
    out, _, (_, idx, tab) = results
    np.testing.assert_array_equal(as_(out["lut32"], "<i4"), tab[idx])
    np.testing.assert_array_equal(as_(out["lut32_inplace"], "<i4"), tab[idx])
    np.testing.assert_array_equal(as_(out["lut16"], "<i2"), tab.astype(np.int16)[idx])


def test_count_and_findfirst1_in_both_forms(results):
    out, _, (x, _, _) = results
    count, first = np.count_nonzero(x), int(np.flatnonzero(x)[0])
    assert first > 0  # the leading zeros are skipped
    stored_count, count_f, count_h, stored_first, first_f, first_h, stored_none, none = as_(out["scan"], "<u4")
    assert stored_count == count_f == count_h == count
    assert stored_first == first_f == first_h == first
    assert stored_none == none == 0xFFFFFFFF  # all zero: all ones, (int)-1 for mlu-ops/torch_mlu


@pytest.mark.parametrize("name,pick,dtype,width", [("argmax", np.argmax, "<f4", 4), ("argmin", np.argmin, "<f4", 4),
                                                   ("argmax_half", np.argmax, "<f2", 2)])
def test_argmax_value_then_64_bit_index(results, name, pick, dtype, width):
    out, _, (x, _, _) = results
    raw = out[name]
    i = int(pick(x))  # numpy also returns the first of equal extremes
    assert as_(raw[:width], dtype)[0] == x[i]
    assert int.from_bytes(raw[width:width + 8], "little") == i  # index, then zeros (cncc 3xx docs)
    assert raw[width + 8:] == np.full(len(raw) - width - 8, -1, dtype).tobytes()[:len(raw) - width - 8]


@pytest.mark.parametrize("name,dtype", [("rotate90", "<f4"), ("rotate90_half", "<f2"), ("rotate90_int8", "i1")])
def test_rotate90_turns_clockwise(results, name, dtype):
    out, _, (x, idx, _) = results
    src = (idx.astype(np.int64) - 32).astype(np.int8) if dtype == "i1" else x.astype(dtype)
    np.testing.assert_array_equal(as_(out[name], dtype), np.rot90(src.reshape(H, W), k=-1).ravel())


def test_integer_cycle_add_and_sub(results):
    out, _, (_, idx, tab) = results
    seg = np.tile(tab[:W], N // W)
    np.testing.assert_array_equal(as_(out["cycle_add_int"], "<i4"), idx.astype(np.int32) + seg)
    np.testing.assert_array_equal(as_(out["cycle_sub_int"], "<i4"), idx.astype(np.int32) - seg)


def test_new_builtins_are_counted_and_charged(results):
    _, launches, _ = results
    (launch,) = launches
    elements = launch["work"]["vector_elements"]
    assert elements["__bang_move"] == 3 * N * 4  # bytes: contiguous, strided, the in-place lut's copy
    assert elements["__bang_lut"] == 3 * N
    assert elements["__bang_count"] == 3 * N and elements["__bang_findfirst1"] == 5 * N
    assert elements["__bang_argmax"] == 2 * N and elements["__bang_argmin"] == N
    assert elements["__bang_rotate90"] == 3 * N
    assert elements["__bang_cycle_add"] == N and elements["__bang_cycle_sub"] == N
    assert launch["time_split_us"]["vector"] > 0


OVERRUNS = {  # builtin: (statement overrunning array 's' or reading past 'a', the array named in the error)
    "__bang_move": ("__bang_move(s, a, 64 * sizeof(float));", "'s'"),
    "__bang_move strided": ("__bang_move(s, a, 4, 8, 4, 8);", "'s'"),
    "__bang_lut": ("__bang_lut(r, u, t, 64, 64);", "'t'"),
    "__bang_findfirst1": ("unsigned v = __bang_findfirst1(a, 128); out[0] = v;", "'a'"),
    "__bang_count": ("unsigned v = __bang_count(a, 128); out[0] = v;", "'a'"),
    "__bang_argmax": ("__bang_argmax(s2, a, 64);", "'s2'"),
    "__bang_rotate90": ("__bang_rotate90(s, a, 8, 8);", "'s'"),
    "__bang_cycle_add": ("__bang_cycle_add(r, r, (int32_t *)s, 64, 16);", "'s'"),
}
OVERRUN_KERNEL = """#include <bang.h>
__mlu_global__ void k(float *out) {
  __nram__ float a[64];
  __nram__ float s[8];
  __nram__ float s2[2];
  __nram__ int32_t r[64];
  __nram__ uint32_t u[64];
  __nram__ int32_t t[32];
  __bang_write_zero(a, 64);
  __bang_write_zero(r, 64);
  %s
}
int main() {
  float *d; cnrtMalloc((void **)&d, 256); cnrtQueue_t q; cnrtQueueCreate(&q);
  k<<<cnrtDim3_t{1, 1, 1}, cnrtFuncTypeBlock, q>>>(d);
  return cnrtQueueSync(q) == cnrtSuccess ? 0 : 7;
}
"""


@pytest.mark.parametrize("case", OVERRUNS)
def test_operands_are_bounds_checked(build, tmp_path, case):
    statement, array = OVERRUNS[case]
    src = tmp_path / "overrun.mlu"
    src.write_text(OVERRUN_KERNEL % statement)
    proc = run(build(src))
    assert proc.returncode == 7, proc.stderr
    builtin = case.split()[0]
    assert f"onchip-out-of-bounds: {builtin}" in proc.stderr and array in proc.stderr, proc.stderr


def test_lut_index_outside_the_table_is_an_error(build, tmp_path):
    src = tmp_path / "lut_index.mlu"
    src.write_text(OVERRUN_KERNEL % "for (int i = 0; i < 64; ++i) u[i] = i;\n  __bang_lut(r, u, t, 64, 32);")
    proc = run(build(src))
    assert proc.returncode == 7
    assert "invalid-argument: __bang_lut: src[32] = 32 is outside the table of 32 entries" in proc.stderr


# ------------------------------------------------------------------------------------ the sweep's classifier
@functools.cache
def load_sweep() -> ModuleType:
    spec = importlib.util.spec_from_file_location("public_mlu_sweep", REPO / "benchmarks" / "public_mlu_sweep.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses resolve their annotations through it
    spec.loader.exec_module(module)
    return module


CLASSIFIER_CASES = {  # first statement of the kernel -> the group the sweep files its first error under
    "__bang_not_a_builtin(a, a, 64); __bang_nor_this(a, 64);": "missing builtin __bang_not_a_builtin",
    "struct S *p = 0; __bang_count((unsigned int *)a, p, 64);": "missing builtin overload __bang_count",
    "helper_the_student_forgot(a);": "code: undeclared 'helper_the_student_forgot'",
    'asm volatile("nop;");': "unsupported: inline assembly",
}


@pytest.mark.parametrize("statement", CLASSIFIER_CASES)
def test_classifier_groups_real_compiler_output(tmp_path, statement):
    sweep = load_sweep()
    src = tmp_path / "student.mlu"
    src.write_text(f"#include <bang.h>\n__mlu_global__ void k(float *o) {{\n  __nram__ float a[64];\n  {statement}\n}}\n")
    proc = cncc("-c", "--bang-mlu-arch=mtp_372", src, "-o", tmp_path / "student.o")
    assert proc.returncode != 0
    group, location, message = sweep.classify(proc.stderr)
    assert group == CLASSIFIER_CASES[statement], proc.stderr
    assert location.endswith("student.mlu:4") or location.startswith(str(src) + ":4"), location
    if group.startswith("missing builtin __bang_not"):  # every missing builtin is listed, not only the first
        assert sweep.missing_builtins(proc.stderr) == ["__bang_nor_this", "__bang_not_a_builtin"]


@pytest.mark.parametrize("header,group", [("bang_fusor.h", "missing header bang_fusor.h (cncc ships it)"),
                                          ("ops/own_helpers.h", "missing header ops/own_helpers.h (not in folder)")])
def test_classifier_tells_cncc_headers_from_project_headers(tmp_path, header, group):
    sweep = load_sweep()
    src = tmp_path / "student.mlu"
    src.write_text(f'#include "{header}"\n__mlu_global__ void k(float *o) {{}}\n')
    proc = cncc("-c", "--bang-mlu-arch=mtp_372", src, "-o", tmp_path / "student.o")
    assert proc.returncode != 0
    assert sweep.classify(proc.stderr)[0] == group, proc.stderr


def test_report_counts_per_repository_and_group():
    sweep = load_sweep()
    results = [sweep.Result("a/x", "k1.mlu", True), sweep.Result("a/x", "k2.mlu", False, "missing builtin __bang_q",
                                                                  missing=["__bang_q"]),
               sweep.Result("b/y", "k3.mlu", False, "missing builtin __bang_q", missing=["__bang_q", "__bang_r"])]
    text = sweep.report(results)
    assert any(line.split() == ["a/x", "2", "1", "1"] for line in text.splitlines())
    assert any(line.split() == ["total", "3", "1", "2"] for line in text.splitlines())
    assert "   2  missing builtin __bang_q" in text
    assert "__bang_q (2), __bang_r (1)" in text

