"""The grader's timing driver (bang_harness.mlu_driver): CNRT notifiers the harness places itself.

On the emulator the driver binds the emulator runtime's CNRT entry points; its figure must equal the
signed trace's modelled time, whatever the student's Python patches after it loads. On a card it binds
libcnrt (and libcnpapi where installed): those tests skip visibly without /dev/cambricon_dev*.
"""

from __future__ import annotations

import ctypes
import glob
import importlib.util
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import test_bang_harness_emu
from bang_harness.mlu_driver import CnpapiKernels, DriverError, NotifierDriver, load_cnpapi
from bang_harness.protocol import KEY_FILE, call_key, verify_line
from harness_workspace import Workspace, write_tree

# Entries that attack the in-process clocks after load: the checked call must still time to the trace.
emu_build = test_bang_harness_emu.emu_build  # the same module-scoped emulator build

MODULE = "timing_ops"
OPS = """
import ctypes
import time

import torch
import sig_ext


def sigmoid(x):
    return sig_ext.sigmoid(x)


class FakeEvent:
    def __init__(self, *args, **kwargs):
        pass

    def record(self, *args, **kwargs):
        pass

    def synchronize(self):
        pass

    def elapsed_time(self, other):
        return 1e-6

    hardware_time = elapsed_time


def patching_sigmoid(x):
    torch.mlu.Event = FakeEvent
    torch.mlu.synchronize = lambda *args, **kwargs: None
    torch.mlu.current_stream = lambda *args, **kwargs: None
    time.perf_counter = lambda: 0.0
    time.perf_counter_ns = lambda: 0
    ctypes.byref = lambda *args, **kwargs: None
    ctypes.pointer = lambda *args, **kwargs: None
    ctypes.CDLL.__getattr__ = lambda self, name: (lambda *args: 0)
    ctypes.CDLL.__getitem__ = lambda self, name: (lambda *args: 0)
    return sig_ext.sigmoid(x)
"""


def mlu_card() -> bool:
    return bool(glob.glob("/dev/cambricon_dev*")) and importlib.util.find_spec("torch_mlu") is not None


def run_workspace(emu_build: Workspace, tmp_path: Path) -> Workspace:
    """The emulator build of test_bang_harness_emu, run with this file's module beside the submission's."""
    files = {name: (emu_build.submission / name).read_text() for name in ("ops.py", "grade.toml")}
    space = Workspace(tmp_path, write_tree(tmp_path / "submission", {**files, f"{MODULE}.py": OPS}))
    space.build = emu_build.build
    return space


def run_calls(space: Workspace, calls: list[dict]) -> bytes:
    key = bytes(range(32))
    (space.io / KEY_FILE).write_bytes(key)
    space.write_job(calls, extension="sig_ext", module=MODULE)
    outcome = space.harness("run")
    assert outcome.exit_code == 0, outcome.stderr_tail
    return key


def traced_launch_times(space: Workspace, key: bytes, call_id: str) -> list[float]:
    lines = (space.outputs / f"{call_id}.trace.jsonl").read_bytes().splitlines()
    records = [json.loads(verify_line(call_key(key, call_id), line)) for line in lines]
    return [r["modelled_time_us"] for r in records if r["record"] == "launch"]


@pytest.mark.slow
def test_driver_times_a_real_emulated_kernel_as_the_trace_models_it(emu_build, tmp_path):
    space = run_workspace(emu_build, tmp_path)
    space.add_input("x.npy", np.linspace(-6, 6, 3 * 4096 + 5, dtype=np.float32))
    key = run_calls(space, [{"id": "timed", "entry": "sigmoid", "inputs": ["x.npy"], "timed_repeats": 3}])
    result = space.result("timed")
    assert result["ok"], result["error"]
    traced = traced_launch_times(space, key, "timed")
    assert len(traced) == 3 and all(t > 0 for t in traced)  # one launch per invocation; the checked one is timed
    # cnrtNotifierDuration is a float: equal to the double the trace holds to float precision.
    assert result["device_us"] == pytest.approx(traced, rel=1e-6, abs=1e-3)


@pytest.mark.slow
def test_patching_events_clocks_and_ctypes_after_load_does_not_move_the_driver(emu_build, tmp_path):
    space = run_workspace(emu_build, tmp_path)
    space.add_input("x.npy", np.linspace(-6, 6, 8192, dtype=np.float32))
    key = run_calls(space, [
        {"id": "patched", "entry": "patching_sigmoid", "inputs": ["x.npy"], "warmup": 1, "timed_repeats": 2},
        {"id": "after", "entry": "sigmoid", "inputs": ["x.npy"], "timed_repeats": 1},
    ])
    for call_id in ("patched", "after"):
        result = space.result(call_id)
        assert result["ok"], result["error"]
        traced = traced_launch_times(space, key, call_id)
        timed = traced[-len(result["device_us"]):]  # the checked call and any warm-up come first
        assert result["device_us"] == pytest.approx(timed, rel=1e-6, abs=1e-3)
        assert min(result["device_us"]) > 1.0  # the FakeEvent's 1e-6 ms would be 0.001 µs


def test_driver_refuses_a_library_without_cnrt():
    libc = ctypes.CDLL(None)
    with pytest.raises(DriverError, match="cnrtNotifierCreate"):
        NotifierDriver(libc, None)


def test_driver_measures_zero_without_a_launch_on_the_emulator(tmp_path):
    pytest.importorskip("bang_emu.toolchain", reason="the emulator toolchain (bang_emu.toolchain) is not installed")
    # In a child: the emulator runtime guards device memory with signal handlers; keep them out of pytest.
    script = textwrap.dedent("""
        import ctypes, json
        from bang_emu import toolchain
        from bang_harness.mlu_driver import emulator_driver
        lib = ctypes.CDLL(str(toolchain.runtime_dir() / toolchain.LIB_NAME), mode=ctypes.RTLD_GLOBAL)
        driver, note = emulator_driver(lib)
        value, timing = driver.measure(lambda: 7)
        print(json.dumps([value, timing.device_us, timing.kernels, note]))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    value, device_us, kernels, note = json.loads(out.stdout)
    assert (value, device_us, kernels) == (7, 0.0, None)
    assert "signed launch trace" in note


# A stand-in for libcnpapi that follows the documented activity API (cnpapi_activity_api.h): buffers come from
# the client's bufferRequested callback and go back through bufferCompleted on cnpapiActivityFlushAll. It
# reports one kernel record per flush after a cnrt-free "launch" counter is bumped.
CNPAPI_STANDIN = r"""
#include <stdint.h>
#include <stddef.h>
#include <string.h>
typedef void (*req_t)(uint64_t **, size_t *, size_t *);
typedef void (*done_t)(uint64_t *, size_t, size_t);
typedef struct { int type; uint64_t correlation_id, start, end, received, queued, submitted, device_id;
                 const char *name; uint64_t queue_id, runtime_correlation_id, kernel_type; } kernel_t;
static req_t req; static done_t done; static int enabled, launches;
static const char *kernel_name = "sig_kernel";
void standin_name(const char *name) { kernel_name = name; }
int cnpapiInit(void) { return 0; }
int cnpapiActivityRegisterCallbacks(req_t r, done_t d) { req = r; done = d; return 0; }
int cnpapiActivityEnable(int type) { enabled = type == 1; return 0; }
void standin_launch(void) { launches++; }
int cnpapiActivityFlushAll(void) {
  uint64_t *buf; size_t size, max;
  if (!enabled || !launches) return 0;
  req(&buf, &size, &max);
  size_t used = 0;
  for (int i = 0; i < launches && used + sizeof(kernel_t) <= size; ++i) {
    kernel_t k; memset(&k, 0, sizeof k);
    k.type = 1; k.start = 1000 * (i + 1); k.end = k.start + 2500; k.name = kernel_name; k.queue_id = 3;
    memcpy((char *)buf + used, &k, sizeof k); used += sizeof k;
  }
  launches = 0;
  done(buf, size, used);
  return 0;
}
int cnpapiActivityGetNextRecord(void *buffer, size_t valid, void **record) {
  char *next = *record ? (char *)*record + sizeof(kernel_t) : (char *)buffer;
  if (next + sizeof(kernel_t) > (char *)buffer + valid) return 9;  /* CNPAPI_ERROR_MAX_LIMIT_REACHED */
  *record = next;
  return 0;
}
"""


def build_cnpapi_standin(folder: Path) -> Path:
    source = folder / "cnpapi_standin.c"
    source.write_text(CNPAPI_STANDIN)
    library = folder / "libcnpapi_standin.so"
    subprocess.run(["gcc", "-shared", "-fPIC", str(source), "-o", str(library)], check=True)
    return library


def test_cnpapi_kernel_records_are_read_through_the_documented_activity_api(tmp_path):
    standin = ctypes.CDLL(str(build_cnpapi_standin(tmp_path)))
    kernels = CnpapiKernels(standin)
    assert kernels.collect() == ()
    standin.standin_launch()
    standin.standin_launch()
    records = kernels.collect()
    assert [(r.name, r.start_ns, r.end_ns, r.queue_id) for r in records] == [
        ("sig_kernel", 1000, 3500, 3), ("sig_kernel", 2000, 4500, 3)]
    assert records[0].duration_us == 2.5 and records[0].to_json()["kernel"] == "sig_kernel"
    assert kernels.collect() == ()  # each record is reported once


def test_cnpapi_absence_is_said_not_hidden():
    kernels, note = load_cnpapi()
    if kernels is None:
        assert "no per-kernel device records" in note
    else:
        assert "CNPAPI kernel records from" in note


@pytest.mark.mlu
@pytest.mark.skipif(not mlu_card(), reason="needs an MLU card (/dev/cambricon_dev*) and torch_mlu")
def test_driver_times_a_torch_op_on_a_card():
    import torch
    import torch_mlu  # noqa: F401
    from bang_harness.mlu_driver import mlu_driver

    driver, note = mlu_driver(int(torch.mlu.current_stream().mlu_stream))
    x = torch.randn(1 << 22).to("mlu")
    value, timing = driver.measure(lambda: torch.sigmoid(x))
    assert value.device.type == "mlu" and timing.device_us > 0
    if timing.kernels is not None:  # CNPAPI installed: the op's kernel is in the records, inside the bracket
        assert timing.kernels, note
        assert sum(k.duration_us for k in timing.kernels) <= timing.device_us * 1.05 + 5
