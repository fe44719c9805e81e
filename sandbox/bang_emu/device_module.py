"""The device module: a submission's kernels linked for trusted replay (DESIGN.md "Threat model").

`cncc-emu --emu-device-module -c k.mlu` compiles a `.mlu` with every function instrumented; `link` makes those
objects one shared object that a replay process can load without running anything of the student's:

- no initialisers: `.init_array`/`.fini_array`/`.ctors`/`.dtors` are removed from every object before the link
  (a file-scope `static int x = f();` never runs; kernels do not need it) and `-nostartfiles` adds none;
- calls only into the builtins: every undefined symbol outside ALLOWED (the runtime's device API, libm, libgcc's
  helpers such as the half conversions, the C++ unwinder) is bound, inside the module, to a stub that stops the
  kernel with a `forbidden-call` error;
- `memcpy`/`memmove`/`memset` are the module's own, checked like any store of kernel code, and `printf` goes
  through the runtime, which refuses `%n` (a store through an argument);
- `check` then refuses a module with initialiser tables, text relocations, system-call instructions or indirect
  branches outside the PLT (device code is built without jump tables, so those can only be function pointers:
  a kernel has no business calling through one).
"""

from __future__ import annotations

import functools
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from bang_emu import toolchain

STRIPPED_SECTIONS = (".init_array", ".fini_array", ".ctors", ".dtors", ".preinit_array")
# The runtime's entry points kernel code (and the emulator's own templates in device.h) may call.
_RUNTIME_ALLOWED = re.compile(
    r"^(?:__bang_\w+|__memcpy\w*|__memset\w*|__\w*ramset\w*|__sync\w*|__asan_\w+|__float2\w+|__half2\w+|"
    r"__bfloat162\w+|__int2\w+|__uint2\w+|__short2\w+|__ushort2\w+|__cn_\w+|__mlu_\w+|__is_\w+|__abort\w*|"
    r"bang_emu_forbidden_call|bang_emu_device_vprintf|cnrtGetLastError|"
    # bang_emu:: (device.h): launch glue, on-chip storage, task variables and their TLS wrappers
    r"_ZN8bang_emu(?:13launch_erased|16note_launch_args|14journal_active|14journal_launch|12onchip_alloc)\w*|"
    r"_Z\w*N8bang_emu11g_task_varsE)$")
# Issue 37: libm is allowed by function, not as a library. PURE_LIBM: the functions whose arguments and result are
# values (no pointer a kernel chooses, no memory result), in each of their precisions. Left out: modf, frexp,
# remquo, sincos, lgamma_r, the fe* environment functions (they store through a pointer or change the rounding of
# the replay's own arithmetic), setpayload/canonicalize (store through a pointer) and the complex functions (a long
# double complex result goes through memory the caller names).
PURE_LIBM = frozenset("""
    acos acosh asin asinh atan atan2 atanh cbrt ceil copysign cos cosh erf erfc exp exp2 exp10 expm1 fabs fdim floor
    fma fmax fmin fmod hypot ilogb ldexp lgamma gamma llrint llround log log10 log1p log2 logb lrint lround nearbyint
    nextafter nexttoward nextup nextdown pow pow10 remainder drem rint round roundeven scalb scalbln scalbn
    significand sin sinh sqrt tan tanh tgamma trunc j0 j1 jn y0 y1 yn fmaximum fminimum fmaximum_num fminimum_num
    fmaxmag fminmag fmaximum_mag fminimum_mag fmaxmag_num fminmag_num fromfp fromfpx ufromfp ufromfpx
    isinf isnan finite nan
    acospi asinpi atanpi atan2pi cospi sinpi tanpi exp2m1 exp10m1 log2p1 log10p1 logp1 compoundn pown powr rootn
    rsqrt""".split())
_LIBM_SUFFIXES = ("", "f", "l", "f32", "f64", "f128", "f32x", "f64x")
# glibc's classification helpers (what isnan/signbit/fpclassify may call) and its finite-math aliases
_LIBM_HELPERS = re.compile(r"^__(?:fpclassify|isnan|isinf|finite|signbit|issignaling|iseqsig)[fl]?$|^__\w+_finite$")
# What libm stores through, made safe by construction instead of refused: the module links its own wrapper
# (`ld --wrap`), which calls libm with a local of its own and copies the result out with a checked store, so an
# honest kernel (or g++, which joins sin(x) and cos(x) into sincos(x, &s, &c)) keeps working.
WRAPPED_LIBM = ("modf", "modff", "frexp", "frexpf", "remquo", "remquof", "sincos", "sincosf", "lgamma_r",
                "lgammaf_r")
# libgcc's helpers a compiled kernel may need, by family: conversions (half, bfloat16, 128-bit), 128-bit and
# complex arithmetic, bit counts. Not __udivmodti4/__divmodti4 (a remainder through a pointer), not
# __register_frame_info and the like (they write tables), not __enable_execute_stack, not emutls.
_LIBGCC_ALLOWED = re.compile(
    r"^__(?:(?:extend|trunc)[a-z]{2}[a-z]{2}2|float(?:un)?[a-z]{2}[a-z]{2}|fix(?:uns)?[a-z]{2}[a-z]{2}|"
    r"(?:div|mod|udiv|umod|mul|neg|ashl|ashr|lshr|cmp|ucmp|abs|addv|subv|mulv|negv|absv)[a-z]{1,2}[23]|"
    r"(?:mul|div)[sdxt]c3|powi[sdxt]f2|(?:clz|ctz|ffs|popcount|parity|bswap)[a-z]{1,2}2)$")


def libm_helper(name: str) -> bool:
    """`name` is one of libm's classification helpers or finite-math aliases (__isnanf, __exp_finite ...)."""
    return bool(_LIBM_HELPERS.match(name))


def libgcc_helper(name: str) -> bool:
    """`name` is one of the compiler's arithmetic helpers a kernel may need (__extendhfsf2, __divti3 ...)."""
    return bool(_LIBGCC_ALLOWED.match(name))


def pure_libm_name(name: str) -> bool:
    """`name` is a pure libm function in one of its precisions (expf, sqrt, log1pl, fmaf128 ...)."""
    for suffix in _LIBM_SUFFIXES:
        if (not suffix or name.endswith(suffix)) and name[:len(name) - len(suffix)] in PURE_LIBM:
            return True
    return False


# What the C++ runtime needs to unwind a kernel that a check stopped (its frames' cleanups).
_UNWIND_ALLOWED = {"__gxx_personality_v0", "_Unwind_Resume", "__stack_chk_fail", "__cxa_pure_virtual",
                   "__tls_get_addr"}  # and the TLS of the task variables

SUPPORT_SOURCE = r"""
// The device module's own support (bang_emu/device_module.py): the memory functions g++ emits calls to, checked
// like any other store or load of kernel code.
#include <stddef.h>
#include <stdint.h>
extern "C" {
void __asan_loadN(uintptr_t, size_t);
void __asan_storeN(uintptr_t, size_t);
void *__dso_handle = &__dso_handle;
int bang_emu_device_vprintf(const char *format, __builtin_va_list args);
int printf(const char *format, ...) {  // a kernel's printf goes through the runtime, which refuses %n
  __builtin_va_list args;
  __builtin_va_start(args, format);
  int n = bang_emu_device_vprintf(format, args);
  __builtin_va_end(args);
  return n;
}
// va_start/va_arg/va_copy in the student's code store into the va_list without instrumentation; the rewriter
// (rewrite._va_edits) first calls this, a checked store of the whole object, so a placed va_list is stopped.
void bang_emu_va_touch(void *p, size_t n) { __asan_storeN((uintptr_t)p, n); }
int vprintf(const char *format, __builtin_va_list args) {  // the host's va_arg writes the kernel's va_list
  bang_emu_va_touch(args, sizeof *args);
  return bang_emu_device_vprintf(format, args);
}
void *memmove(void *d, const void *s, size_t n) {
  __asan_loadN((uintptr_t)s, n);
  __asan_storeN((uintptr_t)d, n);
  unsigned char *dd = (unsigned char *)d;
  const unsigned char *ss = (const unsigned char *)s;
  if (dd < ss) for (size_t i = 0; i < n; ++i) dd[i] = ss[i];
  else for (size_t i = n; i-- > 0;) dd[i] = ss[i];
  return d;
}
void *memcpy(void *d, const void *s, size_t n) { return memmove(d, s, n); }
// libm's functions that store through a pointer (device_module.WRAPPED_LIBM), linked with `ld --wrap`: libm writes
// only into this frame's local, the kernel's pointer gets a checked store.
#define BANG_EMU_OUT(type, p, v) (__asan_storeN((uintptr_t)(p), sizeof(type)), *(p) = (v))
double __real_modf(double, double *);
float __real_modff(float, float *);
double __real_frexp(double, int *);
float __real_frexpf(float, int *);
double __real_remquo(double, double, int *);
float __real_remquof(float, float, int *);
void __real_sincos(double, double *, double *);
void __real_sincosf(float, float *, float *);
double __real_lgamma_r(double, int *);
float __real_lgammaf_r(float, int *);
double __wrap_modf(double x, double *p) { double i; double r = __real_modf(x, &i); BANG_EMU_OUT(double, p, i); return r; }
float __wrap_modff(float x, float *p) { float i; float r = __real_modff(x, &i); BANG_EMU_OUT(float, p, i); return r; }
double __wrap_frexp(double x, int *p) { int e; double r = __real_frexp(x, &e); BANG_EMU_OUT(int, p, e); return r; }
float __wrap_frexpf(float x, int *p) { int e; float r = __real_frexpf(x, &e); BANG_EMU_OUT(int, p, e); return r; }
double __wrap_remquo(double x, double y, int *p) {
  int q; double r = __real_remquo(x, y, &q); BANG_EMU_OUT(int, p, q); return r;
}
float __wrap_remquof(float x, float y, int *p) { int q; float r = __real_remquof(x, y, &q); BANG_EMU_OUT(int, p, q); return r; }
void __wrap_sincos(double x, double *s, double *c) {
  double a, b; __real_sincos(x, &a, &b); BANG_EMU_OUT(double, s, a); BANG_EMU_OUT(double, c, b);
}
void __wrap_sincosf(float x, float *s, float *c) {
  float a, b; __real_sincosf(x, &a, &b); BANG_EMU_OUT(float, s, a); BANG_EMU_OUT(float, c, b);
}
double __wrap_lgamma_r(double x, int *p) { int g; double r = __real_lgamma_r(x, &g); BANG_EMU_OUT(int, p, g); return r; }
float __wrap_lgammaf_r(float x, int *p) { int g; float r = __real_lgammaf_r(x, &g); BANG_EMU_OUT(int, p, g); return r; }
void *memset(void *d, int v, size_t n) {
  __asan_storeN((uintptr_t)d, n);
  unsigned char *dd = (unsigned char *)d;
  for (size_t i = 0; i < n; ++i) dd[i] = (unsigned char)v;
  return d;
}
}
"""


@dataclass
class LinkResult:
    ok: bool
    message: str  # what went wrong, for the build log ("" when ok)


def _run(cmd: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True)


@functools.cache
def _library_exports(name: str) -> frozenset[str]:
    """The dynamic symbols a system library defines (libm's functions are pure: a kernel may call them)."""
    for folder in ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64"):
        path = Path(folder) / name
        if path.exists():
            out = _run(["nm", "-D", "--defined-only", str(path)]).stdout
            return frozenset(line.split()[-1].split("@")[0] for line in out.splitlines() if line.split())
    return frozenset()


_MANGLED_FREE_FUNCTION = re.compile(r"^_Z(\d+)")


def allowed(symbol: str) -> bool:
    name = symbol
    m = _MANGLED_FREE_FUNCTION.match(symbol)
    if m:  # `_Z21__bang_active_sigmoidPfPKfi`: the builtins are C++ overloads; judge the name
        name = symbol[m.end():m.end() + int(m.group(1))]
    if _RUNTIME_ALLOWED.match(name) or _RUNTIME_ALLOWED.match(symbol) or symbol in _UNWIND_ALLOWED:
        return True
    if symbol.startswith(("__wrap_", "__real_")):
        return False  # the module's own wrappers define them; left undefined, something went around them
    if symbol in WRAPPED_LIBM:  # `ld --wrap` sends every reference of the kernel's objects to the wrapper: only
        return symbol in _library_exports("libm.so.6")  # the wrapper's own __real_ call is left for libm
    if pure_libm_name(symbol) or _LIBM_HELPERS.match(symbol):
        return symbol in _library_exports("libm.so.6") or symbol in _library_exports("libc.so.6")
    # the compiler's own helpers (half conversions such as __extendhfsf2, 128-bit division), not unwinding
    return bool(_LIBGCC_ALLOWED.match(symbol)) and symbol in _library_exports("libgcc_s.so.1")


def undefined_symbols(path: Path) -> list[str]:
    out = _run(["nm", "-D", "--undefined-only", str(path)]).stdout
    return sorted({line.split()[-1].split("@")[0] for line in out.splitlines() if line.split()})


def _object_undefined(path: Path) -> list[str]:
    out = _run(["nm", "--undefined-only", str(path)]).stdout
    return sorted({line.split()[-1] for line in out.splitlines() if line.split()})


def _stub_source(symbols: list[str]) -> str:
    lines = ['extern "C" void bang_emu_forbidden_call(const char *name);']
    for i, name in enumerate(symbols):
        lines.append(f'extern "C" void __bang_emu_stub_{i}(void) __asm__("{name}");')
        lines.append(f'extern "C" void __bang_emu_stub_{i}(void) {{ bang_emu_forbidden_call("{name}"); }}')
    return "\n".join(lines) + "\n"


def _compile(source: str, path: Path, unwind: bool = False) -> subprocess.CompletedProcess:
    """`unwind`: with unwind tables, so a check that stops the kernel inside (a libm wrapper's store) can throw
    through it."""
    src = path.with_suffix(".cpp")
    src.write_text(source)
    tables = ["-fexceptions", "-fasynchronous-unwind-tables"] if unwind else ["-fno-exceptions",
                                                                              "-fno-asynchronous-unwind-tables"]
    return _run(["g++", "-c", "-O2", "-fPIC", "-fno-builtin", *tables, "-fno-omit-frame-pointer", str(src), "-o",
                 str(path)])


def _link(objects: list[Path], out: Path) -> subprocess.CompletedProcess:
    return _run(["g++", "-shared", "-nostartfiles", "-o", str(out), *map(str, objects), "-Wl,-z,now", "-Wl,-z,relro",
                 "-Wl,-Bsymbolic", "-Wl,--no-undefined-version", *(f"-Wl,--wrap={name}" for name in WRAPPED_LIBM),
                 f"-L{toolchain.runtime_dir()}", "-lm"])


def link(objects: list[Path], out: Path) -> LinkResult:
    """Links device objects (cncc-emu --emu-device-module -c) into `out`, then checks it."""
    with tempfile.TemporaryDirectory(prefix="bang-emu-devmod-") as tmp:
        work = Path(tmp)
        stripped = []
        for i, obj in enumerate(objects):
            copy = work / f"{i}.o"
            removed = [arg for sec in STRIPPED_SECTIONS for arg in ("-R", sec, "-R", ".rela" + sec)]
            proc = _run(["objcopy", *removed, str(obj), str(copy)])
            if proc.returncode != 0:
                return LinkResult(False, f"objcopy {obj.name}: {proc.stderr.strip()[-2000:]}")
            stripped.append(copy)
            around = [s for s in _object_undefined(copy) if s.startswith(("__real_", "__wrap_"))]
            if around:  # `__real_modf` would reach libm's modf past its checked wrapper
                return LinkResult(False, f"{obj.name} calls {', '.join(around[:5])}: device code may not name the "
                                         "device module's own wrappers")
        support = work / "support.o"
        proc = _compile(SUPPORT_SOURCE, support, unwind=True)
        if proc.returncode != 0:
            return LinkResult(False, "device module support: " + proc.stderr[-2000:])
        first = work / "first.so"
        proc = _link([*stripped, support], first)
        if proc.returncode != 0:
            return LinkResult(False, "linking the device module: " + proc.stderr.strip()[-4000:])
        forbidden = [s for s in undefined_symbols(first) if not allowed(s)]
        objects_final = [*stripped, support]
        if forbidden:
            stubs = work / "stubs.o"
            proc = _compile(_stub_source(forbidden), stubs)
            if proc.returncode != 0:
                return LinkResult(False, "device module stubs: " + proc.stderr[-2000:])
            objects_final.append(stubs)
        proc = _link(objects_final, out)
        if proc.returncode != 0:
            return LinkResult(False, "linking the device module: " + proc.stderr.strip()[-4000:])
    problems = check(out)
    if problems:
        out.unlink(missing_ok=True)
        return LinkResult(False, "\n".join(problems))
    return LinkResult(True, "")


# device.h's ReplaySite<...>::record: a site's key and invoker (the rewriter refuses student code that names
# anything in namespace bang_emu, so only the emulator's template makes these symbols).
_SITE_RECORD = re.compile(r"^_ZN8bang_emu10ReplaySiteI\w*E6recordE$")


def site_records(path: Path) -> list[int]:
    """Offsets of the launch-site records in a device module, from its symbol table."""
    out = _run(["nm", "--defined-only", str(path)]).stdout
    offsets = []
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and _SITE_RECORD.match(parts[2]):
            offsets.append(int(parts[0], 16))
    return sorted(set(offsets))


_INDIRECT = re.compile(r"\b(?:call|jmp)q?\s+\*")
# Issue 37, checked on the object code whatever the source did: instructions no instrumented C++ compiles to,
# only target builtins and intrinsics -- non-temporal, masked and scatter stores, the state save/restore family,
# protection-key, segment-base and shadow-stack writes. (String stores stay: g++ expands instrumented aggregate
# copies and clears to them.)
_UNCHECKED_STORE = re.compile(
    r"^\s*[0-9a-f]+:\s+(?:movnt\w*|v?maskmov\w*|vpmaskmov\w*|v?p?scatter\w*|vp?compress\w*|v?movdir\w*|"
    r"enqcmd\w*|xsave\w*|xrstor\w*|fx(?:save|rstor)\w*|wrpkru|wr[fg]sbase|wrss\w*|incssp\w*|rstorssp|"
    r"saveprevssp|setssbsy|clrssbsy|ldmxcsr|vldmxcsr)\b")
# a write of the stack pointer other than by a constant or from the frame pointer (a frame's set-up and tear-down):
# what alloca, a VLA, __builtin_stack_restore or a longjmp compile to
_RSP_WRITE = re.compile(r"^\s*[0-9a-f]+:\s+(\w+)\s+(.*),%[re]?sp\s*$")
# (cmp/test only read it: the probe loop -fstack-clash-protection emits for a frame of many pages compares the
# stack pointer with its target, `cmp %r11,%rsp`, and an honest kernel with a large local array has one)
_RSP_WRITE_OK = re.compile(r"^(?:(?:sub|add|and)q?\s+\$-?0x[0-9a-f]+|movq?\s+%rbp|leaq?\s+-?(?:0x[0-9a-f]+)?\(%rbp\)|"
                           r"(?:cmp|test)[bwlq]?\s+\S+)$")
_SYSCALL = re.compile(r"\b(?:syscall|sysenter|int\s+\$0x80)\b")


def check(path: Path) -> list[str]:
    """Why a linked device module must not be loaded ([] when it may)."""
    problems = []
    dynamic = _run(["readelf", "-d", "-W", str(path)]).stdout
    for tag in ("(INIT)", "(FINI)", "(INIT_ARRAY)", "(FINI_ARRAY)", "(PREINIT_ARRAY)", "(TEXTREL)"):
        if tag in dynamic:
            problems.append(f"the device module has {tag.strip('()')}: code that would run when it is loaded")
    left = [s for s in undefined_symbols(path) if not allowed(s)]
    if left:
        problems.append("the device module calls outside the builtins: " + ", ".join(left[:10]))
    disassembly = _run(["objdump", "-d", "--no-show-raw-insn", "-j", ".text", str(path)]).stdout
    function = "?"
    for line in disassembly.splitlines():
        head = re.match(r"^[0-9a-f]+ <(.+)>:$", line)
        if head:
            function = head.group(1)
            continue
        if _SYSCALL.search(line):
            problems.append(f"a system call instruction in {function}")
        elif _UNCHECKED_STORE.search(line):
            instruction = line.split(":", 1)[1].strip()
            problems.append(f"an instruction the emulator's checks do not see in {function} ('{instruction}': a "
                            "target builtin or intrinsic; device code may not use them)")
        elif (m := _RSP_WRITE.match(line)) and not _RSP_WRITE_OK.match(f"{m.group(1)} {m.group(2).strip()}"):
            instruction = line.split(":", 1)[1].strip()
            problems.append(f"the stack pointer moved by a computed amount in {function} ('{instruction}': alloca, "
                            "a variable-length array or a stack switch; device code may not)")
        elif _INDIRECT.search(line):
            problems.append(f"a call through a function pointer in {function}: device code may call only device "
                            "functions and builtins")
    return problems[:20]
