"""What every toolchain shares: the Toolchain interface (how .mlu files become objects, what the C++ side
compiles and links against), running a compiler step, and the precompiled torch headers. Each backend's own
toolchain is in bang_harness/backends/<name>.py; the rest of a build (C++ compile, link, logs, build.json) is
build.py's.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import json
import os
import resource
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


@dataclass
class StepOutcome:
    """One compiler or linker invocation: the command as run, its exit status and its combined output."""

    command: list[str]
    returncode: int
    output: str


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


def run_step(command: list[str]) -> StepOutcome:
    limit = _limit_cpu if os.environ.get(COMPILER_CPU_ENV) else None
    try:
        proc = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False,
                              preexec_fn=limit)
    except OSError as exc:
        raise ToolMissing(f"cannot run {command[0]}: {exc}") from exc
    return StepOutcome(command, proc.returncode, proc.stdout.decode("utf-8", "replace"))


def first_line(command: list[str]) -> str:
    try:
        outcome = run_step(command)
    except ToolMissing:
        return "unknown"
    lines = outcome.output.strip().splitlines()
    return lines[0] if outcome.returncode == 0 and lines else "unknown"


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


# --- precompiled torch headers ----------------------------------------------------------------------------
#
# Parsing `#include <torch/extension.h>` is two thirds of a binding's g++ time (the lab's sigmoid binding,
# image, -O1: 28 CPU-s without a PCH, 9.5 with). The header is compiled once into
# `<root>/<key>/torch/extension.h.gch` (at image build time: sandbox/images/emu/Dockerfile; on the host for
# the process runner), and that folder is put on the C++ include path ahead of torch's own. g++ uses a .gch
# only where its header is the first thing a .cpp includes, and lab bindings include their own headers
# first, so build.py passes the header with `-include` (CMake's precompile_headers does the same); a binding
# that does not compile that way is compiled as written. Where g++ cannot use the .gch (other flags, a macro
# defined before it) it reads the header itself -- silently, same result: nothing but speed changes. What the
# PCH cannot hold is the rest: templates g++ instantiates at the end of every translation unit (~8.5 CPU-s
# for a .cpp that only includes the header). The PCH is built without -DTORCH_EXTENSION_NAME (it differs
# per submission and g++ rejects a PCH made under another definition; no torch header mentions it); every
# other flag is the build's own.

PCH_HEADERS = ("torch/extension.h",)
# Beside each .gch, a header of the same name that defers to the real one: `-include <folder>/<header>` loads
# the .gch, and a later `#include <header>` (the binding's own, once the PCH came first) finds this file, not a
# .gch g++ may not load twice, and is skipped by the real header's #pragma once.
PCH_STUB = "#pragma once\n#include_next <{header}>\n"

# build.py's binding flags that change code generation, one definition for both (g++ wants a PCH's to match).
# -O1: a binding is glue (checks, a launch), and its results do not depend on the level; the sigmoid lab
# binding compiles in 14.7 CPU-s at -O1 against 20.5 at -O2, each with its own PCH.
PCH_CODEGEN_FLAGS = ("-O1", "-fPIC")
PCH_STAMP = "pch.json"


def _torch_flags() -> tuple[list[Path], list[str], str]:
    """torch's include folders, macros (less TORCH_EXTENSION_NAME) and C++ standard: the one definition, used
    by build.py's binding compile and by the precompiled header, which the image builds from this file alone
    (a layer the harness's other sources do not invalidate)."""
    import torch
    from torch.utils import cpp_extension

    includes = [Path(p) for p in cpp_extension.include_paths()] + [Path(sysconfig.get_paths()["include"])]
    defines = ["-DTORCH_API_INCLUDE_EXTENSION_H", f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}"]
    for attr, macro in (("_PYBIND11_COMPILER_TYPE", "PYBIND11_COMPILER_TYPE"),
                        ("_PYBIND11_STDLIB", "PYBIND11_STDLIB"),
                        ("_PYBIND11_BUILD_ABI", "PYBIND11_BUILD_ABI")):
        value = getattr(torch._C, attr, None)
        if value:
            defines.append(f'-D{macro}="{value}"')
    major, minor = (int(part) for part in torch.__version__.split(".")[:2])
    return includes, defines, "-std=c++20" if (major, minor) >= (2, 10) else "-std=c++17"


def pch_compile_flags() -> list[str]:
    """The C++ flags of build.py's binding compile, less TORCH_EXTENSION_NAME and the include folders."""
    _includes, defines, std = _torch_flags()
    return [std, *PCH_CODEGEN_FLAGS, *defines]


def _torch_include_dirs() -> list[Path]:
    return _torch_flags()[0]


def pch_key() -> str:
    """Everything a .gch depends on that g++ does not check itself: the torch headers (version and folder),
    the compiler, the flags and the headers precompiled."""
    import torch

    parts = [torch.__version__, *[str(d) for d in _torch_include_dirs()], gxx_version(), *pch_compile_flags(),
             *PCH_HEADERS, sysconfig.get_paths()["include"], PCH_STUB, "2"]
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


def pch_dir() -> Path | None:
    """The folder holding complete precompiled headers for this torch and compiler, or None (then every
    build compiles the headers itself, as before). Never raises: a lookup problem only costs speed."""
    if os.environ.get("BANG_GRADER_NO_PCH"):
        return None
    try:
        key = pch_key()
    except Exception:  # noqa: BLE001 -- torch or g++ missing: the build reports that itself
        return None
    for root in pch_roots():
        folder = root / key
        if (folder / PCH_STAMP).is_file():
            return folder
    return None


def forced_pch_includes(include_dirs: list[Path]) -> list[Path]:
    """The stub headers of the precompiled-header folder among include_dirs, to pass with -include (none when
    no folder there is complete)."""
    folder = next((d for d in include_dirs if (d / PCH_STAMP).is_file()), None)
    return [folder / header for header in PCH_HEADERS if folder and (folder / header).is_file()]


def build_pch(root: Path, log: Callable[[str], None] = print) -> Path:
    """Precompiles PCH_HEADERS into root/<key>/ (idempotent; concurrent builders wait for each other)."""
    key = pch_key()
    folder = root / key
    if (folder / PCH_STAMP).is_file():
        return folder
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f".{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (folder / PCH_STAMP).is_file():
            return folder
        flags = pch_compile_flags()
        includes = [arg for d in _torch_include_dirs() for arg in ("-I", str(d))]
        work = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=root))
        try:
            for header in PCH_HEADERS:
                source = next((d / header for d in _torch_include_dirs() if (d / header).is_file()), None)
                if source is None:
                    raise RuntimeError(f"precompiled headers: {header} not found in torch's include folders")
                out = work / f"{header}.gch"
                out.parent.mkdir(parents=True, exist_ok=True)
                command = ["g++", *flags, *includes, "-Wno-pragma-once-outside-header", "-x", "c++-header",
                           str(source), "-o", str(out)]
                log("pch: " + " ".join(command))
                step = run_step(command)
                if step.returncode != 0:
                    raise RuntimeError(f"precompiling {header} failed:\n{step.output[-4000:]}")
                (work / header).write_text(PCH_STUB.format(header=header))
            (work / PCH_STAMP).write_text(json.dumps({"key": key, "headers": list(PCH_HEADERS), "flags": flags,
                                                       "gxx": gxx_version()}, indent=1))
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
    print(build_pch(args.build_pch))
    return 0


if __name__ == "__main__":
    sys.exit(main())
