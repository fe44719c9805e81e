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
    return (bool(_RUNTIME_ALLOWED.match(name)) or bool(_RUNTIME_ALLOWED.match(symbol)) or symbol in _UNWIND_ALLOWED
            or symbol in _library_exports("libm.so.6")
            # the compiler's own helpers (half conversions such as __extendhfsf2, 128-bit division), not unwinding
            or (symbol in _library_exports("libgcc_s.so.1") and not symbol.startswith("_Unwind_")))


def undefined_symbols(path: Path) -> list[str]:
    out = _run(["nm", "-D", "--undefined-only", str(path)]).stdout
    return sorted({line.split()[-1].split("@")[0] for line in out.splitlines() if line.split()})


def _stub_source(symbols: list[str]) -> str:
    lines = ['extern "C" void bang_emu_forbidden_call(const char *name);']
    for i, name in enumerate(symbols):
        lines.append(f'extern "C" void __bang_emu_stub_{i}(void) __asm__("{name}");')
        lines.append(f'extern "C" void __bang_emu_stub_{i}(void) {{ bang_emu_forbidden_call("{name}"); }}')
    return "\n".join(lines) + "\n"


def _compile(source: str, path: Path) -> subprocess.CompletedProcess:
    src = path.with_suffix(".cpp")
    src.write_text(source)
    return _run(["g++", "-c", "-O2", "-fPIC", "-fno-builtin", "-fno-exceptions", "-fno-asynchronous-unwind-tables",
                 "-fno-omit-frame-pointer", str(src), "-o", str(path)])


def _link(objects: list[Path], out: Path) -> subprocess.CompletedProcess:
    return _run(["g++", "-shared", "-nostartfiles", "-o", str(out), *map(str, objects), "-Wl,-z,now", "-Wl,-z,relro",
                 "-Wl,-Bsymbolic", "-Wl,--no-undefined-version", f"-L{toolchain.runtime_dir()}"])


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
        support = work / "support.o"
        proc = _compile(SUPPORT_SOURCE, support)
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
        elif _INDIRECT.search(line):
            problems.append(f"a call through a function pointer in {function}: device code may call only device "
                            "functions and builtins")
    return problems[:20]
