"""Build a submission's device code into one WebAssembly module (DESIGN.md, "Confinement by construction"):

1. preprocess each .mlu with clang-19 for wasm32 against the wasm flavour of bang.h (include/), keywords kept;
2. rewrite it with the emulator's own rewriter (bang_emu.rewrite, device-module mode: the same refusals and the
   same on-chip and launch-site forms as the native device module), then give the result its wasm meaning: an
   on-chip array is a reference fetched from the host at each call (not thread_local: cores share the module's
   memory), file-scope on-chip arrays are refused (not yet: they need an accessor);
3. compile with `-nostdinc -nostdinc++` and only the wasi/libc++/clang include dirs (nothing falls through to
   glibc's headers), and link `-nostdlib` with wasm-ld-19 against the device libc (the pure members of wasi-libc,
   computed once per wasi-libc) and compiler-rt's builtins. Kernels are the only exports; host functions, with
   every launch and every CNRT call in them, are dropped by the link. Compiled and linked with line tables, which
   give the code sites their lines and are then dropped (lines.py);
4. check the module: imports (imports.py), its data below the on-chip arenas (layout.py);
5. add the scalar counters and the code sites' marks (counting.py), and the sites' line table (lines.py).

A construct that could escape (x86 asm, target builtins, setjmp, alloca ...) fails in step 2 or 3, a libc call
that needs WASI in step 3 (undefined) or 4 (a WASI import); each as WasmBuildError with the compiler's or our
message naming it.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bang_emu import driver, toolchain
from bang_emu import rewrite as rw
from bang_emu.wasm import api, counting, imports, layout, lines, records, sites
from bang_emu.wasm import binary as wb

WASM_DIR = Path(__file__).resolve().parent
INCLUDE_DIR = WASM_DIR / "include"
HEADER = INCLUDE_DIR / "bang.h"
NATIVE_INCLUDE_DIR = toolchain.INCLUDE_DIR  # device_types.h, minmax.h: shared with the native header
LLVM = Path("/usr/lib/llvm-19")
CLANG_RESOURCE_INCLUDE = LLVM / "lib/clang/19/include"
BUILTINS_LIB = LLVM / "lib/clang/19/lib/wasi/libclang_rt.builtins-wasm32.a"
WASI_INCLUDE = Path("/usr/include/wasm32-wasi")
LIBCXX_INCLUDE = WASI_INCLUDE / "c++/v1"
WASI_LIBC = Path("/usr/lib/wasm32-wasi/libc.a")
# what each tool or file comes from (Debian packages; scripts/setup-system.sh installs them with --tests)
REQUIRED = {"clang-19": "clang-19", "wasm-ld-19": "lld-19", "llvm-ar-19": "llvm-19", "llvm-nm-19": "llvm-19",
            lines.SYMBOLIZER: "llvm-19",
            str(WASI_LIBC): "wasi-libc", str(BUILTINS_LIB): "libclang-rt-19-dev-wasm32",
            str(LIBCXX_INCLUDE / "type_traits"): "libc++-19-dev-wasm32"}
DEFAULT_ARCH = "mtp_372"

# The features are pinned (-mcpu=mvp and two), not clang's default for the target: no bulk memory (memory.copy/fill
# would escape the counter pass), no SIMD, no threads; mutable globals (the exported stack pointer) and sign
# extension. Symbols are hidden by default, so that only the kernels (bang.h gives them default visibility) are
# exported; types keep default visibility, or a kernel instantiated on a type (half) would be hidden with it.
# -nostdinc -nostdinc++: only the include dirs _compile_flags names (nothing falls through to glibc's headers).
CXXFLAGS = ["--target=wasm32-wasi", "-std=c++17", "-O2", "-fno-exceptions", "-fno-rtti", "-fvisibility=hidden",
            "-Xclang", "-ftype-visibility=default", "-mcpu=mvp", "-mmutable-globals", "-msign-ext", "-nostdinc",
            "-nostdinc++"]
LDFLAGS = ["--no-entry", "--strip-debug", "--export-dynamic", "--stack-first", f"-z stack-size={layout.STACK_BYTES}",
           "--import-memory", f"--initial-memory={layout.GDRAM_BASE}", f"--max-memory={layout.MAX_MEMORY_BYTES}",
           "--export=__stack_pointer", "--export=__data_end", "--export=__heap_base",
           f"--export={sites.KEEPER_EXPORT}"]  # keeps the site invokers; sites.export_sites drops it
# wasi-libc members whose symbols reach the outside world (WASI calls, stdio, exit, the allocator): the device libc
# leaves them out, and with them every member that needs one
_LIBC_BANNED = {"stdout", "stderr", "stdin", "exit", "_Exit", "abort", "__stdio_exit", "fopen", "malloc", "free",
                "calloc", "realloc", "sbrk", "aligned_alloc", "posix_memalign"}
# symbols a member may leave undefined: compiler-rt's and the linker's
_LIBC_LINKER_PROVIDED = ("__extend", "__trunc", "__mul", "__div", "__add", "__sub", "__fix", "__float", "__lt",
                         "__gt", "__eq", "__ne", "__ge", "__le", "__unord", "__ashl", "__lshr", "__ashr",
                         "__compiler_rt", "__stack_pointer", "__memory_base", "__table_base",
                         "__indirect_function_table")
DEVLIBC_RULE_VERSION = "1"  # bump when the selection above changes: the cached archive's key


class WasmBuildError(Exception):
    """The device code does not build into an acceptable module; the message names why."""


def missing() -> list[str]:
    """The tools and files the build needs that are absent, each with its Debian package ("clang-19 (clang-19)")."""
    out = []
    for item, package in REQUIRED.items():
        present = Path(item).exists() if item.startswith("/") else shutil.which(item) is not None
        if not present:
            out.append(f"{item} ({package})")
    return out


def _run(cmd: list[str], what: str, cwd: Path | None = None) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd)
    if proc.returncode != 0:
        raise WasmBuildError(f"{what} failed:\n{(proc.stderr or proc.stdout).strip()[-4000:]}")
    return proc.stdout


def _cache_dir() -> Path:
    d = toolchain._build_roots()[0] / "wasm"  # the emulator's cache ($BANG_EMU_CACHE or ~/.cache/bang_emu)
    d.mkdir(parents=True, exist_ok=True)
    return d


def _cached(name: str, key: str, make: Callable[[Path], None]) -> Path:
    """cache/<name>-<key>, made once by make(tmp_path) under a lock (concurrent builders wait)."""
    target = _cache_dir() / f"{key}-{name}"
    if target.exists():
        return target
    with open(_cache_dir() / f".{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not target.exists():
            fd, tmp = tempfile.mkstemp(dir=target.parent, suffix=name)
            os.close(fd)
            try:
                make(Path(tmp))
                os.replace(tmp, target)
            finally:
                if os.path.exists(tmp):
                    os.unlink(tmp)
    return target


# ------------------------------------------------------------------------------------------------ device libc
def _select_members(members: dict[str, tuple[set[str], set[str]]]) -> set[str]:
    """The members (name -> (defined, undefined)) that neither define nor reach a banned symbol, closed under their
    own references."""
    def banned(s: str) -> bool:
        return s.startswith(("__wasi", "__imported_wasi")) or s in _LIBC_BANNED

    keep = {m for m, (defs, undefs) in members.items() if not any(banned(s) for s in defs | undefs)}
    changed = True
    while changed:
        changed = False
        provided = set().union(*(members[m][0] for m in keep))
        for m in sorted(keep):
            if any(s not in provided and not s.startswith(_LIBC_LINKER_PROVIDED) for s in members[m][1]):
                keep.discard(m)
                changed = True
    return keep


def _make_devlibc(out: Path) -> None:
    with tempfile.TemporaryDirectory() as d:
        _run(["llvm-ar-19", "x", str(WASI_LIBC)], "extracting wasi-libc", cwd=Path(d))
        names = sorted(f for f in os.listdir(d) if f.endswith(".o"))
        listing = _run(["llvm-nm-19", "-A", *names], "reading wasi-libc's symbols", cwd=Path(d))
        members: dict[str, tuple[set[str], set[str]]] = {n: (set(), set()) for n in names}
        for line in listing.splitlines():
            obj, _, rest = line.partition(": ")
            p = rest.split()
            if obj not in members:
                continue
            if len(p) == 2 and p[0] == "U":
                members[obj][1].add(p[1])
            elif len(p) == 3 and p[1] in "TDBRVWdtbr":
                members[obj][0].add(p[2])
        keep = _select_members(members)
        out.unlink()
        _run(["llvm-ar-19", "rcs", str(out), *sorted(keep)], "writing the device libc", cwd=Path(d))


def devlibc() -> Path:
    """The device libc: wasi-libc's members that reach no WASI import, stdio, exit or allocator (libm, string.h,
    qsort ...), cached by the content of wasi-libc's libc.a (its version) and the selection rule."""
    h = hashlib.sha256(WASI_LIBC.read_bytes())
    h.update(DEVLIBC_RULE_VERSION.encode())
    return _cached("devlibc.a", h.hexdigest()[:16], _make_devlibc)


DEVICE_STDIO = WASM_DIR / "device_stdio.c"


def device_stdio() -> Path:
    """printf, vprintf, puts, putchar for device code (device_stdio.c: the host formats), compiled once."""
    h = hashlib.sha256(DEVICE_STDIO.read_bytes() + " ".join(CXXFLAGS).encode()).hexdigest()[:16]

    def make(out: Path) -> None:
        flags = [f for f in CXXFLAGS if f not in ("-std=c++17", "-fno-rtti", "-nostdinc++")]
        _run(["clang-19", "-x", "c", *flags, "-isystem", str(CLANG_RESOURCE_INCLUDE), "-isystem", str(WASI_INCLUDE),
              "-c", str(DEVICE_STDIO), "-o", str(out)], "compiling the device's printf")

    return _cached("device_stdio.o", h, make)


# ------------------------------------------------------------------------------------------------ compile, link
@functools.lru_cache(maxsize=1)
def generated_include() -> Path:
    """The directory holding bang_builtins.h (api.wasm_header(): every native builtin as an import), made once per
    native header and generator (cached by their content)."""
    h = hashlib.sha256(api.DEVICE_H.read_bytes() + Path(api.__file__).read_bytes())
    for name, text in _alias_headers().items():
        h.update(name.encode() + text.encode())
    h = h.hexdigest()[:16]

    def make(tmp: Path) -> None:
        tmp.unlink()
        tmp.mkdir()
        (tmp / "bang_builtins.h").write_text(api.wasm_header())
        for name, text in _alias_headers().items():  # `#include "bang.h"` here finds the wasm one
            (tmp / name).write_text(text)

    return _cached("include", h, make)


SHARED_HEADERS = ("cn_api.h",)  # native headers of types and declarations only, the same in wasm (mlu-ops includes it)


def _alias_headers() -> dict[str, str]:
    """The native include dir's headers that only include bang.h (the names cncc ships that lab code includes:
    bang_device_functions.h, __clang_bang_runtime_wrapper.h, ...), for the wasm include path too."""
    out = {}
    for header in sorted(NATIVE_INCLUDE_DIR.glob("*.h")):
        text = header.read_text()
        code = re.sub(r"/\*.*?\*/", "", text, flags=re.S).strip()
        if (code == '#include "bang.h"' or header.name in SHARED_HEADERS) and not (INCLUDE_DIR / header.name).exists():
            out[header.name] = text
    return out


def generated_header() -> Path:
    return generated_include() / "bang_builtins.h"


def _compile_flags(archs: list[str]) -> list[str]:
    """clang-19's flags for device code: CXXFLAGS, the macros cncc predefines (the architecture's from the driver,
    one source), and the include dirs in order: the wasm bang.h, libc++, clang's own, wasi-libc's (system headers:
    the rewriter's refusals do not apply to them)."""
    return [*CXXFLAGS, "-D__BANG__=1", "-D__MLU__=1", *driver._arch_macros(archs),
            *(a for d in (INCLUDE_DIR, generated_include(), LIBCXX_INCLUDE, CLANG_RESOURCE_INCLUDE, WASI_INCLUDE)
              for a in ("-isystem", str(d)))]


_ONCHIP_RECORD = re.compile(r'__asm__ __volatile__\("\.pushsection ' + re.escape(rw.ONCHIP_SECTION))
_FILE_SCOPE_RECORD = re.compile(r"\bstatic const unsigned long long __bang_emu_onchip_\d+\[2\]")
_EXTERN_ONCHIP = re.compile(r"\bextern\s+thread_local\s+[^;]*\(&\s*\w+\s*\)")


_FILE_SCOPE_FORM = re.compile(
    r"static const unsigned long long __bang_emu_onchip_(?P<index>\d+)\[2\] __attribute__\(\([^;]*?\)\) = "
    r"\{[^;]*?\};\s*(?P<store>(?:static\s+)?)thread_local (?P<base>[^;(]*?) \(&(?P<name>\w+)\)(?P<dims>(?:\[[^\]]*\])*) = ")


# a string or character literal (the name of a file-scope array inside one is text, not a use)
_LITERAL = r"""(?P<literal>"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*')"""
_INIT_COPY = "__builtin_memcpy((void *)__p, &__init, sizeof(__init)); return __p; }()"
_ONCE_COPY = "::bang_emu::onchip_init((void *)__p, &__init, sizeof(__init)); return __p; }()"
_INIT_LAMBDA = "*[]() { "


def _initialised_once(text: str) -> str:
    """An initialised on-chip array (`__nram__ float t[4] = {...};`): the rewriter's form is a thread_local
    reference whose initialiser (a lambda: onchip_alloc, then the initial values copied in) runs once per thread,
    so once per core, natively. In wasm the reference is fetched at each call (or each use, at file scope), so the
    copy asks the host first (bang_emu::onchip_init: bang.onchip_first_use, once per thread and array, as a
    thread_local's initialisation) and the array keeps what the kernel wrote into it, as natively."""
    out, pos = [], 0
    while (start := text.find(_INIT_LAMBDA, pos)) >= 0:
        head = text[start + len(_INIT_LAMBDA):start + len(_INIT_LAMBDA) + 400]
        copy = text.find(_INIT_COPY, start)
        if "(*__p)" not in head.split(";", 1)[0] or "::bang_emu::onchip_alloc(" not in head or copy < 0:
            out.append(text[pos:start + len(_INIT_LAMBDA)])
            pos = start + len(_INIT_LAMBDA)
            continue
        out.append(text[pos:copy] + _ONCE_COPY)
        pos = copy + len(_INIT_COPY)
    out.append(text[pos:])
    return "".join(out)


def _file_scope_arrays(text: str) -> str:
    """File-scope on-chip arrays, given their wasm meaning: every core has its own copy in its own arena and all
    cores share the module's memory, so the native thread_local reference becomes a function returning this core's
    array (onchip_alloc, as for an array declared in a function), and every later use of the name calls it. An
    initialised one copies its initial values once per core (_initialised_once, applied first)."""
    while m := _FILE_SCOPE_FORM.search(text):
        value_start = m.end()
        if text.startswith(_INIT_LAMBDA, value_start):
            copy = text.find(_ONCE_COPY, value_start)
            if copy < 0:
                raise WasmBuildError("internal: the rewriter's initialised on-chip form changed (bang_emu/rewrite.py)")
            end = text.index(";", copy + len(_ONCE_COPY))
        else:
            end = rw._match_forward(text, text.index("(", text.index("onchip_alloc", value_start)), "(", ")")
            end = text.index(";", end)
        value = text[value_start:end]
        name, index = m.group("name"), m.group("index")
        accessor = f"__bang_emu_onchip_array_{index}"
        definition = (f"{m.group('store')}{m.group('base')} (&{accessor}()){m.group('dims')} {{ return {value}; }}")
        use = re.compile(rf"{_LITERAL}|(?<![\w.>:$]){re.escape(name)}\b(?!\s*::)")
        rest = use.sub(lambda u, call=f"({accessor}())": u.group(0) if u.group("literal") else call, text[end + 1:])
        text = text[:m.start()] + definition + rest
    return text


def wasm_rewrite(preprocessed: str, user_file: Callable[[str], bool] | None = None) -> str:
    """The emulator's rewrite (device-module mode), given its wasm meaning: on-chip references per call (the native
    form is a thread_local reference with a size record in an ELF section), file-scope arrays through accessors
    (_file_scope_arrays); an extern declaration of another file's on-chip array is refused."""
    result = rw.rewrite(preprocessed, user_file=user_file, device_module=True)
    text = _file_scope_arrays(_initialised_once(result.text))
    for pattern in (_FILE_SCOPE_RECORD, _EXTERN_ONCHIP):
        if pattern.search(text):
            decl = next((d for d in result.onchip if f"__bang_emu_onchip_{d.index}[" in text), None)
            where = f"{decl.file}:{decl.line}: '{decl.name}'" if decl else "an on-chip array"
            raise WasmBuildError(f"{where}: this on-chip array's declaration is not supported by the wasm build yet "
                                 "(an extern declaration of another file's array)")
    out, pos = [], 0
    for m in _ONCHIP_RECORD.finditer(text):
        close = rw._match_forward(text, m.start() + len("__asm__ __volatile__"), "(", ")")
        semi = text.index(";", close)
        out.append(text[pos:m.start()])
        rest = re.match(r"\s*(?:static\s+)?thread_local\s+", text[semi + 1:])
        if not rest:
            raise WasmBuildError("internal: the rewriter's on-chip form changed (bang_emu/rewrite.py)")
        pos = semi + 1 + rest.end()
    out.append(text[pos:])
    return "".join(out)


@dataclass
class BuildResult:
    wasm: bytes  # counted module
    uncounted: bytes  # the linked module before the counter pass
    kernels: list[str]  # kernel exports (mangled names)
    sites: dict[str, int]  # launch sites: exported invoker's name (sites.site_name) -> function index
    imports: list[str]  # bang.* names used
    loads: int  # load/store instructions the counter pass instrumented
    stores: int
    seconds: dict[str, float] = field(default_factory=dict)
    code_lines: lines.Lines = field(default_factory=lines.Lines)  # the code sites' lines (the module's table)


def _user_file(path: str) -> bool:
    if path.startswith("<") or path.startswith("/usr/"):
        return False
    try:
        resolved = Path(path).resolve()
        return not any(resolved.is_relative_to(d) for d in (INCLUDE_DIR, NATIVE_INCLUDE_DIR, generated_include()))
    except OSError:
        return True


READERS_FILE = "<bang_emu: x86-64 readers of struct arguments>"  # records.readers' code, appended to a unit
_MACRO_CLASH = "too many arguments provided to function-like macro invocation"
_INCLUDED_FROM = re.compile(r"^In file included from (\S+?):\d+:$", re.M)
MAX_PRE_INCLUDES = 4


def _clashing_system_header(message: str) -> str | None:
    """The system header to include first when preprocessing failed because a user macro broke a system header
    included after it (mlu-ops' kernel.h: `#define sizeof(T) (uint32_t(sizeof(T)))`, then <sstream>, whose libc++
    says `sizeof(f<A, B>(0))`; libstdc++, natively, happens not to): the outermost system header of the failing
    include chain, the one a user file included. None for any other failure."""
    clash = re.search(rf"^(\S+?):\d+:\d+: error: {_MACRO_CLASH}", message, re.M)
    if not clash:
        return None
    before = message[:clash.start()].splitlines()  # the error's include chain is right above it
    stack = []
    while before and before[-1].startswith("In file included from "):
        stack.insert(0, before.pop())
    chain = _INCLUDED_FROM.findall("\n".join(stack)) + [clash.group(1)]
    return next((path for path in chain if not _user_file(path)), None)


def _preprocess(src: Path, flags: list[str], out: Path) -> None:
    """clang -E of src with the wasm bang.h first; a system header a user macro breaks is included before the user
    code instead (_clashing_system_header), as the same header's text, so its declarations are the same."""
    first: list[str] = []
    for _ in range(MAX_PRE_INCLUDES + 1):
        try:
            _run(["clang-19", *flags, "-DBANG_WASM_REWRITE", "-E", "-x", "c++", "-include", "bang.h",
                  *(a for h in first for a in ("-include", h)), str(src), "-o", str(out)], f"preprocessing {src.name}")
            return
        except WasmBuildError as e:
            header = _clashing_system_header(str(e))
            if header is None or header in first or len(first) == MAX_PRE_INCLUDES:
                raise
            first.append(header)


_LINEMARKER = re.compile(r'^# \d+ "([^"\\]*)"', re.M)


def compile_unit(src: Path, obj: Path, includes: list[Path], archs: list[str], workdir: Path) -> set[str]:
    """`src` compiled into `obj`; the student's files it reads (the paths its preprocessed text names that
    _user_file accepts: the only files whose lines name code sites, lines.py)."""
    flags = _compile_flags(archs) + [f"-I{d}" for d in includes]
    pre = workdir / (src.name + ".ii")
    _preprocess(src, flags, pre)
    try:
        text = wasm_rewrite(pre.read_text(errors="replace"), user_file=_user_file)
    except rw.RewriteError as e:
        raise WasmBuildError(str(e) if str(e).startswith(str(src)) else f"{src}: {e}") from e
    rewritten = workdir / (src.name + ".wasm.ii")
    rewritten.write_text(text)
    cmd = ["clang-19", *flags, *lines.COMPILE_FLAGS, "-x", "c++", "-c", str(rewritten), "-o", str(obj)]
    own = {path for path in _LINEMARKER.findall(text) if _user_file(path)}
    own |= {os.path.abspath(path) for path in own}  # a relative one: DWARF joins it to the compiler's directory
    first = subprocess.run(cmd, capture_output=True, text=True)
    if first.returncode == 0:
        return own
    # a struct kernel argument (bang.h's X86Arg says so): its reader from the x86-64 layout, and again; the layout
    # pass runs only for a unit that needs it
    readers = ""
    if records.NOT_DERIVED in first.stderr:
        try:
            readers = records.readers(text, workdir / src.name)
        except records.RecordError as refused:
            raise WasmBuildError(f"{src}: {refused}") from refused
    if not readers:
        raise WasmBuildError(f"compiling {src.name} failed:\n{(first.stderr or first.stdout).strip()[-4000:]}")
    rewritten.write_text(text + f'\n#line 1 "{READERS_FILE}"\n' + readers)  # their code has no student line
    _run(cmd, f"compiling {src.name}")
    return own


def link(objects: list[Path], out: Path, keep_debug: bool = False) -> None:
    """`objects` linked into the module `out`; `keep_debug`: its line tables kept (lines.py reads, then strips them)."""
    flags = [f for f in LDFLAGS if not (keep_debug and f == "--strip-debug")]
    try:
        _run(["wasm-ld-19", *[a for f in flags for a in f.split(" ", 1)], *map(str, objects), str(devlibc()),
              str(device_stdio()), str(BUILTINS_LIB), "-o", str(out)], "linking the device module")
    except WasmBuildError as e:
        if "undefined symbol" not in str(e):
            raise
        raise WasmBuildError(f"{e}\n(kernels link against the device library only: libm, string.h and the like, "
                             "pure functions, and the bang.* builtins; no I/O, no allocator, no system call)") from e


# musl's internal helpers of its libm (argument reduction, kernels of sin/cos/tan, error results), by name
_MUSL_MATH = re.compile(r"^__(?:math_(?:divzero|invalid|oflow|uflow|xflow)[fl]?|expo2f?|(?:cos|sin|tan)(?:df|l)?|"
                        r"rem_pio2(?:f|l|_large)?|(?:lgamma|lgammaf|lgammal)_r|invtrigl_R|p1evll|polevll|pleval|"
                        r"ldexp_cexpf?)$")


def library_math(linked: bytes, objects: list[Path]) -> frozenset[str]:
    """The functions of the linked module that are libm's or the compiler's helpers and none of the kernels' own
    objects defines: the counting pass leaves them uncounted, as the native replay does (glibc's libm and libgcc
    are not instrumented there; memcpy/memset/memmove are the module's own and counted on both)."""
    from bang_emu import device_module

    listing = _run(["llvm-nm-19", "--defined-only", "-j", *map(str, objects)], "reading the kernels' symbols")
    own = {line.strip() for line in listing.splitlines() if line.strip() and not line.endswith(":")}
    names = wb.function_names(wb.Module.parse(linked)).values()
    return frozenset(n for n in names if n not in own and (
        device_module.pure_libm_name(n) or device_module.libm_helper(n) or device_module.libgcc_helper(n)
        or _MUSL_MATH.match(n)))


def _probe_module(out: Path) -> None:
    declared = imports.declared_imports(HEADER, generated_header())
    refs = "\n".join(f"  out[{i}] = (void *)&{c};" for i, c in enumerate(declared.values()))
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "probe.cpp"
        src.write_text(f'#include <bang.h>\nextern "C" __attribute__((export_name("probe"))) void probe(void **out) '
                       f"{{\n{refs}\n}}\n")
        _run(["clang-19", *_compile_flags([DEFAULT_ARCH]), "-c", str(src), "-o", f"{d}/probe.o"],
             "compiling the import probe")
        link([Path(d) / "probe.o"], out)


def allowed_imports() -> dict[str, wb.FuncType]:
    """The bang.* imports the header declares, with their signatures (a probe module built once per header)."""
    h = hashlib.sha256(HEADER.read_bytes() + (INCLUDE_DIR / "cnrt.h").read_bytes() + generated_header().read_bytes())
    h.update(" ".join(CXXFLAGS + LDFLAGS).encode())
    probe = _cached("probe.wasm", h.hexdigest()[:16], _probe_module)
    sigs = imports.signatures(probe.read_bytes())
    declared = imports.declared_imports(HEADER, generated_header())
    if set(sigs) != set(declared):
        raise WasmBuildError(f"internal: the import probe has {sorted(sigs)}, bang.h declares {sorted(declared)}")
    return sigs


def check_layout(module: bytes) -> int:
    """The end of the module's static data (core 0's stack, then data and zero-initialised data: wasm-ld's
    `__heap_base`), which must lie below the launch arguments' area and the on-chip arenas (WasmBuildError
    otherwise)."""
    mod = wb.Module.parse(module)
    n_imported = sum(1 for i in mod.imports() if i.kind == wb.KIND_GLOBAL)
    heap_base = next((e.index for e in mod.exports() if e.name == "__heap_base" and e.kind == wb.KIND_GLOBAL), None)
    init = wb.Reader(mod.globals()[heap_base - n_imported][2]) if heap_base is not None else None
    if init is None or init.byte() != wb.I32_CONST:
        raise WasmBuildError("internal: the device module does not export __heap_base as a constant")
    end = init.s()
    ends = [start + size for start, size in mod.data_segments() if start is not None]
    if end < max(ends, default=0) or any(start is None for start, _ in mod.data_segments()):
        raise WasmBuildError("internal: the device module's data segments are not below __heap_base")
    if end > layout.ARGS_BASE:
        raise WasmBuildError(f"the device module's static data ({end} bytes with the stack) does not fit below the "
                             f"on-chip arenas (the launch arguments' area at {layout.ARGS_BASE} bytes)")
    return end


def build(sources: list[Path], includes: list[Path] | None = None, archs: list[str] | None = None) -> BuildResult:
    """Compile, link, check, export the launch sites of and count a submission's device code (WasmBuildError,
    imports.ImportRefused, sites.SiteError, counting.CountPassError)."""
    absent = missing()
    if absent:
        raise WasmBuildError("the wasm toolchain is not installed: " + ", ".join(absent))
    seconds: dict[str, float] = {}
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bang-wasm-") as d:
        work = Path(d)
        objects, own_files = [], set()
        for k, src in enumerate(sources):
            obj = work / f"{k}-{src.stem}.o"
            own_files |= compile_unit(Path(src), obj, [*(includes or []), Path(src).parent], archs or [DEFAULT_ARCH],
                                      work)
            objects.append(obj)
        t1 = time.monotonic()
        out = work / "device.wasm"
        link(objects, out, keep_debug=True)
        linked = lines.strip_debug(out.read_bytes())
        library = library_math(linked, objects)
        t2 = time.monotonic()
        code_lines = lines.symbolize(out, counting.marked_instructions(wb.Module.parse(linked)), own_files)
    t3 = time.monotonic()
    used = imports.check_imports(linked, allowed_imports())
    check_layout(linked)
    linked, site_exports = sites.export_sites(linked)
    counted = counting.count_pass(linked, library, code_lines.marks)
    wasm = lines.with_table(counted.wasm, code_lines)
    t4 = time.monotonic()
    seconds.update(compile=t1 - t0, link=t2 - t1, lines=t3 - t2, check_and_count=t4 - t3)
    module = wb.Module.parse(linked)
    kernels = sorted(e.name for e in module.exports() if e.kind == wb.KIND_FUNC and e.name not in site_exports)
    return BuildResult(wasm, linked, kernels, site_exports, used, counted.loads, counted.stores, seconds,
                       code_lines)

