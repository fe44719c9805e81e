"""What every toolchain shares: the Toolchain interface (how .mlu files become objects, what the C++ side
compiles and links against), running a compiler step, and the precompiled torch headers. Each backend's own
toolchain is in bang_harness/backends/<name>.py; the rest of a build (C++ compile, link, logs, build.json) is
build.py's.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import importlib.util
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass
class StepOutcome:
    """One compiler or linker invocation: the command as run, its exit status, its combined output and (set by
    run_step and build.py, for the log) its wall seconds."""

    command: list[str]
    returncode: int
    output: str
    seconds: float | None = None


class ToolMissing(RuntimeError):
    """A compiler or linker could not be started: the sandbox's fault, never the submission's."""


# Set by the host for the build phase (here, not in protocol.py: the image's PCH layer copies this file alone).
COMPILER_CPU_ENV = "BANG_GRADER_COMPILER_CPU_SECONDS"
CPU_LIMIT_SIGN = "CPU time limit exceeded"  # what a compiler driver says when RLIMIT_CPU stopped its compiler


def _limit_cpu() -> None:
    # Each compiler process gets the host's CPU seconds (COMPILER_CPU_ENV) of its own: CPU time, unlike wall
    # time, does not grow with the host's load. SIGXCPU at the soft limit lets the driver say why it stopped.
    seconds = max(1, int(float(os.environ[COMPILER_CPU_ENV])))
    resource.setrlimit(resource.RLIMIT_CPU, (seconds, seconds + 5))


# A compiler that waits instead of computing (`#include "/proc/self/fd/1"` reads its own output pipe) uses no CPU,
# so RLIMIT_CPU never fires: a step whose processes neither ran nor waited to run for STALL_CPU_SHARE of a window
# of STALL_SECONDS (or of the CPU limit, when shorter) is stopped. Waiting to run counts: a loaded host, or a
# grading under `nice`, can starve a compile to well under 5 % of a CPU (issue 27's seed sweep, load 13 at nice
# 10: every honest binding stopped), and a compile that wants the CPU is not waiting on a pipe.
STALL_SECONDS = 60.0
STALL_CPU_SHARE = 0.05
STALL_POLL_SECONDS = 2.0
STALL_SIGN = "made no progress"  # what run_step adds to a stopped step's output (the host reads it: timeout)


def process_stats() -> Iterator[tuple[int, list[bytes]]]:
    """(pid, fields after "pid (comm) ": state, ppid, pgrp, ...) of every process this /proc shows."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                data = fh.read()
        except OSError:
            continue
        yield int(entry), data[data.rfind(b")") + 2:].split()  # the name in parentheses may hold spaces


def _run_queue_seconds(pid: int) -> float:
    """Seconds process `pid` has spent runnable but not running (/proc/<pid>/schedstat: run, wait, slices)."""
    try:
        with open(f"/proc/{pid}/schedstat", "rb") as fh:
            return int(fh.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


def _group_progress(pgid: int) -> tuple[float, bool]:
    """CPU seconds of the live processes of group `pgid` with their reaped children's, plus the seconds the live
    ones spent waiting for a CPU; and whether one of them is runnable now (state R). The kernel adds a wait to
    schedstat only when the waiter gets the CPU, so a process starved for a whole window (SCHED_IDLE or `nice`
    beside busy ones) shows no wait yet; its state does: a compile reading a pipe sleeps (S), one that wants the
    CPU is R."""
    group = [(pid, fields) for pid, fields in process_stats() if len(fields) > 14 and int(fields[2]) == pgid]
    ticks = sum(sum(int(f) for f in fields[11:15]) for _pid, fields in group)  # utime, stime, cutime, cstime
    runnable = any(fields[0] == b"R" for _pid, fields in group)
    return ticks / os.sysconf("SC_CLK_TCK") + sum(_run_queue_seconds(pid) for pid, _fields in group), runnable


def _communicate_unless_stalled(proc: subprocess.Popen, window: float) -> tuple[bytes, bool]:
    """The step's output, and whether it was stopped for making no progress (its process group killed)."""
    mark_time, mark_cpu = time.monotonic(), 0.0
    while True:
        try:
            return proc.communicate(timeout=STALL_POLL_SECONDS)[0], False
        except subprocess.TimeoutExpired:
            now = time.monotonic()
            if now - mark_time < window:
                continue
            cpu, runnable = _group_progress(proc.pid)
            if runnable or abs(cpu - mark_cpu) >= STALL_CPU_SHARE * (now - mark_time):
                mark_time, mark_cpu = now, cpu
                continue
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            return proc.communicate()[0], True


def run_step(command: list[str]) -> StepOutcome:
    cpu_limit = float(os.environ.get(COMPILER_CPU_ENV) or 0)
    started = time.monotonic()
    try:
        proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                preexec_fn=_limit_cpu if cpu_limit else None, start_new_session=bool(cpu_limit))
    except OSError as exc:
        raise ToolMissing(f"cannot run {command[0]}: {exc}") from exc
    if cpu_limit:
        window = min(STALL_SECONDS, max(cpu_limit, STALL_POLL_SECONDS))
        raw, stalled = _communicate_unless_stalled(proc, window)
    else:
        raw, stalled = proc.communicate()[0], False
    output = raw.decode("utf-8", "replace")
    if proc.returncode == -signal.SIGXCPU:  # clang compiles in the driver's own process: nobody is left to say it
        output += f"\n{command[0]}: {CPU_LIMIT_SIGN}\n"
    if stalled:
        output += (f"\n{command[0]}: {STALL_SIGN} for {window:.0f} s (it was waiting, not compiling: an #include of "
                   f"a pipe, a device or /proc/self/fd?) and was stopped\n")
    return StepOutcome(command, proc.returncode, output, time.monotonic() - started)


def first_line(command: list[str]) -> str:
    try:
        outcome = run_step(command)
    except ToolMissing:
        return "unknown"
    lines = outcome.output.strip().splitlines()
    return lines[0] if outcome.returncode == 0 and lines else "unknown"


@functools.cache  # asked by each PCH key and by describe(), several times a build
def gxx_version() -> str:
    return first_line(["g++", "-dumpfullversion"])


class Toolchain(ABC):
    name: str

    @abstractmethod
    def compile_mlu(self, source: Path, obj: Path, include_dirs: list[Path]) -> StepOutcome:
        """Compile one .mlu file into a position-independent object."""

    @abstractmethod
    def cpp_include_dirs(self) -> list[Path]:
        """Headers the bindings may include beyond torch's: CNRT, torch_mlu (real or emulated)."""

    @abstractmethod
    def link_args(self) -> list[str]:
        """Libraries the extension links against beyond torch's."""

    @abstractmethod
    def describe(self) -> str:
        """Toolchain name and version for build.json and the report."""

    def precompiled_headers(self) -> list[tuple[BindingCompiler, Path]]:
        """The binding compilers that have precompiled torch headers here, with their folders, in the order a
        build tries them (none: bindings are compiled by g++ as written)."""
        return []


# --- precompiled torch headers ----------------------------------------------------------------------------
#
# Parsing `#include <torch/extension.h>` is two thirds of a binding's g++ time (the lab's sigmoid binding,
# image, then -O1: 28 CPU-s without a PCH, 9.5 with). The header is compiled once per binding compiler into
# `<root>/<key>/torch/extension.h.gch` (or `.pch`; at image build time: sandbox/images/emu/Dockerfile; on the
# host for the process runner), and that folder is put on the C++ include path ahead of torch's own. A PCH is
# used only where its header is the first thing a .cpp includes, and lab bindings include their own headers
# first, so build.py passes the header with `-include` (CMake's precompile_headers does the same); a binding
# that does not compile that way is compiled as written. Where g++ cannot use its .gch (other flags, a macro
# defined before it) it reads the header itself -- silently, same result: nothing but speed changes. What a
# g++ PCH cannot hold is the rest: templates g++ instantiates at the end of every translation unit (~8.5 CPU-s
# for a .cpp that only includes the header), which clang can instantiate once, into its PCH (see CLANG). The
# PCH is built without -DTORCH_EXTENSION_NAME (it differs per submission and g++ rejects a PCH made under
# another definition; no torch header mentions it); every other flag is the build's own.

PCH_HEADERS = ("torch/extension.h",)
# Beside each PCH, a header of the same name that defers to the real one: `-include <folder>/<header>` loads
# the PCH, and a later `#include <header>` (the binding's own, once the PCH came first) finds this file, not a
# PCH the compiler may not load twice, and is skipped by the real header's #pragma once.
PCH_STUB = "#pragma once\n#include_next <{header}>\n"

# build.py's binding flags that change code generation, one definition for both (a PCH's must match).
# -O0: a binding is glue (checks, a launch), and its results do not depend on the level; what a binding costs is
# the code of the torch inline functions it uses (the example's: 3,208 functions), which every level past -O0
# optimises again in every build. The sigmoid lab binding compiled in 14.7 CPU-s by g++ at -O1 against 20.5 at -O2;
# the example's by clang, image (issue 41): 3.46 CPU-s at -O1, 1.62 at -O0, each with its own PCH.
PCH_CODEGEN_FLAGS = ("-O0", "-fPIC")
PCH_STAMP = "pch.json"


@dataclass(frozen=True)
class BindingCompiler:
    """A C++ compiler a binding is compiled with, and how its precompiled torch headers are made: `flags` go to
    the binding compile and the PCH alike, `pch_flags` to the PCH only."""

    command: str
    flags: tuple[str, ...]
    pch_flags: tuple[str, ...]
    pch_suffix: str
    error_limit: str  # a template error cascade stops after 20 errors


# The compiler of record: what torch's cpp_extension uses on the lab's machines, and the one whose outcome a
# binding keeps whenever the fast path below does not compile it.
GXX = BindingCompiler("g++", (), ("-Wno-pragma-once-outside-header",), ".gch", "-fmax-errors=20")
# The fast path (sigmoid lab bindings, image: 2-4 CPU-s against g++'s 7.7-8.9, each with its PCH): clang
# instantiates the header's templates once, into the PCH (-fpch-instantiate-templates, which g++ has no
# equivalent of), and TORCH_INDUCTOR_CPP_WRAPPER is torch's own switch that makes torch/extension.h leave out
# the C++ frontend (torch/all.h: nn, optim, data ...), which a binding that uses it then fails without and is
# compiled by g++ instead. Optional: a machine without clang++-19 has no such PCH, and builds use g++.
# -fno-crash-diagnostics: a crash (or the CPU limit's SIGXCPU) would otherwise leave the preprocessed source,
# megabytes, in the sandbox's temporary folder.
CLANG = BindingCompiler("clang++-19", ("-DTORCH_INDUCTOR_CPP_WRAPPER", "-fno-crash-diagnostics"),
                        ("-fpch-instantiate-templates", "-Wno-pragma-once-outside-header"), ".pch",
                        "-ferror-limit=20")
BINDING_COMPILERS = (CLANG, GXX)  # in the order a build tries them
GXX_ONLY_ENV = "BANG_GRADER_GXX_BINDINGS"  # set: bindings compiled by g++ alone (benchmarks, or by choice)


@dataclass(frozen=True)
class TorchBuild:
    """What a binding compiles and links against: the installed torch's version, include folders, macros (less
    TORCH_EXTENSION_NAME), C++ standard and library folders. One definition, used by build.py's binding compile
    and link and by the precompiled header, which the image builds from this file alone (a layer the harness's
    other sources do not invalidate)."""

    version: str
    includes: tuple[str, ...]
    defines: tuple[str, ...]
    std: str
    library_dirs: tuple[str, ...]


# Beside the precompiled headers, each root keeps the installed torch's TorchBuild, named by what identifies
# that installation without importing it: `import torch` costs 2-2.7 CPU-s, and a build phase needed it for
# nothing else (measured in the image, before the compilers start).
TORCH_BUILD_RECORD = "torch-build-{key}.json"


def _installed_torch_key() -> str:
    import importlib.metadata

    spec = importlib.util.find_spec("torch")  # finds the package without running its __init__
    if spec is None:
        raise ImportError("torch is not installed")
    parts = [importlib.metadata.version("torch"), str(spec.origin), sysconfig.get_paths()["include"], sys.version,
             "1"]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def _torch_build_from_import() -> TorchBuild:
    import torch
    from torch.utils import cpp_extension

    includes = [*cpp_extension.include_paths(), sysconfig.get_paths()["include"]]
    defines = ["-DTORCH_API_INCLUDE_EXTENSION_H", f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}"]
    for attr, macro in (("_PYBIND11_COMPILER_TYPE", "PYBIND11_COMPILER_TYPE"),
                        ("_PYBIND11_STDLIB", "PYBIND11_STDLIB"),
                        ("_PYBIND11_BUILD_ABI", "PYBIND11_BUILD_ABI")):
        value = getattr(torch._C, attr, None)
        if value:
            defines.append(f'-D{macro}="{value}"')
    major, minor = (int(part) for part in torch.__version__.split(".")[:2])
    return TorchBuild(torch.__version__, tuple(str(p) for p in includes), tuple(defines),
                      "-std=c++20" if (major, minor) >= (2, 10) else "-std=c++17",
                      tuple(str(p) for p in cpp_extension.library_paths()))


@functools.cache
def torch_build() -> TorchBuild:
    """The installed torch's TorchBuild: from a root's record when one matches this installation, else from torch
    itself (which is what the record holds)."""
    key = _installed_torch_key()
    for root in pch_roots():
        try:
            fields = json.loads((root / TORCH_BUILD_RECORD.format(key=key)).read_text(encoding="utf-8"))
            return TorchBuild(**{name: tuple(value) if isinstance(value, list) else value
                                 for name, value in fields.items()})
        except (OSError, ValueError, TypeError):
            continue
    return _torch_build_from_import()


def write_torch_build_record(root: Path) -> Path:
    """Records the installed torch's TorchBuild in root (image build, host set-up: trusted code only)."""
    record = root / TORCH_BUILD_RECORD.format(key=_installed_torch_key())
    root.mkdir(parents=True, exist_ok=True)
    partial = record.with_name(f".{record.name}.{os.getpid()}")
    partial.write_text(json.dumps(asdict(_torch_build_from_import()), indent=1), encoding="utf-8")
    partial.chmod(0o644)
    os.replace(partial, record)
    return record


def pch_compile_flags(compiler: BindingCompiler = GXX) -> list[str]:
    """The C++ flags of build.py's binding compile with compiler, less TORCH_EXTENSION_NAME and the include
    folders."""
    torch = torch_build()
    return [torch.std, *PCH_CODEGEN_FLAGS, *torch.defines, *compiler.flags]


@functools.cache  # ~30 ms for clang (it loads libLLVM), asked by its PCH key twice a build
def compiler_version(compiler: BindingCompiler) -> str:
    return first_line([compiler.command, "--version"])


def pch_key(compiler: BindingCompiler = GXX) -> str:
    """Everything a PCH depends on that its compiler does not check itself: the torch headers (version and
    folder), the compiler, the flags and the headers precompiled."""
    torch = torch_build()
    parts = [torch.version, *torch.includes, gxx_version(), *pch_compile_flags(), *PCH_HEADERS,
             sysconfig.get_paths()["include"], PCH_STUB, "2"]
    if compiler != GXX:  # the g++ key as it always was: the images and host caches made before keep theirs
        # clang refuses a PCH whose headers' times changed (torch reinstalled at the same path, same version):
        # a new key then makes a new PCH, where the old one would only have sent every build to g++.
        stamps = [str(path.stat().st_mtime_ns) for path in _torch_headers(PCH_HEADERS)]
        parts += [compiler.command, compiler_version(compiler), *compiler.flags, *compiler.pch_flags, *stamps]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


IMAGE_PCH_ROOT = Path("/opt/bang-grader/pch")  # sandbox/images/emu/Dockerfile builds it there


def pch_roots() -> list[Path]:
    """Where precompiled headers are looked for: $BANG_GRADER_PCH, else the image's folder and the emulator
    cache every runner provides ($BANG_EMU_CACHE; the host's ~/.cache/bang_emu, bound read-only by bwrap)."""
    if os.environ.get("BANG_GRADER_PCH"):
        return [Path(os.environ["BANG_GRADER_PCH"])]
    roots = [IMAGE_PCH_ROOT]
    if os.environ.get("BANG_EMU_CACHE"):
        roots.append(Path(os.environ["BANG_EMU_CACHE"]) / "pch")
    roots.append(Path.home() / ".cache" / "bang_emu" / "pch")
    return roots


def pch_dir(compiler: BindingCompiler = GXX) -> Path | None:
    """The folder holding complete precompiled headers of compiler for this torch, or None (then builds compile
    the headers themselves, as before). Never raises: a lookup problem only costs speed."""
    if os.environ.get("BANG_GRADER_NO_PCH") or (compiler != GXX and os.environ.get(GXX_ONLY_ENV)):
        return None
    try:
        key = pch_key(compiler)
    except Exception:  # noqa: BLE001 -- torch or the compiler missing: the build reports that itself
        return None
    for root in pch_roots():
        folder = root / key
        if (folder / PCH_STAMP).is_file():
            return folder
    return None


def _torch_headers(headers: tuple[str, ...]) -> list[Path]:
    """Where torch's include folders hold each of headers."""
    found = []
    for header in headers:
        source = next((Path(d) / header for d in torch_build().includes if (Path(d) / header).is_file()), None)
        if source is None:
            raise RuntimeError(f"precompiled headers: {header} not found in torch's include folders")
        found.append(source)
    return found


def build_pch(root: Path, log: Callable[[str], None] = print) -> list[Path]:
    """Precompiles PCH_HEADERS for each binding compiler this machine has into root/<key>/, beside the torch's
    record (idempotent; concurrent builders wait for each other). g++ is required; clang is not."""
    if not (root / TORCH_BUILD_RECORD.format(key=_installed_torch_key())).is_file():
        write_torch_build_record(root)
    return [_build_pch(root, compiler, log) for compiler in BINDING_COMPILERS
            if compiler == GXX or shutil.which(compiler.command)]


def _build_pch(root: Path, compiler: BindingCompiler, log: Callable[[str], None]) -> Path:
    key = pch_key(compiler)
    folder = root / key
    if (folder / PCH_STAMP).is_file():
        return folder
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f".{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (folder / PCH_STAMP).is_file():
            return folder
        flags = pch_compile_flags(compiler)
        includes = [arg for d in torch_build().includes for arg in ("-I", d)]
        work = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=root))
        try:
            for header, source in zip(PCH_HEADERS, _torch_headers(PCH_HEADERS), strict=True):
                out = work / f"{header}{compiler.pch_suffix}"
                out.parent.mkdir(parents=True, exist_ok=True)
                command = [compiler.command, *flags, *compiler.pch_flags, *includes, "-x", "c++-header",
                           str(source), "-o", str(out)]
                log("pch: " + " ".join(command))
                step = run_step(command)
                if step.returncode != 0:
                    raise RuntimeError(f"precompiling {header} failed:\n{step.output[-4000:]}")
                (work / header).write_text(PCH_STUB.format(header=header))
            (work / PCH_STAMP).write_text(json.dumps({"key": key, "headers": list(PCH_HEADERS), "flags": flags,
                                                       "compiler": compiler_version(compiler)}, indent=1))
            for path in [work, *work.rglob("*")]:
                path.chmod(0o755 if path.is_dir() else 0o644)  # the sandbox uid reads what root built
            os.replace(work, folder)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return folder


def get_toolchain(backend: str) -> Toolchain:
    """The toolchain of a backend (its module under bang_harness/backends/)."""
    from .backends import get_harness_backend  # here: the image's PCH layer runs this file on its own

    return get_harness_backend(backend).toolchain()


def optional_module(name: str) -> object | None:
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def text_of(part: bytes | str | None) -> str:
    if part is None:
        return ""
    return part.decode("utf-8", "replace") if isinstance(part, bytes) else part


def main(argv: list[str] | None = None) -> int:
    """`python -m bang_harness.toolchains --build-pch ROOT`: precompile the torch headers (image build, host)."""
    import argparse

    parser = argparse.ArgumentParser(prog="bang_harness.toolchains", description=main.__doc__)
    parser.add_argument("--build-pch", type=Path, metavar="ROOT", required=True)
    args = parser.parse_args(argv)
    for folder in build_pch(args.build_pch):
        print(folder)
    return 0


if __name__ == "__main__":
    sys.exit(main())
