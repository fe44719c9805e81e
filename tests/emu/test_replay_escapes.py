"""Issue 37: stores the instrumentation does not see, tried from a replayed kernel on the replay's own per-core
clock (tests/emu/programs/replay_escapes.mlu). Before the fix, libm's `modf` and the target builtin
`__builtin_ia32_movnti64` forged the replay's modelled time and a negative `__builtin_alloca` lifted the stack
pointer onto the core's context, each with nothing flagged. Now each attack is refused when the device module is
built (compile error naming what and why), or stopped in the replay by a named kernel error: none changes the
replay's modelled time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from emu_helpers import PROGRAMS, cncc, read_trace, run
from test_replay import REPLAY

SOURCE = PROGRAMS / "replay_escapes.mlu"
N = 4096


def _env() -> dict:
    return {k: v for k, v in os.environ.items() if not k.startswith("BANG_EMU_")}


def build_and_replay(tmp_path: Path, attack: str | None) -> dict:
    """Builds the program and its device module with `-DATTACK_<attack>`, runs and replays it: {"refused": the
    build's error} or {"launch": the replay's launch record, "output": its output}."""
    defines = [f"-DATTACK_{attack}"] if attack else []
    exe = tmp_path / "exe"
    proc = cncc("--bang-arch=compute_30", "-O2", *defines, SOURCE, "-o", exe)
    assert proc.returncode == 0, proc.stderr  # a run's build refuses nothing of this
    obj = tmp_path / "device.o"
    proc = cncc("--emu-device-module", "-c", "-O2", *defines, SOURCE, "-o", obj)
    if proc.returncode != 0:
        return {"refused": proc.stderr}
    from bang_emu import device_module

    linked = device_module.link([obj], tmp_path / "module.so")
    if not linked.ok:
        return {"refused": linked.message}
    journal = tmp_path / "run.journal"
    ran = run(exe, journal, tmp_path / "run.trace.jsonl")
    assert ran.returncode == 0, ran.stderr
    inputs, outputs = tmp_path / "inputs", tmp_path / "outputs"
    inputs.mkdir()
    outputs.mkdir()
    np.linspace(-6.0, 6.0, N, dtype=np.float32).tofile(inputs / "c0.0.bin")
    replayed = subprocess.run([sys.executable, "-c", REPLAY, journal, tmp_path / "module.so", inputs, outputs],
                              capture_output=True, text=True, timeout=60, env=_env())
    assert replayed.returncode == 0 and replayed.stdout.startswith("0 "), replayed.stdout + replayed.stderr
    status = json.loads((outputs / "c0.replay.json").read_text())
    launches = read_trace(outputs / "c0.trace.jsonl")
    assert len(launches) == 1, launches
    return {"status": status, "launch": launches[0]}


@pytest.fixture(scope="module")
def honest_time(tmp_path_factory) -> float:
    got = build_and_replay(tmp_path_factory.mktemp("honest"), None)
    assert "refused" not in got, got["refused"]
    assert not got["launch"]["diagnostics"], got["launch"]
    return got["launch"]["modelled_time_us"]


def _gains_nothing(got: dict, honest: float) -> None:
    if "refused" in got:
        return
    launch = got["launch"]
    assert launch["diagnostics"], f"nothing flagged: {launch}"
    assert launch["modelled_time_us"] >= honest * 0.999, launch


# attack -> the words the build's refusal or the replay's kernel error must hold
REFUSED_AT_BUILD = {
    "MOVNTI": "'__builtin_ia32_movnti64' is not allowed in code the grader replays",
    "INTRINSIC": "(x86 intrinsics) is not allowed",
    "TARGET": "target(",
    "ALLOCA": "'__builtin_alloca' is not allowed",
    "VLA": "variable length array",
    "SETJMP": "setjmp' is not allowed",
    "VA_START": "'__builtin_va_start' is not allowed",
    "PRAGMA": "#pragma GCC optimize",
}
STOPPED_IN_REPLAY = ["MODF", "FREXP", "SINCOS", "TLS_STORE", "FRAME_STORE"]


@pytest.mark.parametrize("attack", sorted(REFUSED_AT_BUILD))
def test_a_builtin_that_escapes_the_checks_is_refused_with_its_name(tmp_path, honest_time, attack):
    got = build_and_replay(tmp_path, attack)
    _gains_nothing(got, honest_time)
    assert "refused" in got, f"{attack} was not refused: {got}"
    assert REFUSED_AT_BUILD[attack] in got["refused"], got["refused"]


@pytest.mark.parametrize("attack", STOPPED_IN_REPLAY)
def test_a_store_through_libm_or_a_probed_pointer_is_stopped_in_the_replay(tmp_path, honest_time, attack):
    got = build_and_replay(tmp_path, attack)
    assert "refused" not in got, got["refused"]
    _gains_nothing(got, honest_time)
    kinds = {d["kind"] for d in got["launch"]["diagnostics"]}
    assert kinds & {"kernel-store-outside-device", "invalid-address"}, got["launch"]["diagnostics"]


def test_an_honest_kernel_may_still_call_modf_frexp_and_sincos_into_its_own_variables(tmp_path):
    source = tmp_path / "k.mlu"
    source.write_text("#include <bang.h>\n#include <math.h>\n"
                      "__mlu_global__ void k(float *y, float v) {\n"
                      "  double whole, s, c; int e;\n"
                      "  double frac = modf((double)v, &whole);\n"
                      "  double m = frexp((double)v, &e);\n"
                      "  sincos((double)v, &s, &c);\n"
                      "  y[0] = (float)(frac + whole + m * (1 << e) + s * s + c * c + sinf(v) + cosf(v));\n"
                      "}\n")
    obj = tmp_path / "k.o"
    proc = cncc("--emu-device-module", "-c", "-O2", source, "-o", obj)
    assert proc.returncode == 0, proc.stderr
    from bang_emu import device_module

    linked = device_module.link([obj], tmp_path / "module.so")
    assert linked.ok, linked.message
    undefined = device_module.undefined_symbols(tmp_path / "module.so")
    assert not {"modf", "frexp", "sincos"} & set(undefined) or all(device_module.allowed(s) for s in undefined)


def test_libm_is_allowed_by_function():
    from bang_emu import device_module

    for pure in ("expf", "sqrt", "log1pl", "fmaf", "atan2", "tanhf", "nextafter"):
        assert device_module.allowed(pure), pure
    # what stores through a pointer: wrapped (the kernel's references go to the module's checked wrapper) or refused
    assert {"modf", "frexpf", "remquo", "sincosf", "lgamma_r"} <= set(device_module.WRAPPED_LIBM)
    for writer in ("fegetenv", "fesetround", "feholdexcept", "setpayload", "canonicalize", "cexpl", "__udivmodti4",
                   "__register_frame_info", "__enable_execute_stack", "__real_modf", "__wrap_modf", "getenv"):
        assert not device_module.allowed(writer), writer


def test_the_object_code_check_refuses_what_the_source_check_would_miss(tmp_path):
    """Code compiled without the rewriter (as a system header's inline intrinsic would be): the module's object
    code itself is refused for a non-temporal store and for a stack pointer moved by a computed amount."""
    source = tmp_path / "raw.cpp"
    source.write_text("#include <emmintrin.h>\n"
                      "extern \"C\" void nt(long long *p, long long v) { _mm_stream_si64(p, v); }\n"
                      "extern \"C\" int lift(long n) { volatile char *q = (volatile char *)__builtin_alloca(n);"
                      " q[0] = 1; return q[0]; }\n")
    obj = tmp_path / "raw.o"
    proc = subprocess.run(["g++", "-c", "-O2", "-fPIC", "-fno-omit-frame-pointer", source, "-o", obj],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    from bang_emu import device_module

    linked = device_module.link([obj], tmp_path / "module.so")
    assert not linked.ok
    assert "movnti" in linked.message and "the emulator's checks do not see" in linked.message, linked.message
    assert "stack pointer moved by a computed amount in lift" in linked.message, linked.message
    assert not (tmp_path / "module.so").exists()
