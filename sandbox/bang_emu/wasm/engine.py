"""The engine: a checked, counted device module (build.py) turned into a shared object the replay runs
(runtime/wasm_host.cpp), by Debian's wasm2c and gcc -- as Firefox's RLBox confines a library. wasm2c emits C in
which every load and store is an offset from the linear memory's base (the signal-handler configuration: no
bounds check in the code, the host's 8 GiB reservation is the bound); the glue written here gives the host the
module's entry points by fixed names, its counters and stack pointer, its site invokers by index (`site_names`
says which index is which site), the layout it was linked for (layout.py, the one definition), and where the
kernel is: the `where` global and the table of the code sites' files and lines (lines.py; the module's own
section, read and checked here; a module without one, or with a malformed one, has no lines and runs the same).

What goes in is a wasm module, whatever produced it: the compilers that read the student's source only made it,
and it was checked (imports.py, layout) and counted (counting.py) before this runs, so this step trusts nothing of
the student's but the module's validity, which wasm2c checks.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from bang_emu.wasm import counting, layout, lines

WASM2C_RUNTIME = Path("/usr/share/wabt/wasm2c/wasm-rt-impl.c")
MODULE = "device"
LIBRARY = f"{MODULE}.wasm.so"  # compile_engine's output in its folder
# wasm_host.cpp's LayoutField order; the table ends with its own length (a version check)
LAYOUT_FIELDS = ("STACK_BYTES", "ARGS_BASE", "ARGS_BYTES", "ONCHIP_BASE", "NRAM_BASE", "WRAM_BASE", "SRAM_BASE",
                 "SRAM_END", "GDRAM_BASE", "MAX_MEMORY_BYTES", "MAX_INSTANCES", "ARENA_BYTES", "JOURNAL_REGION_BASE")
# -O1: the engine is made once per module and its code replays a few calls; the example's module (seven kernels)
# compiles in 1.07 CPU-s at -O1 against 1.99 at -O2 (issue 41), and what a replay counts is the module's own
# counters (counting.py), whatever gcc makes of them.
GCC_FLAGS = ["-O1", "-shared", "-fPIC", "-fexceptions", "-fno-strict-aliasing", "-w",
             "-DWASM_RT_TRAP_HANDLER=bang_wasm_trap", "-DWASM_RT_SKIP_SIGNAL_RECOVERY=1"]


class EngineError(Exception):
    """wasm2c or gcc refused the module; the message says which and why."""


@dataclass(frozen=True)
class Engine:
    library: Path  # the shared object wasm_host.cpp loads
    site_names: tuple[str, ...]  # index -> site name (sites.site_name form)


def missing() -> list[str]:
    """What this machine lacks to build an engine ([] when nothing)."""
    absent = [tool for tool in ("wasm2c", "gcc") if not shutil.which(tool)]
    return absent + ([] if WASM2C_RUNTIME.exists() else [str(WASM2C_RUNTIME)])


def _exports(header: str) -> dict[str, str]:
    """Export name -> the C function wasm2c made for it (from its header's `/* export: 'name' */` comments)."""
    return {m.group(1): m.group(2) for m in
            re.finditer(r"/\* export: '([^']*)' \*/\n[^\n(]*?\b(\w+)\(", header)}


def _c_chars(text: str) -> str:
    """`text` as a C initializer of bytes, NUL-terminated: no escaping a name could get around."""
    return ", ".join(str(b) for b in text.encode()) + (", 0" if text else "0")


def glue(header: str, site_names: list[str], files: tuple[str, ...] = (),
         code_sites: tuple[tuple[int, int], ...] = ()) -> str:
    exports = _exports(header)
    counters = list(counting.COUNTER_EXPORTS)
    absent = [name for name in (*counters, "__stack_pointer", *site_names) if name not in exports]
    if absent:
        raise EngineError("the module does not export " + ", ".join(absent))
    inst = f"Z_{MODULE}_instance_t"
    values = [str(getattr(layout, name)) + "ull" for name in LAYOUT_FIELDS] + [f"{len(LAYOUT_FIELDS)}ull"]
    lines = [
        f'#include "{MODULE}.h"',
        f"size_t bang_wasm_instance_size(void) {{ return sizeof({inst}); }}",
        f"void bang_wasm_init_module(void) {{ Z_{MODULE}_init_module(); }}",
        f"void bang_wasm_instantiate(void *inst, struct Z_bang_instance_t *b, struct Z_env_instance_t *e) "
        f"{{ Z_{MODULE}_instantiate(({inst} *)inst, b, e); }}",
        f"u32 *bang_wasm_stack_pointer(void *inst) {{ return {exports['__stack_pointer']}(({inst} *)inst); }}",
        "u64 *bang_wasm_counter(void *inst, int k) {",
        "  switch (k) {",
        *[f"    case {k}: return {exports[name]}(({inst} *)inst);" for k, name in enumerate(counters)],
        "  }",
        "  return 0;",
        "}",
        "u32 bang_wasm_site(size_t k, void *inst, u32 args, u32 nbytes) {",
        "  switch (k) {",
        *[f"    case {k}: return {exports[name]}(({inst} *)inst, args, nbytes);"
          for k, name in enumerate(site_names)],
        "  }",
        "  return 1;",
        "}",
        f"const unsigned long long bang_wasm_layout[] = {{{', '.join(values)}}};",
        # where the kernel is (wasm_host.cpp): the global, then the sites' table -- its length, the files (each name
        # NUL-terminated), then (file, line) per site from 1
        "u32 *bang_wasm_where(void *inst) {",
        f"  return {exports[counting.WHERE_EXPORT]}(({inst} *)inst);" if counting.WHERE_EXPORT in exports
        else "  (void)inst; return 0;",
        "}",
        f"const unsigned bang_wasm_line_counts[2] = {{{len(files)}u, {len(code_sites)}u}};",
        f"const char bang_wasm_line_files[] = {{{', '.join(_c_chars(f) for f in files) or '0'}}};",
        f"const unsigned bang_wasm_line_sites[] = {{{', '.join(f'{f}u, {n}u' for f, n in code_sites) or '0'}}};",
    ]
    return "\n".join(lines) + "\n"


def compile_engine(counted_wasm: bytes, site_names: list[str], work: Path) -> Engine:
    """`counted_wasm` (build.py's result, checked and counted) as a shared object in `work`."""
    work.mkdir(parents=True, exist_ok=True)
    (work / f"{MODULE}.wasm").write_bytes(counted_wasm)
    steps = [["wasm2c", str(work / f"{MODULE}.wasm"), "-n", MODULE, "-o", str(work / f"{MODULE}.c")]]
    for cmd in steps:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        if proc.returncode != 0:
            raise EngineError(f"{cmd[0]} refused the module: {proc.stderr.strip()[:2000]}")
    try:
        files, code_sites = lines.table(counted_wasm)
    except lines.LinesError:
        files, code_sites = (), ()  # errors are named at the launch's line, as before the table existed
    (work / "glue.c").write_text(glue((work / f"{MODULE}.h").read_text(), site_names, files, code_sites))
    (work / "trap.h").write_text("void bang_wasm_trap(int code);\n")
    library = work / LIBRARY
    cmd = ["gcc", *GCC_FLAGS, f"-I{work}", f"-I{WASM2C_RUNTIME.parent}", "-include", str(work / "trap.h"),
           str(work / f"{MODULE}.c"), str(work / "glue.c"), str(WASM2C_RUNTIME), "-lm", "-o", str(library)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise EngineError(f"gcc could not compile the module's C: {proc.stderr.strip()[:2000]}")
    return Engine(library, tuple(site_names))
