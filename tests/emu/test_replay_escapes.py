"""Issue 37: stores the instrumentation does not see, tried from a replayed kernel on the replay's own per-core
clock (tests/emu/programs/replay_escapes.mlu). Before the fix, libm's `modf` and the target builtin
`__builtin_ia32_movnti64` forged the replay's modelled time and a negative `__builtin_alloca` lifted the stack
pointer onto the core's context, each with nothing flagged. Now each attack is refused when the device module is
built (compile error naming what and why), or stopped in the replay by a named kernel error: none changes the
replay's modelled time. Also (the issue's "Must show"): size-overflow operands of the copy and vector builtins
and a local array larger than the stack end in named kernel errors; a layout probe through the kernel's own
frame is stopped at its store; what honest code carries (optimize pragmas and attributes, variadic helpers) is
neutralised or checked, not refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from emu_helpers import PROGRAMS, REPLAY, cncc, read_trace, run

SOURCE = PROGRAMS / "replay_escapes.mlu"
N = 4096


def _env() -> dict:
    return {k: v for k, v in os.environ.items() if not k.startswith("BANG_EMU_")}


def build_and_replay(tmp_path: Path, attack: str | None) -> dict:
    """Builds the program and its device module with `-DATTACK_<attack>`, runs and replays it: {"refused": the
    build's error} or {"launch": the replay's launch record, "output": its output}."""
    defines = [f"-DATTACK_{attack}"] if attack else ["-DNO_PROBE"]
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
}
STOPPED_IN_REPLAY = ["MODF", "FREXP", "SINCOS", "TLS_STORE", "FRAME_STORE", "FRAME_PROBE", "VA_START",
                     "VA_LIST_PARAMETER", "VPRINTF"]
# size-overflow operands of the builtins that take a length or a stride, and a local array larger than the stack:
# each must end in a named kernel error of the replay (not a crash of it), with nothing gained
SIZE_OVERFLOWS = ["MEMCPY_HUGE", "MEMCPY_NEGATIVE", "MEMCPY_STRIDE", "MEMCPY_STRIDE_NEGATIVE", "VECTOR_NEGATIVE",
                  "VECTOR_HUGE", "STACK_CLASH"]


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
    # the probe's first read of the runtime's memory (loads are confined too), else the store itself
    assert kinds & {"kernel-load-outside-device", "kernel-store-outside-device", "invalid-address"}, \
        got["launch"]["diagnostics"]


@pytest.mark.parametrize("attack", SIZE_OVERFLOWS)
def test_a_size_overflow_or_a_stack_clash_ends_in_a_named_kernel_error(tmp_path, honest_time, attack):
    got = build_and_replay(tmp_path, attack)
    assert "refused" not in got, got["refused"]
    launch = got["launch"]
    errors = [d for d in launch["diagnostics"] if d.get("severity") == "error"]
    assert errors and all(d.get("kind") and d.get("message") for d in errors), launch["diagnostics"]
    # stopped before the honest work (the stack probe faults in the kernel's prologue) or after it: either way
    # the output is not what the time is charged for, and no time is gained over it
    written = sum(b["written"] for b in launch["written_bytes"])
    assert written == 0 or launch["modelled_time_us"] >= honest_time * 0.999, launch


def test_a_read_modify_write_of_the_probed_clock_is_stopped(tmp_path, honest_time):
    """g++'s sanitizer checks `*t -= x` once, as a load: the replay refuses loads outside the kernel's own memory
    (runtime/memory.cpp strict_readable), so the probe's first read of the runtime is already a kernel error."""
    got = build_and_replay(tmp_path, "TLS_READ_MODIFY_WRITE")
    assert "refused" not in got, got["refused"]
    _gains_nothing(got, honest_time)


def test_optimize_pragmas_and_attributes_are_neutralised_not_refused(tmp_path, honest_time):
    """`#pragma GCC optimize("no-stack-clash-protection")` and an `optimize(...)` attribute are blanked: the
    build goes through, the function after them keeps its stack probes and canary, nothing is flagged or gained."""
    got = build_and_replay(tmp_path, "PRAGMA")
    assert "refused" not in got, got["refused"]
    assert not got["launch"]["diagnostics"], got["launch"]
    assert got["launch"]["modelled_time_us"] >= honest_time * 0.999, got["launch"]  # (plus after_pragma's work)
    obj = tmp_path / "device.o"
    dump = subprocess.run(["objdump", "-d", "--no-show-raw-insn", obj], capture_output=True, text=True).stdout
    body = dump[dump.index("after_pragma"):]
    body = body[:body.find("\n\n")]
    assert "orq    $0x0,(%rsp)" in body and "%fs:0x28" in body, body  # page probes, canary


HONEST_PATTERNS = r"""#include <bang.h>
#include <stdarg.h>
#pragma GCC optimize("O3")
#pragma GCC push_options
#pragma GCC optimize("unroll-loops")
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-variable"
#pragma GCC diagnostic ignored "-Wvla"
#define TUNE _Pragma("GCC optimize(\"O2\")")
TUNE
__attribute__((optimize("O2"), noinline)) __mlu_func__ float twice(float v) { int unused; return v * 2; }
__attribute__((__optimize__(2))) __mlu_func__ float thrice(float v) { return v * 3; }
[[gnu::optimize("O3")]] __mlu_func__ float four(float v) { return v * 4; }
[[gnu::always_inline, gnu::optimize("no-stack-clash-protection")]] inline float five(float v) { return v * 5; }
__mlu_func__ int logmsg(const char *fmt, ...) {
  va_list ap, cp;
  va_start(ap, fmt);
  va_copy(cp, ap);
  int first = va_arg(ap, int);
  int n = vprintf(fmt, cp);
  va_end(cp);
  va_end(ap);
  return n + first * 0;
}
__mlu_func__ int vsum(int count, va_list ap) {
  int s = 0;
  for (int i = 0; i < count; ++i) s += va_arg(ap, int);
  return s;
}
__mlu_func__ int sum(int count, ...) { va_list ap; va_start(ap, count); int s = vsum(count, ap); va_end(ap); return s; }
#pragma GCC diagnostic pop
#pragma GCC pop_options
__mlu_global__ void k(float *y, const float *x, int n) {
  if (__builtin_expect(n <= 0, 0)) return;
  y[0] = twice(x[0]) + thrice(x[1]) + four(x[2]) + five(x[3]) + (float)sum(3, 1, 2, 3);
  if (n < 0) __builtin_unreachable();
  logmsg("%d %d\n", 7, 8);
}
"""


def test_honest_pragmas_attributes_and_variadic_helpers_build_into_a_device_module(tmp_path):
    """What honest lab code carries: optimize/push_options/diagnostic pragmas (also by _Pragma), optimize
    attributes in both spellings, a variadic logging helper (va_start, va_copy, va_arg, vprintf, a va_list
    parameter): the device module builds and links; the optimize ones are blanked, the va_* go through a checked
    store of the va_list."""
    source = tmp_path / "k.mlu"
    source.write_text(HONEST_PATTERNS)
    proc = cncc("--emu-device-module", "-E", "-O2", source, "-o", tmp_path / "k.ii")
    assert proc.returncode == 0, proc.stderr
    text = (tmp_path / "k.ii").read_text()
    assert "optimize" not in text and "push_options" not in text and '"-Wvla"' not in text
    assert text.count("bang_emu_va_touch((void *)") == 5
    obj = tmp_path / "k.o"
    proc = cncc("--emu-device-module", "-c", "-O2", source, "-o", obj)
    assert proc.returncode == 0, proc.stderr
    from bang_emu import device_module

    linked = device_module.link([obj], tmp_path / "module.so")
    assert linked.ok, linked.message
    assert "vprintf" not in device_module.undefined_symbols(tmp_path / "module.so")


@pytest.mark.parametrize("line,refused", [
    ('#pragma GCC target("avx2")', "#pragma GCC target"),
    ('__attribute__((target("avx512f"))) __mlu_func__ int f(int v) { return v; }', 'target("'),
    ("__mlu_func__ void *f() { return __builtin_frame_address(0); }", "__builtin_frame_address"),
    ("__mlu_func__ int f(int v, ...) { return __builtin_va_arg_pack_len(); }", "__builtin_va_arg_pack_len"),
])
def test_what_enables_instructions_or_moves_the_stack_stays_refused(tmp_path, line, refused):
    source = tmp_path / "k.mlu"
    source.write_text(f"#include <bang.h>\n{line}\n__mlu_global__ void k(float *y) {{ y[0] = 1; }}\n")
    proc = cncc("--emu-device-module", "-c", "-O2", source, "-o", tmp_path / "k.o")
    assert proc.returncode != 0 and refused in proc.stderr, proc.stderr


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
