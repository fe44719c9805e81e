"""One strategy per toolchain: how .mlu files become objects and what the C++ side compiles and links against.

Everything else in a build (C++ compile, link, logs, build.json) is shared and lives in build.py.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
from abc import ABC, abstractmethod
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


def run_step(command: list[str]) -> StepOutcome:
    try:
        proc = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False)
    except OSError as exc:
        raise ToolMissing(f"cannot run {command[0]}: {exc}") from exc
    return StepOutcome(command, proc.returncode, proc.stdout.decode("utf-8", "replace"))


def _first_line(command: list[str]) -> str:
    try:
        outcome = run_step(command)
    except ToolMissing:
        return "unknown"
    lines = outcome.output.strip().splitlines()
    return lines[0] if outcome.returncode == 0 and lines else "unknown"


def gxx_version() -> str:
    return _first_line(["g++", "-dumpfullversion"])


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


class EmuToolchain(Toolchain):
    """BANG on the CPU: cncc-emu turns .mlu into ordinary objects; the emulator runtime is linked in."""

    name = "emu"

    def __init__(self) -> None:
        from bang_emu import toolchain  # imported here: the mlu strategy must not need the emulator

        self._toolchain = toolchain
        self._torch_shim = _optional_module("bang_emu.torch_mlu_emu")

    def compile_mlu(self, source: Path, obj: Path, include_dirs: list[Path]) -> StepOutcome:
        flags = ["-c", "-fPIC", "-O2"] + [arg for d in include_dirs for arg in ("-I", str(d))]
        # Returns for anything the source did wrong; raising means the emulator itself failed (internal error).
        proc = self._toolchain.compile_mlu(source, obj, flags)
        output = "".join(_text(part) for part in (proc.stdout, proc.stderr))
        command = [str(a) for a in proc.args] if isinstance(proc.args, list | tuple) else [str(proc.args)]
        return StepOutcome(command, proc.returncode, output)

    def cpp_include_dirs(self) -> list[Path]:
        dirs = [Path(d) for d in self._toolchain.include_dirs()]
        if self._torch_shim is not None:
            dirs += [Path(d) for d in self._torch_shim.include_dirs()]
        return list(dict.fromkeys(dirs))  # both lists name the shared header folders

    def link_args(self) -> list[str]:
        args = [str(a) for a in self._toolchain.runtime_link_args()]
        if self._torch_shim is not None:
            args += [str(a) for a in self._torch_shim.link_args() if str(a) not in args]
        return args

    def describe(self) -> str:
        import bang_emu

        version = getattr(bang_emu, "__version__", "unknown")
        return f"cncc-emu {version} (g++ {gxx_version()})"


class MluToolchain(Toolchain):
    """The real Cambricon toolchain: cncc from Neuware, linked against CNRT and torch_mlu."""

    name = "mlu"
    arch_flag = "--bang-mlu-arch=mtp_372"

    def __init__(self) -> None:
        self.neuware = Path(os.environ.get("NEUWARE_HOME", "/usr/local/neuware"))
        self.cncc = self.neuware / "bin" / "cncc"
        spec = importlib.util.find_spec("torch_mlu")  # locate without importing: no device needed to build
        self.torch_mlu_root = Path(spec.origin).parent if spec and spec.origin else None

    def compile_mlu(self, source: Path, obj: Path, include_dirs: list[Path]) -> StepOutcome:
        includes = [arg for d in [*include_dirs, self.neuware / "include"] for arg in ("-I", str(d))]
        return run_step([str(self.cncc), "-c", "-fPIC", self.arch_flag, "-O3", *includes,
                         str(source), "-o", str(obj)])

    def cpp_include_dirs(self) -> list[Path]:
        dirs = [self.neuware / "include"]
        if self.torch_mlu_root is not None:
            dirs += [self.torch_mlu_root / "csrc", self.torch_mlu_root / "csrc" / "api" / "include" / "torch_mlu"]
        return dirs

    def link_args(self) -> list[str]:
        lib_dirs = [self.neuware / "lib64"]
        if self.torch_mlu_root is not None:
            lib_dirs.append(self.torch_mlu_root / "csrc" / "lib")
        args = [arg for d in lib_dirs for arg in (f"-L{d}", f"-Wl,-rpath,{d}")]
        return args + ["-lcnrt", "-lcndrv", "-ltorch_mlu"]

    def describe(self) -> str:
        if not self.cncc.exists():
            return f"cncc (not found at {self.cncc})"
        return _first_line([str(self.cncc), "--version"])


TOOLCHAINS: dict[str, type[Toolchain]] = {"emu": EmuToolchain, "mlu": MluToolchain}


def get_toolchain(name: str) -> Toolchain:
    try:
        return TOOLCHAINS[name]()
    except KeyError:
        raise ValueError(f"unknown backend {name!r}; expected one of {sorted(TOOLCHAINS)}") from None


def _optional_module(name: str) -> object | None:
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def _text(part: bytes | str | None) -> str:
    if part is None:
        return ""
    return part.decode("utf-8", "replace") if isinstance(part, bytes) else part
