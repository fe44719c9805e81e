"""Trusted replay at the emulator's level (runtime/journal.cpp, runtime/replay.cpp, bang_emu/device_module.py):
a real program journals a run, its kernels are linked into a device module, and a fresh process replays the
journal with other inputs. An honest kernel computes the other inputs' answer in the same modelled time; what
host code uploaded does not follow the inputs; kernel code that stores outside device memory, walks over its own
stack frame or calls libc is stopped; sources and objects that would switch the checks off are refused."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from emu_helpers import PROGRAMS, REPLAY, cncc, read_trace, run

N = 4096
SOURCE = PROGRAMS / "replay_modes.mlu"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The program (for runs) and its device module (for replays), compiled once."""
    out = tmp_path_factory.mktemp("replay")
    exe = out / "replay_modes"
    proc = cncc("--bang-arch=compute_30", "-O2", SOURCE, "-o", exe)
    assert proc.returncode == 0, proc.stderr
    obj = out / "device.o"
    proc = cncc("--emu-device-module", "-c", "-O2", SOURCE, "-o", obj)
    assert proc.returncode == 0, proc.stderr
    from bang_emu import device_module

    linked = device_module.link([obj], out / "module.so")
    assert linked.ok, linked.message
    return exe, out / "module.so"


def run_and_replay(built, tmp_path: Path, mode: str, *extra: str) -> dict:
    exe, module = built
    journal, run_trace = tmp_path / "run.journal", tmp_path / "run.trace.jsonl"
    ran = run(exe, mode, journal, run_trace, *extra, env={"BANG_EMU_POISON": "nan"})
    inputs, outputs = tmp_path / "inputs", tmp_path / "outputs"
    inputs.mkdir()
    outputs.mkdir()
    fresh = np.linspace(-6.0, 6.0, N, dtype=np.float32)
    fresh.tofile(inputs / "c0.0.bin")
    replayed = subprocess.run([sys.executable, "-c", REPLAY, journal, module, inputs, outputs], capture_output=True,
                              text=True, timeout=120, env={**_env(), "BANG_EMU_POISON": "nan"})
    assert replayed.returncode == 0 and replayed.stdout.startswith("0 "), replayed.stdout + replayed.stderr
    status = json.loads((outputs / "c0.replay.json").read_text())
    out_bin = outputs / "c0.out.bin"
    return {"ran": ran, "status": status, "fresh": fresh,
            "output": np.fromfile(out_bin, dtype=np.float32) if out_bin.exists() else None,
            "run_launches": read_trace(run_trace) if run_trace.exists() else [],
            "launches": read_trace(outputs / "c0.trace.jsonl"),
            "sealed": read_trace(outputs / "c0.trace.jsonl", "output")}


def _env() -> dict:
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith("BANG_EMU_")}


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x.astype(np.float64)))


def test_an_honest_kernel_computes_the_fresh_inputs_in_the_same_modelled_time(built, tmp_path):
    got = run_and_replay(built, tmp_path, "honest")
    assert got["ran"].returncode == 0, got["ran"].stderr
    assert got["status"]["ok"], got["status"]
    assert np.abs(got["output"] - sigmoid(got["fresh"])).max() < 1e-6
    assert [r["modelled_time_us"] for r in got["launches"]] == [r["modelled_time_us"] for r in got["run_launches"]]
    assert got["sealed"][0]["kernel_written"] == N * 4


@pytest.mark.parametrize("mode", ["host", "copy"])
def test_what_host_code_uploaded_does_not_follow_the_fresh_inputs(built, tmp_path, mode):
    got = run_and_replay(built, tmp_path, mode)
    assert got["ran"].returncode == 0, got["ran"].stderr
    assert got["status"]["ok"]
    # the run's answer, replayed as uploaded: right for the run's inputs, wrong for the replay's
    assert np.abs(got["output"] - sigmoid(got["fresh"])).max() > 0.1
    if mode == "host":
        assert got["sealed"][0]["kernel_written"] == 0  # and not written by any kernel


def test_a_kernel_store_into_host_memory_is_stopped_in_the_replay(built, tmp_path):
    got = run_and_replay(built, tmp_path, "poke")
    kinds = [d["kind"] for r in got["launches"] for d in r["diagnostics"]]
    assert "kernel-store-outside-device" in kinds, got["launches"]


def test_a_kernel_that_writes_over_its_return_address_is_stopped_before_it_does(built, tmp_path):
    (tmp_path / "in_bounds").mkdir()
    (tmp_path / "over").mkdir()
    honest = run_and_replay(built, tmp_path / "in_bounds", "smash", "2")
    assert not [d for r in honest["launches"] for d in r["diagnostics"]], honest["launches"]
    got = run_and_replay(built, tmp_path / "over", "smash", "12")
    messages = [d["message"] for r in got["launches"] for d in r["diagnostics"]]
    assert any("return address" in m for m in messages), got["launches"]


def test_a_libc_call_from_a_kernel_is_a_kernel_error_in_the_replay(built, tmp_path):
    got = run_and_replay(built, tmp_path, "shell")
    messages = [d["message"] for r in got["launches"] for d in r["diagnostics"]]
    assert any("system" in m and "device code cannot call" in m for m in messages), got["launches"]


@pytest.mark.parametrize("code, refusal", [
    ("__attribute__((no_sanitize_address)) __mlu_global__ void k(float *y) { y[0] = 1; }", "no_sanitize_address"),
    ("namespace bang_emu { int spoof; }\n__mlu_global__ void k(float *y) { y[0] = 1; }", "namespace bang_emu"),
    ('__asm__(".globl spoof");\n__mlu_global__ void k(float *y) { y[0] = 1; }', "inline assembly"),
    # the barrier is allowed as a statement only: not as a top-level statement or an asm label naming a symbol
    ('__asm__("sync;");\n__mlu_global__ void k(float *y) { y[0] = 1; }', "inline assembly"),
    ('extern "C" void s(void) __asm__("sync");\n__mlu_global__ void k(float *y) { s(); y[0] = 1; }',
     "inline assembly"),
    ('__mlu_global__ void k(float *y) { __asm__ volatile("sync;\\n\\tmv.gpr %r1, %r2;"); y[0] = 1; }',
     "inline assembly"),
])
def test_the_device_module_refuses_what_would_switch_the_checks_off(tmp_path, code, refusal):
    source = tmp_path / "k.mlu"
    source.write_text("#include <bang.h>\n" + code + "\n")
    proc = cncc("--emu-device-module", "-c", "-O2", source, "-o", tmp_path / "k.o")
    assert proc.returncode != 0
    assert refusal in proc.stderr


def test_the_hand_written_barrier_builds_into_a_device_module_as_sync(tmp_path):
    """`__asm__ volatile("sync;")` is how mlu-ops and torch_mlu kernels write the barrier; the normal build makes
    it __sync(), and so must the replay's module (it was refused there, as was any header with an unused assembly
    helper: kernels that built failed their replay)."""
    source = tmp_path / "k.mlu"
    source.write_text("#include <bang.h>\n"
                      # an unused helper with other assembly (mlu-ops' common.h has several): builds as normally
                      "__mlu_func__ unsigned last1(unsigned v) {\n  unsigned e = 0;\n"
                      "  asm volatile(\"findlast1.gpr.b32 %[dst], %[src];\\n\\t\" : [dst] \"+&r\"(e) : [src] \"r\"(v));"
                      "\n  return e;\n}\n"
                      "__mlu_global__ void k(float *out) {\n  __nram__ float buf[64];\n"
                      "  __memcpy_async(buf, out, 256, GDRAM2NRAM);\n  __asm__ volatile(\"sync;\\n\\t\");\n"
                      "  buf[0] += 1;\n  asm volatile(\"sync;\");\n  __memcpy(out, buf, 256, NRAM2GDRAM);\n}\n")
    proc = cncc("--emu-device-module", "-c", "-O2", source, "-o", tmp_path / "k.o")
    assert proc.returncode == 0, proc.stderr
    from bang_emu import device_module

    linked = device_module.link([tmp_path / "k.o"], tmp_path / "module.so")
    assert linked.ok, linked.message
    symbols = subprocess.run(["nm", "-u", str(tmp_path / "module.so")], capture_output=True, text=True).stdout
    assert "sync" in symbols and "__bang_emu_asm" not in symbols


def test_a_call_through_a_function_pointer_is_refused_at_link(tmp_path):
    source = tmp_path / "k.mlu"
    source.write_text("#include <bang.h>\n__mlu_global__ void k(float *y, long f) { ((void (*)(float *))f)(y); }\n")
    proc = cncc("--emu-device-module", "-c", "-O2", source, "-o", tmp_path / "k.o")
    assert proc.returncode == 0, proc.stderr
    from bang_emu import device_module

    linked = device_module.link([tmp_path / "k.o"], tmp_path / "module.so")
    assert not linked.ok
    assert "function pointer" in linked.message
    assert not (tmp_path / "module.so").exists()


def test_a_static_initialiser_never_runs_when_the_module_loads(tmp_path):
    source = tmp_path / "k.mlu"
    source.write_text("#include <bang.h>\n#include <cstdlib>\nstatic int boom = (abort(), 1);\n"
                      "__mlu_global__ void k(float *y) { y[0] = (float)boom; }\n")
    proc = cncc("--emu-device-module", "-c", "-O2", source, "-o", tmp_path / "k.o")
    assert proc.returncode == 0, proc.stderr
    from bang_emu import device_module

    linked = device_module.link([tmp_path / "k.o"], tmp_path / "module.so")
    assert linked.ok, linked.message
    load = ("import ctypes, sys\nfrom bang_emu import toolchain\n"
            "ctypes.CDLL(str(toolchain.runtime_dir() / toolchain.LIB_NAME), mode=ctypes.RTLD_GLOBAL)\n"
            "ctypes.CDLL(sys.argv[1])\nprint('loaded')")
    loaded = subprocess.run([sys.executable, "-c", load, tmp_path / "module.so"], capture_output=True, text=True,
                            timeout=60)
    assert loaded.returncode == 0 and "loaded" in loaded.stdout, loaded.stderr  # abort() never ran
