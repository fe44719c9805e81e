"""Device builtins against numpy: values, the hardware sigmoid's saturation, and the WRAM layout options."""

from __future__ import annotations

import numpy as np
import pytest
from emu_helpers import PROGRAMS, read_trace, run

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


def test_fp16_matmul_overloads_match_numpy_in_the_same_layout(build, tmp_path):
    # half x half -> float sums in fp32; half x half -> half rounds that sum once. Both read the rhs as N rows
    # of K, like the fp32 overload, and the trace charges fp16 at the tensor unit's fp16 rate.
    trace = tmp_path / "trace.jsonl"
    out = outputs(build(PROGRAMS / "matmul_half.mlu"), env={"BANG_EMU_TRACE": str(trace)})
    m, k, n = 4, 32, 64
    lhs = (((np.arange(m * k) * 7) % 17 - 8) / 8.0).reshape(m, k)
    rhs = (((np.arange(n * k) * 5) % 13 - 6) / 8.0).reshape(n, k)  # N rows of K
    expected = (lhs @ rhs.T).ravel()
    np.testing.assert_array_equal(out["fp32"], expected.astype(np.float32))
    np.testing.assert_array_equal(out["half_to_float"], expected.astype(np.float32))
    np.testing.assert_array_equal(out["half_to_half"], expected.astype(np.float16).astype(np.float32))
    launches = read_trace(trace)
    assert [launch["builtin_counts"].get("__bang_matmul") for launch in launches] == [1, 1, 1]
    tensor_us = [launch["time_split_us"]["tensor"] for launch in launches]
    assert tensor_us[1] < tensor_us[0] and tensor_us[2] == pytest.approx(tensor_us[1])
