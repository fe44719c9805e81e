"""The real-MLU backend inside the sandbox: Cambricon's cncc, CNRT and torch_mlu on the card passed in; device
time from the harness's CNRT notifiers (and CNPAPI's kernel records where installed)."""

from __future__ import annotations

import ctypes
import importlib.util
import os
from pathlib import Path
from typing import Any

from ..job import CallResult
from ..protocol import ErrorKind
from ..toolchains import StepOutcome, Toolchain, first_line, run_step
from . import HarnessBackend


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
        return first_line([str(self.cncc), "--version"])


class MluHarnessBackend(HarnessBackend):
    name = "mlu"

    def toolchain(self) -> Toolchain:
        return MluToolchain()

    def activate(self, device_name: str | None, runtime: ctypes.CDLL | None,
                 notes: list[str]) -> tuple[Any, Any, str]:
        # MLU_VISIBLE_DEVICES (the host's run_env) leaves only the chosen card: `mlu` is that card.
        import torch
        import torch_mlu  # noqa: F401 -- registers the mlu device with torch

        from ..mlu_driver import mlu_driver

        driver, note = mlu_driver(int(torch.mlu.current_stream().mlu_stream))
        notes.append(f"timing: the harness's CNRT notifiers; {note}")  # CNPAPI or not, visibly
        return torch.device("mlu"), driver, note

    def leaves_device_faulted(self, result: CallResult) -> bool:
        # a CNRT error raised into Python leaves the card's queue in its error state too
        return super().leaves_device_faulted(result) or (
            result.error_kind == ErrorKind.PYTHON_EXCEPTION and "cnrt" in (result.error or "").lower())


BACKEND = MluHarnessBackend()
