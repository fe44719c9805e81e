"""mlu-ops as the builtins' conformance suite (issue 29): what the sweep of its kernels made the emulator add
(`__mlu_vector__` functions on vector registers, `__bang_filter_bitindex`, `__cn_vector_hypot_f32`, the 3-D
`__memcpy` with its own shape on each side) checked against numpy on a program of ours; then mlu-ops' own abs
kernel driven by its own GTest cases against its CPU reference (scripts/mluops_conformance.py), which skips
visibly without the mirror."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest
from emu_helpers import REPO, run

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


def test_mluops_abs_matches_its_cpu_reference() -> None:
    conf = _conformance()
    if not (conf.DEFAULT_MIRROR / "HEAD").exists():
        pytest.skip(f"no mirror of Cambricon/mlu-ops at {conf.DEFAULT_MIRROR} (fetch github:Cambricon/mlu-ops, or "
                    "set MLUOPS_MIRROR to its git directory)")
    [result] = conf.run(conf.DEFAULT_MIRROR, ["abs"])
    assert result.built, result.build_error
    by_case = {c.case: c for c in result.cases}
    # the plain and the complex case run (the strided ones need mlu-ops' host library and are skipped)
    for name in ("case_0", "case_4_complex"):
        case = by_case[name]
        assert case.status == "passed", (case.detail, case.diffs)
        assert case.diffs["DIFF1"] <= case.thresholds["DIFF1"] and case.diffs["DIFF2"] <= case.thresholds["DIFF2"]
    assert all(c.status == "skipped" for n, c in by_case.items() if "stride" in n)
