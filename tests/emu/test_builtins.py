"""Device builtins against numpy: values, the hardware sigmoid's saturation, and the WRAM layout options."""

from __future__ import annotations

import numpy as np
import pytest
from emu_helpers import PROGRAMS, run

N = 128


def inputs():
    i = np.arange(N, dtype=np.float32)
    x = (np.float32(-10.0) + np.float32(20.0) * i / np.float32(N - 1)).astype(np.float32)
    y = (0.5 + (i % 7)).astype(np.float32)
    lhs = ((np.arange(32) % 5) - 2.0).astype(np.float32).reshape(4, 8)
    j = np.arange(128)
    rhs = ((j % 3) - 1.0 + 0.25 * (j % 4)).astype(np.float32)
    return x, y, lhs, rhs


def outputs(exe, env=None) -> dict[str, np.ndarray]:
    proc = run(exe, env=env)
    assert proc.returncode == 0, proc.stderr
    return {ln.split()[0]: np.array([float(v) for v in ln.split()[1:]], dtype=np.float32) for ln in proc.stdout.splitlines()}


@pytest.fixture(scope="module")
def results(build):
    return outputs(build(PROGRAMS / "builtins.mlu"))


def test_active_sigmoid_saturates_like_the_hardware(results):
    x, *_ = inputs()
    ref = 1 / (1 + np.exp(-x.astype(np.float64)))
    ref[x <= -7.75] = 0.0
    ref[x >= 7.75] = 1.0
    np.testing.assert_allclose(results["sigmoid"], ref, atol=1e-6)
    assert results["sigmoid"][0] == 0.0 and results["sigmoid"][-1] == 1.0
    np.testing.assert_allclose(results["taylor4"], ref, atol=1e-6)


def test_elementwise_arithmetic(results):
    x, y, *_ = inputs()
    np.testing.assert_allclose(results["add"], x + y, rtol=1e-6)
    np.testing.assert_allclose(results["halfdiff"], (x - y) * 0.5, rtol=1e-6)
    np.testing.assert_allclose(results["mul_plus1"], x * y + 1, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(results["recip"], 1 / y, rtol=1e-6)
    np.testing.assert_allclose(results["pow2"], np.exp2(x), rtol=1e-6)


def test_reduce_sum_writes_the_first_element_of_each_128_byte_block(results):
    x, *_ = inputs()
    out = results["reduce_sum"]
    np.testing.assert_allclose(out[[0, 32, 64, 96]], x.reshape(4, 32).sum(axis=1), rtol=1e-5)
    mask = np.ones(N, bool)
    mask[[0, 32, 64, 96]] = False
    assert np.all(out[mask] == 0)  # left unchanged (the kernel zeroed dst first)


def test_transpose_conversion_and_pooling(results):
    x, *_ = inputs()
    np.testing.assert_array_equal(results["transpose"], x.reshape(8, 16).T.ravel())
    np.testing.assert_array_equal(results["half_roundtrip"], x.astype(np.float16).astype(np.float32))
    hwc = x.reshape(8, 4, 4)  # H=8, W=4, C=4; 2x2 windows, stride 2
    pooled = hwc.reshape(4, 2, 2, 2, 4).sum(axis=(1, 3))
    np.testing.assert_allclose(results["sumpool"][:32], pooled.ravel(), rtol=1e-6)
    np.testing.assert_array_equal(results["sumpool"][32:36], [7, 7, 7, 7])  # __gdramset


def test_matmul_default_layout_is_n_rows_of_k(results):
    _, _, lhs, rhs = inputs()
    np.testing.assert_allclose(results["matmul"][:64], (lhs @ rhs.reshape(16, 8).T).ravel(), rtol=1e-6, atol=1e-6)


def test_matmul_lab_layout_on_request(build):
    _, _, lhs, rhs = inputs()
    out = outputs(build(PROGRAMS / "builtins.mlu"), env={"BANG_EMU_MATMUL_RHS": "kn"})
    np.testing.assert_allclose(out["matmul"][:64], (lhs @ rhs.reshape(8, 16)).ravel(), rtol=1e-6, atol=1e-6)
