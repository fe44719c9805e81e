"""cncc-emu: a cncc-compatible compiler driver that builds BANG C for the CPU emulator.

    cncc-emu --bang-arch=compute_30 -O3 file.mlu -o exe
    cncc-emu -c -fPIC --bang-mlu-arch=mtp_372 kernel.mlu -o kernel.o
    cncc-emu -c -fPIC --emu-device-module-also=device.o kernel.mlu -o kernel.o   (the replay's object too)
    cncc-emu --prebuild-runtime [DIR]

Each .mlu file is preprocessed by g++ with bang.h force-included (which, as cncc's forced runtime wrapper does,
brings <math.h>, <stdlib.h> and <stdio.h>), rewritten (launch syntax, on-chip declarations, host/device split;
see rewrite.py), and compiled with kernel-address instrumentation so that the runtime sees every scalar
load/store of device code. Host functions of the student's files (main, CPU reference loops) carry an attribute
that turns the instrumentation off and the vectoriser back on: they run at native speed. On-chip arrays are
measured in the object file and refused when they exceed the architecture's NRAM/WRAM/SRAM, as cncc does.
Non-template kernels at global scope also get their unmangled name (old cncc objects had it), so MLU270-era host
files that declare them `extern "C"` link and can pass them to cnrtInvokeKernel_V2/_V3.
"""

from __future__ import annotations

import functools
import re
import struct
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from bang_emu import devices, spaces, toolchain
from bang_emu import rewrite as rw

# capacities in KiB per --bang-mlu-arch: the device table's architectures (devices.json)
_N, _W, _S = spaces.NRAM, spaces.WRAM, spaces.SRAM
ARCH_CAPACITY_KB = {name: {_N: a["nram_bytes"] // 1024, _W: a["wram_bytes"] // 1024, _S: a["sram_bytes"] // 1024}
                    for name, a in devices.architectures().items()}
ARCH_NUMBER = {name: a["arch"] for name, a in devices.architectures().items()}
VIRTUAL_ARCH = {"compute_20": "mtp_270", "compute_30": "mtp_372", "compute_50": "mtp_592"}
# board names the MLU100/270-era cncc took for --bang-mlu-arch (e.g. `--bang-mlu-arch=MLU200` in the 2019 labs)
BOARD_ARCH = {"MLU100": "mtp_270", "MLU200": "mtp_270", "MLU220": "mtp_270", "MLU270": "mtp_270",
              "MLU290": "mtp_290", "MLU370": "mtp_372", "MLU590": "mtp_592"}
DEVICE_INSTRUMENTATION = [
    "-fsanitize=kernel-address",
    "--param", "asan-instrumentation-with-call-threshold=0",
    "--param", "asan-globals=0",
    "--param", "asan-stack=0",
    # one MLU scalar access = one callback, whatever the host vectoriser would do
    "-fno-tree-vectorize",
    # keep the kernel's own frame on every builtin call, so errors can name the student's source line
    "-fno-optimize-sibling-calls",
]
# The device module (trusted replay): no jump tables, so that an indirect branch in its code is always a
# function pointer, which toolchain.check_device_module refuses.
DEVICE_MODULE_FLAGS = ["-fno-jump-tables", "-fPIC"]
# Issue 37, after the user's flags so none can undo them: a frame larger than a page is probed page by page (a
# huge local array faults on the guard page instead of jumping the stack pointer onto another thread's memory),
# frames with arrays carry a canary, and a variable-length array is an error (like alloca, it moves the stack
# pointer by an amount the kernel chooses).
DEVICE_MODULE_HARDENING = ["-fstack-clash-protection", "-fstack-protector-strong", "-Werror=vla"]
# cncc flags that take a separate argument and mean nothing here
IGNORED_WITH_ARG = {"-mllvm", "-Xbang-cnas", "-Xclang", "--neuware-path", "-Xlinker-ignored"}
PASS_PREFIXES = ("-W", "-f", "-m64", "-pthread", "-w", "-shared", "-rdynamic", "-static-libstdc++")
SOURCE_SUFFIXES = {".mlu"}
HOST_SUFFIXES = {".cpp", ".cc", ".cxx", ".c", ".C"}


class DriverError(Exception):
    pass


@dataclass
class Options:
    inputs: list[str] = field(default_factory=list)
    output: str | None = None
    compile_only: bool = False
    preprocess_only: bool = False
    defines: list[str] = field(default_factory=list)
    includes: list[str] = field(default_factory=list)
    forced_includes: list[str] = field(default_factory=list)
    link_args: list[str] = field(default_factory=list)
    passthrough: list[str] = field(default_factory=list)
    opt: str = "-O2"
    debug: bool = False
    std: str | None = None
    archs: list[str] = field(default_factory=list)
    emu_device: str | None = None
    notes: list[str] = field(default_factory=list)
    verbose: bool = False
    device_module: bool = False  # --emu-device-module: every .mlu compiled for the replay's device module
    # --emu-device-module-also=OBJ: with -c, the .mlu compiled for the device module too, into OBJ, from the same
    # preprocessed text (one driver and one `g++ -E` for both objects of a build: bang_harness/build.py)
    device_module_also: str | None = None


def note(msg: str) -> None:
    print(f"cncc-emu: note: {msg}", file=sys.stderr)


def parse_args(argv: list[str]) -> Options:
    o = Options()
    i = 0

    def value(flag: str) -> str:
        nonlocal i
        if i + 1 >= len(argv):
            raise DriverError(f"missing argument after {flag}")
        i += 1
        return argv[i]

    while i < len(argv):
        a = argv[i]
        if a == "-o":
            o.output = value(a)
        elif a.startswith("-o") and len(a) > 2:
            o.output = a[2:]
        elif a == "-c":
            o.compile_only = True
        elif a == "-E":
            o.preprocess_only = True
        elif a in ("-I", "-isystem"):
            o.includes.append(value(a))
        elif a == "-include":
            o.forced_includes.append(value(a))
        elif a.startswith("-I"):
            o.includes.append(a[2:])
        elif a in ("-D", "-U"):
            o.defines.append(a + value(a))
        elif a.startswith(("-D", "-U")):
            o.defines.append(a)
        elif a in ("-L", "-l"):
            v = value(a)
            if a == "-l" and v in ("cnrt", "cndrv", "cndev", "cnrtc", "cnnl", "cnpapi"):
                o.notes.append(f"-l{v} is provided by the emulator runtime")
            else:
                o.link_args.append(a + v)
        elif a.startswith("-l"):
            if a[2:] in ("cnrt", "cndrv", "cndev", "cnrtc", "cnnl", "cnpapi"):
                o.notes.append(f"{a} is provided by the emulator runtime")
            else:
                o.link_args.append(a)
        elif a.startswith("-L") or a.startswith("-Wl,"):
            o.link_args.append(a)
        elif re.fullmatch(r"-O[0-3sgz]?", a):
            o.opt = a if a != "-O" else "-O1"
        elif a.startswith("-g"):
            o.debug = True
        elif a.startswith("-std="):
            o.std = a[5:]
        elif a.startswith("--bang-mlu-arch="):
            v = a.split("=", 1)[1]
            o.archs.append(BOARD_ARCH.get(v.upper(), v))
        elif a.startswith("--bang-arch="):
            v = a.split("=", 1)[1]
            if v not in VIRTUAL_ARCH:
                raise DriverError(f"unknown --bang-arch {v} (known: {', '.join(VIRTUAL_ARCH)})")
            o.archs.append(VIRTUAL_ARCH[v])
        elif a.startswith("--emu-device="):
            o.emu_device = a.split("=", 1)[1]
        elif a == "--emu-device":
            o.emu_device = value(a)
        elif a == "--emu-device-module":
            o.device_module = True
        elif a.startswith("--emu-device-module-also="):
            o.device_module_also = a.split("=", 1)[1]
        elif a in ("-v", "--verbose"):
            o.verbose = True
        elif a == "-x":
            lang = value(a)
            if lang not in ("mlu", "bang"):
                o.notes.append(f"ignoring -x {lang}")
        elif a in IGNORED_WITH_ARG:
            skipped = value(a)
            o.notes.append(f"ignoring cncc flag {a} {skipped}")
        elif a.startswith("--bang") or a.startswith("--neuware") or a.startswith("--no-neuware") or a.startswith("--target="):
            o.notes.append(f"ignoring cncc flag {a}")
        elif a.startswith(PASS_PREFIXES) or a == "-fPIC":
            o.passthrough.append(a)
        elif a.startswith("-"):
            o.notes.append(f"ignoring unknown flag {a}")
        else:
            o.inputs.append(a)
        i += 1
    if not o.archs:
        o.archs = ["mtp_372"]
    for arch in o.archs:
        if arch not in ARCH_CAPACITY_KB:
            raise DriverError(f"unknown --bang-mlu-arch {arch} (known: {', '.join(ARCH_CAPACITY_KB)})")
    return o


def _std_flag(std: str | None) -> str:
    # the emulation headers need C++17; older dialects are raised (C++11/14 code compiles unchanged)
    if std and re.fullmatch(r"(c|gnu)\+\+(17|1z|20|2a|23|2b)", std):
        return f"-std={std}"
    if std and std not in ("c++11", "c++14", "gnu++11", "gnu++14", "c++0x", "gnu++0x", "c++1y", "gnu++1y"):
        note(f"-std={std} replaced by -std=gnu++17")
    return "-std=gnu++17"


def _arch_macros(archs: list[str]) -> list[str]:
    arch = min(archs, key=lambda a: ARCH_CAPACITY_KB[a][_N])
    cap = ARCH_CAPACITY_KB[arch]
    return [
        f"-D__BANG_ARCH__={ARCH_NUMBER[arch]}",
        f"-D__MLU_NRAM_SIZE__={cap[_N]}",
        f"-D__MLU_WRAM_SIZE__={cap[_W]}",
        f"-D__MLU_SRAM_SIZE__={cap[_S]}",
        "-D__MLISA__=1",
    ]


class Said:
    """Where a compile's words go: straight to stdout / stderr, or (kept=True) kept in order for later (say()),
    for a compile running beside another one."""

    def __init__(self, kept: bool = False) -> None:
        self._kept: list[tuple[bool, str]] | None = [] if kept else None

    def out(self, text: str) -> None:
        self._write(False, text)

    def err(self, text: str) -> None:
        self._write(True, text)

    def _write(self, error: bool, text: str) -> None:
        if self._kept is not None:
            self._kept.append((error, text))
        else:
            (sys.stderr if error else sys.stdout).write(text)

    def say(self) -> None:
        for error, text in self._kept or []:
            (sys.stderr if error else sys.stdout).write(text)


def _run(cmd: list[str], verbose: bool, said: Said | None = None) -> subprocess.CompletedProcess:
    if verbose:
        (said or Said()).err("cncc-emu: " + " ".join(cmd) + "\n")
    return subprocess.run(cmd, capture_output=True, text=True)


def _forward(proc: subprocess.CompletedProcess, said: Said | None = None) -> None:
    said = said or Said()
    if proc.stdout:
        said.out(proc.stdout)
    if proc.stderr:
        said.err(proc.stderr)


def read_onchip_records(obj: Path) -> list[tuple[int, int]]:
    """(declaration index, bytes) records of the object's .bang_emu_onchip section."""
    with tempfile.TemporaryDirectory() as td:
        raw = Path(td) / "sec.bin"
        proc = subprocess.run(
            ["objcopy", "-O", "binary", f"--only-section={rw.ONCHIP_SECTION}", str(obj), str(raw)],
            capture_output=True, text=True,
        )
        if proc.returncode != 0 or not raw.exists():
            return []
        data = raw.read_bytes()
    records = [struct.unpack_from("<QQ", data, off) for off in range(0, len(data) - 15, 16)]
    # a declaration inside an inline function repeats its record in every inlined copy: count each size once
    return list(dict.fromkeys(records))


def check_capacity(obj: Path, decls: list[rw.OnchipDecl], archs: list[str]) -> list[str]:
    """Error lines for every on-chip space whose arrays exceed the smallest target architecture."""
    by_index = {d.index: d for d in decls}
    totals: dict[int, int] = {}
    members: dict[int, list[tuple[rw.OnchipDecl, int]]] = {}
    for idx, size in read_onchip_records(obj):
        d = by_index.get(idx)
        if d is None:
            continue
        totals[d.space] = totals.get(d.space, 0) + size
        members.setdefault(d.space, []).append((d, size))
    errors = []
    for arch in archs:
        for space, total in sorted(totals.items()):
            cap = ARCH_CAPACITY_KB[arch][space] * 1024
            if total > cap:
                arrays = sorted(members[space], key=lambda m: -m[1])
                first = arrays[0][0]
                listing = ", ".join(f"'{d.name}' {size / 1024:.1f} KB ({Path(d.file).name}:{d.line})" for d, size in arrays)
                errors.append(
                    f"{first.file}:{first.line}: error: bang-emu: onchip-overflow: {spaces.name(space)} arrays "
                    f"need {total / 1024:.1f} KB but {arch} has {cap // 1024} KB per "
                    f"{'cluster' if space == spaces.SRAM else 'core'}: {listing}; make the arrays smaller "
                    f"(tile the computation) or move data to GDRAM"
                )
        if errors:
            break
    return errors


@functools.cache
def _user_file(path: str) -> bool:
    """A file of the student's (host functions defined there run uninstrumented), not an emulator header."""
    if path.startswith("<"):
        return False
    try:
        resolved = Path(path).resolve()
    except OSError:
        return True
    return not any(resolved.is_relative_to(d.resolve()) for d in toolchain.include_dirs())


def _add_c_aliases(obj: Path, kernels: list[str], verbose: bool, said: Said | None = None) -> None:
    """Give each non-template kernel at global scope its unmangled name too, as old cncc objects had: MLU270-era
    host files declare the kernel `extern "C"` and pass its address to cnrtInvokeKernel_V2/_V3."""
    if not kernels:
        return
    proc = subprocess.run(["objdump", "-t", str(obj)], capture_output=True, text=True)
    if proc.returncode != 0:
        return
    defined: dict[str, tuple[str, str]] = {}
    names: set[str] = set()
    for line in proc.stdout.splitlines():
        m = re.match(r"^([0-9a-f]+)\s+(\S.{6})\s+(\S+)\s+[0-9a-f]+\s+(\S+)$", line)
        if not m:
            continue
        names.add(m.group(4))
        if "F" in m.group(2) and m.group(3) != "*UND*":
            defined[m.group(4)] = (m.group(3), m.group(1))
    args = []
    for k in kernels:
        if k in names:
            continue  # already C linkage (declared extern "C")
        prefix = f"_Z{len(k)}{k}"
        hits = [s for s in defined if s.startswith(prefix) and not s[len(prefix):len(prefix) + 1].isdigit()]
        if len(hits) != 1:
            continue
        section, value = defined[hits[0]]
        args += ["--add-symbol", f"{k}={section}:0x{value},global,function"]
    if args:
        _run(["objcopy", *args, str(obj)], verbose, said)


def compile_mlu_unit(src: Path, obj: Path, o: Options, workdir: Path) -> int:
    inc = [f"-I{d}" for d in toolchain.include_dirs()] + [f"-I{d}" for d in o.includes]
    std = _std_flag(o.std)
    pre = workdir / (src.stem + ".mlu.ii")
    cmd = ["g++", "-E", std, "-x", "c++", "-DBANG_EMU_REWRITE", *_arch_macros(o.archs), *o.defines, *inc,
           "-include", str(toolchain.INCLUDE_DIR / "bang.h"), *[f"-include{f}" for f in o.forced_includes], str(src),
           "-o", str(pre)]
    proc = _run(cmd, o.verbose)
    if proc.returncode != 0:
        _forward(proc)
        return proc.returncode or 1
    preprocessed = pre.read_text(errors="replace")
    if not o.device_module_also or o.device_module or o.preprocess_only:
        return _rewrite_and_compile(src, preprocessed, obj, o, std, workdir, o.device_module)
    # The run's object and the device module's, from the same text, compiled side by side (a changed kernel's
    # build waited for one after the other). What each says is said in that order, the device module's only when
    # the run's object compiled: it is the same source, its errors would be said twice.
    with ThreadPoolExecutor(max_workers=2) as pool:
        both = [(said := Said(kept=True),
                 pool.submit(_rewrite_and_compile, src, preprocessed, target, o, std, workdir, device, said, name))
                for target, device, name in ((obj, False, ".emu.ii"),
                                             (Path(o.device_module_also), True, ".device.emu.ii"))]
        for said, job in both:
            rc = job.result()
            said.say()
            if rc != 0:
                break
    if rc != 0:  # as if the second had never been compiled
        Path(o.device_module_also).unlink(missing_ok=True)
    return rc


def _rewrite_and_compile(src: Path, preprocessed: str, obj: Path, o: Options, std: str, workdir: Path,
                         device_module: bool, said: Said | None = None, name: str = ".emu.ii") -> int:
    """src's preprocessed text rewritten (for the device module or not) and compiled into obj (-E: written out);
    `said`: where its words go (None: straight out), `name`: the rewritten text's file in `workdir`, after src's
    stem."""
    said = said or Said()
    try:
        result = rw.rewrite(preprocessed, default_device=o.emu_device, user_file=_user_file,
                            device_module=device_module)
    except rw.RewriteError as e:
        said.err(f"{src}: error: cncc-emu: {e}\n")
        return 1
    rewritten = workdir / (src.stem + name)
    rewritten.write_text(result.text)
    if o.preprocess_only:
        if o.output:
            Path(o.output).write_text(result.text)
        else:
            sys.stdout.write(result.text)
        return 0
    cmd = ["g++", "-c", std, o.opt, "-g" if o.debug else "-g1", "-fno-omit-frame-pointer",
           *DEVICE_INSTRUMENTATION, *(DEVICE_MODULE_FLAGS if device_module else []), *o.passthrough,
           *(DEVICE_MODULE_HARDENING if device_module else []), str(rewritten), "-o", str(obj)]
    proc = _run(cmd, o.verbose, said)
    _forward(proc, said)
    if proc.returncode != 0:
        return proc.returncode
    _add_c_aliases(obj, result.kernels, o.verbose, said)
    errors = check_capacity(obj, result.onchip, o.archs)
    if errors:
        for e in errors:
            said.err(e + "\n")
        obj.unlink(missing_ok=True)
        return 1
    return 0


def compile_host_unit(src: Path, obj: Path, o: Options) -> int:
    inc = [f"-I{d}" for d in toolchain.include_dirs()] + [f"-I{d}" for d in o.includes]
    cmd = ["g++", "-c", _std_flag(o.std), o.opt, *o.defines, *inc, *[f"-include{f}" for f in o.forced_includes],
           *o.passthrough, str(src), "-o", str(obj)]
    proc = _run(cmd, o.verbose)
    _forward(proc)
    return proc.returncode


def build(o: Options) -> int:
    if not o.inputs:
        raise DriverError("no input files")
    for n in sorted(set(o.notes)):
        note(n)
    sources = [Path(p) for p in o.inputs]
    compiled = [p for p in sources if p.suffix in SOURCE_SUFFIXES | HOST_SUFFIXES]
    if (o.compile_only or o.preprocess_only) and len(compiled) > 1 and o.output:
        raise DriverError("-o with -c/-E needs a single input file")
    if o.device_module_also and not (o.compile_only and [p.suffix for p in compiled] == [".mlu"]):
        raise DriverError("--emu-device-module-also needs -c and a single .mlu input")
    with tempfile.TemporaryDirectory(prefix="cncc-emu-") as td:
        work = Path(td)
        objects: list[str] = []
        for src in sources:
            if src.suffix not in SOURCE_SUFFIXES | HOST_SUFFIXES:
                objects.append(str(src))  # objects and archives go to the linker
                continue
            if not src.exists():
                raise DriverError(f"{src}: no such file")
            if o.compile_only or o.preprocess_only:
                obj = Path(o.output) if o.output else Path(src.stem + ".o")
            else:
                obj = work / (src.stem + f".{len(objects)}.o")
            if src.suffix in SOURCE_SUFFIXES:
                rc = compile_mlu_unit(src, obj, o, work)
            else:
                rc = compile_host_unit(src, obj, o)
            if rc != 0:
                return rc
            objects.append(str(obj))
        if o.compile_only or o.preprocess_only:
            return 0
        out = o.output or "a.out"
        cmd = ["g++", *o.passthrough, *objects, "-o", out, *o.link_args, *toolchain.runtime_link_args()]
        proc = _run(cmd, o.verbose)
        _forward(proc)
        return proc.returncode


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv and argv[0] == "--prebuild-runtime":
            root = Path(argv[1]) if len(argv) > 1 else toolchain.PREBUILT_DIR
            d = toolchain.build_runtime(root)
            print(d)
            return 0
        if argv == ["--print-runtime-dir"]:
            print(toolchain.runtime_dir())
            return 0
        if argv in (["--version"], ["-v"]):
            print("cncc-emu (bang_emu BANG-on-CPU emulator) 0.1; runtime " + toolchain.runtime_hash())
            return 0
        return build(parse_args(argv))
    except (DriverError, RuntimeError) as e:
        print(f"cncc-emu: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
