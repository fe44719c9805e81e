"""mlu-ops as the builtins' conformance suite (issue 29): what the sweep of its kernels made the emulator add
(`__mlu_vector__` functions on vector registers, `__bang_filter_bitindex`, `__cn_vector_hypot_f32`, the 3-D
`__memcpy` with its own shape on each side, the value-typed fills, a refill behind a store on one DMA queue)
checked against numpy on a program of ours; then, from the mirror (skipped visibly without it), mlu-ops' own abs
and div kernels driven by their own GTest cases against their CPU references (scripts/mluops_conformance.py), and
its FFT butterfly, which pins the order `__bang_matmul` reads its right matrix in."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import numpy as np
import pytest
from emu_helpers import REPO, cncc, run

KERNEL = r"""
#include <bang.h>
#include <stdint.h>
#include <stdio.h>

__mlu_vector__ void arange(float *dst, float start, float step, int n) {
  vv_float v, inc;
  unsigned lanes = __vv_get_length() / sizeof(float);
  __vv_index(v, start, step);
  __vv_move(inc, (float)(lanes * step));
  for (unsigned i = 0; i < (unsigned)n; i += lanes) {
    __vv_store(dst + i, v);
    __vv_add(v, v, inc);
  }
}

__mlu_vector__ void mulhilo(uint32_t *lo, uint32_t *hi, uint32_t *x3, uint32_t a, uint32_t b) {
  vv_uint32 x, l, h, t;
  __vv_index(x, a, (uint32_t)0x01000193u);
  __vv_mul(l, x, b);
  __vv_mulh(h, x, b);
  __vv_trixor(t, x, l, h);
  __vv_store(lo, l, 64);
  __vv_store(hi, h, 64);
  __vv_store(x3, t, 64);
}

__mlu_global__ void probe(float *out, const float *in) {
  __nram__ float ar[128], pairs[64], picked[64], hyp[16], bd[24], seg[6], fb[4], tile[64];
  __nram__ uint32_t lo[64], hi[64], x3[64];
  __nram__ int8_t mask[8];
  arange(ar, 1.5f, 0.25f, 128);
  mulhilo(lo, hi, x3, 3u, 0xD2511F53u);
  for (int i = 0; i < 64; i++) pairs[i] = (float)(i % 2 ? -(i / 2) : 3 * (i / 2));
  __bang_write_value(mask, 8, (int8_t)0xAA);
  unsigned k = __bang_filter_bitindex(picked, pairs, mask, 64);
  __bang_write_value(mask, 8, (int8_t)0x55);
  __bang_filter_bitindex(picked + 32, pairs, mask, 64);
  __cn_vector_hypot_f32(16, hyp, picked, picked + 32);
  for (int i = 0; i < 6; i++) seg[i] = (float)(10 * i);
  // broadcast: 3 levels x 4 points, element 2*level of seg repeated (mlu-ops ms_deform_attn_utils.h)
  __memcpy(bd, seg, sizeof(float), NRAM2NRAM, sizeof(float), 3, 4 * sizeof(float), 2, 0, 3, 2 * sizeof(float), 2);
  // the fill's element is the value's type: 8 bytes of 0x3F into a float buffer
  __bang_write_value(fb, 4, 0.0f);
  __bang_write_value(fb, 8, (int8_t)0x3F);
  // store a tile and refill it right behind on the same DMA queue (mlu-ops' 5-stage pipelines)
  __memcpy(tile, in, 64 * sizeof(float), GDRAM2NRAM);
  __memcpy_async(out, tile, 64 * sizeof(float), NRAM2GDRAM);
  __memcpy_async(tile, in + 64, 64 * sizeof(float), GDRAM2NRAM);
  __sync_io();
  __memcpy(out + 64, tile, 64 * sizeof(float), NRAM2GDRAM);
  printf("fb %08x %08x %08x %08x\n", *(uint32_t *)&fb[0], *(uint32_t *)&fb[1], *(uint32_t *)&fb[2],
         *(uint32_t *)&fb[3]);
  printf("count %u\n", k);
  for (int i = 0; i < 128; i++) printf("ar %g\n", ar[i]);
  for (int i = 0; i < 64; i++) printf("mul %u %u %u\n", lo[i], hi[i], x3[i]);
  for (int i = 0; i < 64; i++) printf("picked %g\n", picked[i]);
  for (int i = 0; i < 16; i++) printf("hyp %.9g\n", hyp[i]);
  for (int i = 0; i < 12; i++) printf("bd %g\n", bd[i]);
}

int main() {
  cnrtQueue_t q;
  cnrtQueueCreate(&q);
  cnrtDim3_t dim = {1, 1, 1};
  float host[128], back[128];
  for (int i = 0; i < 128; i++) host[i] = (float)(i * 3 + 1);
  float *in, *out;
  cnrtMalloc((void **)&in, sizeof host);
  cnrtMalloc((void **)&out, sizeof host);
  cnrtMemcpy(in, host, sizeof host, cnrtMemcpyHostToDev);
  probe<<<dim, cnrtFuncTypeBlock, q>>>(out, in);
  if (cnrtQueueSync(q) != cnrtSuccess) return 1;
  cnrtMemcpy(back, out, sizeof back, cnrtMemcpyDevToHost);
  for (int i = 0; i < 128; i++) printf("copied %g\n", back[i]);
  return 0;
}
"""


def _values(stdout: str, tag: str) -> list[list[str]]:
    return [line.split()[1:] for line in stdout.splitlines() if line.split()[:1] == [tag]]


def test_new_builtins_against_numpy(tmp_path: Path, build) -> None:
    src = tmp_path / "probe.mlu"
    src.write_text(KERNEL)
    proc = run(build(src))
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    # a register is 256 B (64 floats): two registers of arange, continuing across them
    np.testing.assert_allclose([float(v[0]) for v in _values(out, "ar")], 1.5 + 0.25 * np.arange(128))
    x = (3 + 0x01000193 * np.arange(64, dtype=np.uint64)) & 0xFFFFFFFF
    prod = x * np.uint64(0xD2511F53)
    mul = np.array([[int(a) for a in v] for v in _values(out, "mul")], dtype=np.uint64)
    np.testing.assert_array_equal(mul[:, 0], prod & 0xFFFFFFFF)
    np.testing.assert_array_equal(mul[:, 1], prod >> np.uint64(32))
    np.testing.assert_array_equal(mul[:, 2], x ^ (prod & 0xFFFFFFFF) ^ (prod >> np.uint64(32)))
    # bit order most significant first: 0xAA keeps the even elements, 0x55 the odd ones
    assert _values(out, "count") == [["32"]]
    pairs = np.array([(-(i // 2) if i % 2 else 3 * (i // 2)) for i in range(64)], dtype=np.float32)
    picked = np.array([float(v[0]) for v in _values(out, "picked")], dtype=np.float32)
    np.testing.assert_array_equal(picked, np.concatenate([pairs[0::2], pairs[1::2]]))
    np.testing.assert_allclose([float(v[0]) for v in _values(out, "hyp")], np.hypot(pairs[0:32:2], pairs[1:32:2]),
                               rtol=1e-6)
    np.testing.assert_array_equal([float(v[0]) for v in _values(out, "bd")], np.repeat([0.0, 20.0, 40.0], 4))
    assert _values(out, "fb") == [["3f3f3f3f", "3f3f3f3f", "00000000", "00000000"]]
    # the refill behind the store on the same queue: no hazard, and the store saw the old tile
    assert "async-hazard" not in proc.stderr
    np.testing.assert_array_equal([float(v[0]) for v in _values(out, "copied")], np.arange(128) * 3.0 + 1)


# ------------------------------------------------------------------------------------------ mlu-ops' own kernels
def _conformance():
    spec = importlib.util.spec_from_file_location("mluops_conformance", REPO / "scripts" / "mluops_conformance.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def _require_mirror(conf) -> None:
    if not (conf.DEFAULT_MIRROR / "HEAD").exists():
        pytest.skip(f"no mirror of Cambricon/mlu-ops at {conf.DEFAULT_MIRROR} (fetch github:Cambricon/mlu-ops, or "
                    "set MLUOPS_MIRROR to its git directory)")


def test_mluops_abs_matches_its_cpu_reference() -> None:
    conf = _conformance()
    _require_mirror(conf)
    [result] = conf.run(conf.DEFAULT_MIRROR, ["abs"])
    assert result.built, result.build_error
    by_case = {c.case: c for c in result.cases}
    # the plain and the complex case run (the strided ones need mlu-ops' host library and are skipped)
    for name in ("case_0", "case_4_complex"):
        case = by_case[name]
        assert case.status == "passed", (case.detail, case.diffs)
        assert case.diffs["DIFF1"] <= case.thresholds["DIFF1"] and case.diffs["DIFF2"] <= case.thresholds["DIFF2"]
    assert all(c.status == "skipped" for n, c in by_case.items() if "stride" in n)


FFT_PROBE = r"""// mlu-ops' own first-stage butterfly (a complex matmul through __bang_reshape_filter + __bang_matmul), driven
// with a random W and X; our program, mlu-ops' header from the mirror.
#include <bang.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include "kernels/kernel.h"
__wram__ int8_t wram_buffer[MAX_WRAM_SIZE];
// not reached for radix 16 and N a multiple of 64 (the probe keeps the padding path out)
__mlu_func__ void __bang_pad(float *, float *, int, int, int, int, int, int, int) { printf("pad reached\n"); }
#include "kernels/fft/fft_optm_device/fft_generic_butterfly.h"
#define RADIX 16
#ifndef BN
#define BN 64
#endif
__mlu_global__ void probe(float *out, const float *w, const float *x) {
  __nram__ float in_r[RADIX * BN], in_i[RADIX * BN], out_r[RADIX * BN * 2], out_i[RADIX * BN];
  __nram__ float dft[2 * RADIX * RADIX];
  __nram__ float scratch[4 * 16 * 2 * BN * 2 + 4096];
  __memcpy(dft, w, sizeof(dft), GDRAM2NRAM);
  __memcpy(in_r, x, sizeof(in_r), GDRAM2NRAM);
  __memcpy(in_i, x + RADIX * BN, sizeof(in_i), GDRAM2NRAM);
  computeGenericButterflyFirststageMat<float>(out_r, out_i, in_r, in_i, scratch, dft, 1, BN, BN, 1, RADIX);
  __memcpy(out, out_r, RADIX * BN * sizeof(float), NRAM2GDRAM);
  __memcpy(out + RADIX * BN, out_i, RADIX * BN * sizeof(float), NRAM2GDRAM);
}
int main() {
  static float w[2 * RADIX * RADIX], x[2 * RADIX * BN], o[2 * RADIX * BN];
  srand(7);
  for (float &v : w) v = (float)(rand() % 17 - 8);
  for (float &v : x) v = (float)(rand() % 17 - 8);
  float *dw, *dx, *dout;
  cnrtMalloc((void **)&dw, sizeof w); cnrtMalloc((void **)&dx, sizeof x); cnrtMalloc((void **)&dout, sizeof o);
  cnrtMemcpy(dw, w, sizeof w, cnrtMemcpyHostToDev); cnrtMemcpy(dx, x, sizeof x, cnrtMemcpyHostToDev);
  cnrtQueue_t q; cnrtQueueCreate(&q);
  cnrtDim3_t dim = {1, 1, 1};
  probe<<<dim, cnrtFuncTypeBlock, q>>>(dout, dw, dx);
  if (cnrtQueueSync(q) != cnrtSuccess) return 1;
  cnrtMemcpy(o, dout, sizeof o, cnrtMemcpyDevToHost);
  // out[b][k] = sum_j W[k][j] X[j][b] (complex), W = w[0:R*R] + i w[R*R:], X = x[0:R*BN] + i x[R*BN:]
  int bad = 0;
  for (int b = 0; b < BN; b++)
    for (int k = 0; k < RADIX; k++) {
      double re = 0, im = 0;
      for (int j = 0; j < RADIX; j++) {
        double wr = w[k * RADIX + j], wi = w[RADIX * RADIX + k * RADIX + j];
        double xr = x[j * BN + b], xi = x[RADIX * BN + j * BN + b];
        re += wr * xr - wi * xi; im += wr * xi + wi * xr;
      }
      if (o[b * RADIX + k] != re || o[RADIX * BN + b * RADIX + k] != im) bad++;
    }
  printf("BN=%d N=%d mismatches %d of %d\n", BN, 2 * BN, bad, BN * RADIX);
  return 0;
}
"""


@pytest.mark.parametrize("butterflies", [32, 64])
def test_mluops_fft_butterfly_pins_the_default_matmul_rhs_layout(tmp_path: Path, butterflies: int) -> None:
    """mlu-ops' own first FFT stage (fft_generic_butterfly.h) is a complex matmul whose right matrix, N = 2 x
    butterflies rows of K, goes through __bang_reshape_filter before NRAM2WRAM. The emulator's default layout
    (what the grader runs) must compute it exactly at N = 64 and N = 128; plain N rows of K (`nk`) agrees only at
    N = 64, where the interleave is the identity (DESIGN.md: what mlu-ops says about the WRAM layouts)."""
    conf = _conformance()
    _require_mirror(conf)
    src = tmp_path / "src"
    conf.export_folder(conf.DEFAULT_MIRROR, "kernels", src)
    probe = tmp_path / "probe.mlu"
    probe.write_text(FFT_PROBE)
    exe = tmp_path / "probe"
    proc = cncc("--bang-mlu-arch=mtp_372", "-O2", f"-DBN={butterflies}", f"-I{src}", probe, "-o", exe)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = {}
    for layout in ("default", "nk", "kn"):
        out = run(exe, env={} if layout == "default" else {"BANG_EMU_MATMUL_RHS": layout})
        assert out.returncode == 0, out.stderr[-2000:]
        results[layout] = int(re.search(r"mismatches (\d+) of", out.stdout).group(1))
    assert "pad reached" not in out.stdout
    assert results["default"] == 0 and results["kn"] > 0
    assert (results["nk"] == 0) == (butterflies == 32)


def test_mluops_div_matches_its_cpu_reference() -> None:
    """div (mtp_592) streams through a cluster-shared SRAM tile in a 5-stage pipeline: every core stores the tile
    with SRAM2GDRAM and refills it with GDRAM2SRAM right behind, unsynchronised. It matches its CPU reference
    whatever the host's schedule only since SRAM is ordered by the cluster's barriers (runtime/sram.cpp); before,
    a core the host ran late stored the refilled inputs (DIFF1 1.38 under load). test_sram_order.py forces that
    schedule."""
    conf = _conformance()
    _require_mirror(conf)
    [result] = conf.run(conf.DEFAULT_MIRROR, ["div"])
    assert result.built, result.build_error
    [case] = result.cases
    assert case.status == "passed", (case.detail, case.diffs)
    assert case.diffs["DIFF1"] <= case.thresholds["DIFF1"] and case.diffs["DIFF2"] <= case.thresholds["DIFF2"]
