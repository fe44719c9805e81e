"""The builtins MLU270-era lab code calls (AICS chapter-5/7 labs, Cambricon's GEMM tutorial), against numpy:
`__nramset_*`, comparisons, `__bang_max/min/count/collect`, `__bang_maxpool`, `__bang_conv` (float, and int8
with the tutorial's own WRAM regrouping), and the checks on `__bang_conv`'s operands."""

from __future__ import annotations

import numpy as np
import pytest
from emu_helpers import PROGRAMS, run

N = 128
SOURCE = PROGRAMS / "builtins_mlu270.mlu"


def inputs() -> dict[str, np.ndarray]:
    i = np.arange(N)
    return {
        "x": (np.float32(-10.0) + np.float32(20.0) * i.astype(np.float32) / np.float32(N - 1)).astype(np.float32),
        "y": (0.5 + (i % 7)).astype(np.float32),
        "p": (i % 5).astype(np.float32),
        "q": (i % 3).astype(np.float32),
        "v": ((i * 37) % 101 - 50).astype(np.float32),
    }


@pytest.fixture(scope="module")
def results(build) -> dict[str, np.ndarray]:
    proc = run(build(SOURCE))
    assert proc.returncode == 0, proc.stderr
    return {ln.split()[0]: np.array([float(t) for t in ln.split()[1:]]) for ln in proc.stdout.splitlines()}


def test_nramset_half_fills(results):
    np.testing.assert_array_equal(results["nramset"][:N], [2.5] * 64 + [-1.0] * 64)


def test_cycle_sub_and_cycle_gt(results):
    d = inputs()
    seg = np.tile(d["y"][:8], N // 8)
    np.testing.assert_allclose(results["cycle_sub"][:N], d["x"] - seg, rtol=1e-6)
    np.testing.assert_array_equal(results["cycle_gt"][:N], (d["x"] > seg).astype(float))


@pytest.mark.parametrize("name,op", [("gt", np.greater), ("ge", np.greater_equal), ("lt", np.less),
                                     ("le", np.less_equal), ("eq", np.equal), ("ne", np.not_equal)])
def test_comparisons_write_one_or_zero(results, name, op):
    d = inputs()
    np.testing.assert_array_equal(results[name][:N], op(d["p"], d["q"]).astype(float))


def test_not_and_active_sqrt(results):
    d = inputs()
    np.testing.assert_array_equal(results["not"][:N], (d["q"] == 0).astype(float))
    np.testing.assert_allclose(results["sqrt"][:N], np.sqrt(d["y"]), rtol=1e-6)


def test_max_and_min_give_value_and_first_index(results):
    v = inputs()["v"]
    assert list(results["max_f"][:2]) == [v.max(), np.argmax(v)]
    assert list(results["min_f"][:2]) == [v.min(), np.argmin(v)]
    assert list(results["max_h"][:2]) == [v.max(), np.argmax(v)]  # the index as unsigned short for half


def test_count_and_collect(results):
    d = inputs()
    mask = d["x"] > d["y"]
    k = int(mask.sum())
    assert results["count"][0] == k
    np.testing.assert_allclose(results["collect"][:k], d["x"][mask], rtol=1e-7)
    assert np.all(results["collect"][k:N] == 0)  # the rest of dst is left as it was
    np.testing.assert_allclose(results["collect_aliased"][:k], d["x"][mask], rtol=1e-7)


def maxpool(src: np.ndarray, kh: int, kw: int, sh: int, sw: int) -> np.ndarray:
    h, w, _ = src.shape
    ho, wo = (h - kh) // sh + 1, (w - kw) // sw + 1
    return np.array([[src[y * sh:y * sh + kh, x * sw:x * sw + kw].max(axis=(0, 1)) for x in range(wo)]
                     for y in range(ho)])


def test_maxpool_hwc(results):
    src = inputs()["v"][:32].reshape(4, 4, 2)
    np.testing.assert_array_equal(results["maxpool"][:12], maxpool(src, 2, 2, 2, 1).ravel())
    np.testing.assert_array_equal(results["maxpool_square"][:8], maxpool(src, 2, 2, 2, 2).ravel())


def test_float_conv_reads_filters_from_their_wram_lines(results):
    ci, h, w, co, kh, kw, sh, sw = 3, 4, 5, 128, 2, 3, 1, 2
    src = (((np.arange(h * w * ci) * 7) % 11) - 5.0).reshape(h, w, ci)
    i = np.arange(co * kh * kw * ci)
    filt = (0.25 * ((i * 5 + i // (kh * kw * ci)) % 9 - 4)).reshape(co, kh, kw, ci)
    ho, wo = (h - kh) // sh + 1, (w - kw) // sw + 1
    ref = np.array([[[np.sum(src[y * sh:y * sh + kh, x * sw:x * sw + kw] * filt[o]) for o in range(co)]
                     for x in range(wo)] for y in range(ho)])
    assert len(set(map(tuple, filt.reshape(co, -1)))) > 1  # filters differ, so a wrong line/slot order shows
    np.testing.assert_allclose(results["conv_f"][:ho * wo * co], ref.ravel(), rtol=1e-6)
    # __bang_reshape_filter produces those lines from [Co][Kh][Kw][Ci]
    np.testing.assert_allclose(results["conv_reshaped"][:ho * wo * co], ref.ravel(), rtol=1e-6)


def test_int8_conv_as_the_gemm_tutorial_uses_it(results):
    # C[4][128] = A[4][32] x B, B^T given as 128 rows of 32, fixed-point position -3
    a = ((np.arange(4 * 32) * 3) % 7 - 3).reshape(4, 32)
    bt = ((np.arange(128 * 32) * 5) % 7 - 3).reshape(128, 32)
    np.testing.assert_array_equal(results["conv_int8"][:4 * 128], (a @ bt.T).ravel() * 2.0**-3)
    np.testing.assert_array_equal(results["conv_int16"][:4 * 128], (a @ bt.T).ravel())  # int16 dst, position 0


@pytest.mark.parametrize("mode,message", [
    ("bad_co", "invalid-argument: __bang_conv: co = 96 is not a multiple of 64"),
    ("kernel_in_nram", "invalid-address: __bang_conv: kernel (WRAM)"),
])
def test_conv_operand_checks(build, mode, message):
    proc = run(build(SOURCE), mode)
    assert proc.returncode != 0
    assert message in proc.stderr and "builtins_mlu270.mlu:" in proc.stderr, proc.stderr


def test_sqrt_square_and_libdevice_scalars(results):
    d = inputs()
    np.testing.assert_allclose(results["sqrt_square"][:N], np.abs(d["x"]), rtol=1e-6)
    x3, y3 = d["x"][3], d["y"][3]
    np.testing.assert_allclose(results["cn_scalar"][:5], [max(x3, y3), min(x3, y3), 1 / np.sqrt(y3), np.sign(x3), 3],
                               rtol=1e-6)
