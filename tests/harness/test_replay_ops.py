"""The replay's runner of journaled torch operators (bang_harness/replay_ops.py), against the real emulator runtime:
device buffers from bang_emu_device_alloc, operator records as the shim writes them. An allowed operator computes
from the device's bytes and writes where the run's operator wrote; a disallowed one never runs; a record that
points outside device memory, claims an operand larger than the replay takes or names no ATen operator is refused
with a reason, never run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from bang_harness.replay_ops import OpPolicy

from grader.spec.models import DeviceOpsSpec

POLICY = OpPolicy.from_json(DeviceOpsSpec().model_dump())


def test_policy_allows_data_movement_and_scaling_only():
    assert POLICY.allows("aten::cat", [4096, 4096])
    assert POLICY.allows("aten::constant_pad_nd", [4096])
    assert POLICY.allows("aten::clamp.out", [4096])
    assert POLICY.allows("aten::mul.Tensor", [4096, 1])  # x * 0.5 (a 0-dim operand counts as one element)
    assert POLICY.allows("aten::neg", [4096])
    assert not POLICY.allows("aten::mul.Tensor", [4096, 4096])  # x * y
    assert not POLICY.allows("aten::add.out", [64, 64])
    for name in ("aten::sigmoid", "aten::sigmoid.out", "aten::exp", "aten::tanh", "aten::mm", "aten::mm.out",
                 "aten::bmm", "aten::addmm", "aten::special_expit", "aten::index_select", "aten::from_file"):
        assert not POLICY.allows(name, [4096]), name


def test_assignment_spec_refuses_names_that_are_not_aten_operators():
    assert DeviceOpsSpec(allowed=["aten::cat", "aten::add.Tensor"]).model_dump()["allowed"] == ["aten::cat",
                                                                                           "aten::add.Tensor"]
    with pytest.raises(ValueError):
        DeviceOpsSpec(allowed=["torch.sigmoid"])


RUNNER = textwrap.dedent("""
    import ctypes, json, sys
    import numpy as np
    from bang_emu import toolchain
    from bang_harness.replay_ops import OpPolicy, OpRunner
    from grader.spec.models import DeviceOpsSpec
    lib = ctypes.CDLL(str(toolchain.runtime_dir() / toolchain.LIB_NAME), mode=ctypes.RTLD_GLOBAL)
    lib.bang_emu_device_alloc.restype = ctypes.c_void_p
    lib.bang_emu_device_alloc.argtypes = [ctypes.c_size_t, ctypes.c_char_p]
    lib.bang_emu_copy_strided.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                                          ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    runner = OpRunner(lib, OpPolicy.from_json(DeviceOpsSpec().model_dump()))
    n = 1000
    src, dst = (lib.bang_emu_device_alloc(n * 4, b"t") for _ in range(2))
    host = np.linspace(-40, 40, n, dtype=np.float32)
    sizes, one = (ctypes.c_int64 * 1)(n * 4), (ctypes.c_int64 * 1)(1)
    lib.bang_emu_copy_strided(src, host.ctypes.data, 1, 1, sizes, one, one)
    t = lambda p, dtype="Float", count=n: {"t": [p, dtype, [count], [1]]}
    def run(op, args, outs):
        try:
            first = runner.begin({"op": op, "where": "ops.py:3", "args": args})
        except Exception as exc:
            return {"begin": f"{type(exc).__name__}: {exc}"}
        second = runner.end({"outs": outs})
        back = np.empty(n, np.float32)
        lib.bang_emu_copy_strided(back.ctypes.data, dst, 1, 1, sizes, one, one)
        return {"begin": first[0], "read": first[1], "wrote": second[1], "out": back[:4].tolist()}
    results = {
        "clamp": run("aten::clamp.out", [t(src), {"d": -30.0}, {"d": 30.0}, t(dst)],
                     [{"arg": 3, "t": t(dst)}]),
        "sigmoid": run("aten::sigmoid.out", [t(src), t(dst)], [{"arg": 1, "t": t(dst)}]),
        "outside": run("aten::clone", [t(host.ctypes.data)], []),
        "huge": run("aten::clone", [{"t": [src, "Float", [1 << 40], [0]]}], []),
        "not_aten": run("os::system", [], []),
    }
    payload = json.dumps({"op": "aten::cat", "args": "not a list"}).encode()
    answer, record = ctypes.create_string_buffer(256), ctypes.create_string_buffer(payload)
    runner._handle(1, ctypes.addressof(record), len(payload), ctypes.addressof(answer), len(answer))
    print(json.dumps({"results": results, "src": src, "dst": dst, "malformed": answer.value.decode()}))
""")


@pytest.fixture(scope="module")
def ran():
    env = {k: v for k, v in os.environ.items() if not k.startswith("BANG_EMU_")}
    proc = subprocess.run([sys.executable, "-c", RUNNER], capture_output=True, text=True, timeout=300,
                          env={**env, "BANG_EMU_POISON": "nan"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_an_allowed_operator_runs_on_the_device_bytes(ran):
    clamp = ran["results"]["clamp"]
    assert clamp["begin"] == "ok" and clamp["out"] == [-30.0, -30.0, -30.0, -30.0]
    assert clamp["read"] == [[ran["src"], 4000]] and clamp["wrote"] == [[ran["dst"], 4000]]  # out= is not read


def test_a_disallowed_operator_never_runs(ran):
    sigmoid = ran["results"]["sigmoid"]
    assert sigmoid["begin"] == "forbidden"
    assert sigmoid["wrote"] == [[ran["dst"], 4000]]  # named, so the runtime can taint it ...
    assert sigmoid["out"] == [-30.0, -30.0, -30.0, -30.0]  # ... but the clamp's bytes are still there


@pytest.mark.parametrize(("case", "words"), [("outside", "outside device memory"), ("huge", "larger than"),
                                             ("not_aten", "not an ATen operator")])
def test_a_forged_record_is_refused_with_its_reason(ran, case, words):
    assert words in ran["results"][case]["begin"]


def test_a_malformed_record_is_answered_as_an_error_line(ran):
    """What the runtime reads back (replay.cpp ask_op_handler): a status line, never an exception."""
    assert ran["malformed"].startswith("error ValueError: no argument list")
