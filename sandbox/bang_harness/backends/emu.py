"""The emulator backend inside the sandbox: cncc-emu builds, the emulated `mlu` device of bang_emu runs, and the
emulator runtime's notifiers give (modelled) device time."""

from __future__ import annotations

import ctypes
import os
from pathlib import Path
from typing import Any

from .. import toolchains
from ..toolchains import StepOutcome, Toolchain, gxx_version, optional_module, text_of
from . import HarnessBackend


class EmuToolchain(Toolchain):
    """BANG on the CPU: cncc-emu turns .mlu into ordinary objects; the emulator runtime is linked in."""

    name = "emu"

    def __init__(self) -> None:
        from bang_emu import toolchain  # imported here: the mlu backend must not need the emulator

        self._toolchain = toolchain
        self._torch_shim = optional_module("bang_emu.torch_mlu_emu")

    def compile_mlu(self, source: Path, obj: Path, include_dirs: list[Path], extra: tuple[str, ...] = ()) -> StepOutcome:
        flags = [*extra, "-c", "-fPIC", "-O2"] + [arg for d in include_dirs for arg in ("-I", str(d))]
        # Returns for anything the source did wrong; raising means the emulator itself failed (internal error).
        proc = self._toolchain.compile_mlu(source, obj, flags)
        output = "".join(text_of(part) for part in (proc.stdout, proc.stderr))
        command = [str(a) for a in proc.args] if isinstance(proc.args, list | tuple) else [str(proc.args)]
        return StepOutcome(command, proc.returncode, output)

    def compile_mlu_and_device_object(self, source: Path, obj: Path, device_obj: Path,
                                      include_dirs: list[Path]) -> StepOutcome:
        """compile_mlu, and the same source for the replay's device module into device_obj: one driver and one
        preprocessing for both (the device object is compiled only once the run's object compiled)."""
        return self.compile_mlu(source, obj, include_dirs, (f"--emu-device-module-also={device_obj}",))

    def link_device_module(self, objects: list[Path], out: Path) -> StepOutcome:
        from bang_emu import device_module

        out.parent.mkdir(parents=True, exist_ok=True)
        result = device_module.link(objects, out)
        return StepOutcome(["link-device-module", str(out), *map(str, objects)], 0 if result.ok else 1,
                           result.message)

    def cpp_include_dirs(self) -> list[Path]:
        dirs = [Path(d) for d in self._toolchain.include_dirs()]
        if self._torch_shim is not None:
            dirs += [Path(d) for d in self._torch_shim.include_dirs()]
        return list(dict.fromkeys(dirs))  # both lists name the shared header folders

    def precompiled_headers(self) -> list[tuple[toolchains.BindingCompiler, Path]]:
        found = [(compiler, toolchains.pch_dir(compiler)) for compiler in toolchains.BINDING_COMPILERS]  # per build
        return [(compiler, folder) for compiler, folder in found if folder is not None]

    def link_args(self) -> list[str]:
        args = [str(a) for a in self._toolchain.runtime_link_args()]
        if self._torch_shim is not None:
            args += [str(a) for a in self._torch_shim.link_args() if str(a) not in args]
        return args

    def describe(self) -> str:
        import bang_emu

        version = getattr(bang_emu, "__version__", "unknown")
        gxx = f"g++ {gxx_version()}"
        if toolchains.pch_dir(toolchains.CLANG) is None:
            return f"cncc-emu {version} ({gxx})"
        clang = toolchains.first_line([toolchains.CLANG.command, "-dumpversion"])
        return f"cncc-emu {version} ({gxx}; bindings: clang {clang}, else {gxx})"


class EmuHarnessBackend(HarnessBackend):
    name = "emu"
    loads_emulator_runtime = True

    def toolchain(self) -> Toolchain:
        return EmuToolchain()

    def worker_env(self, device_name: str | None) -> dict[str, str]:
        # The device profile is fixed when the worker loads the runtime, from this value only.
        return {"BANG_EMU_DEVICE": device_name} if device_name else {}

    def activate(self, device_name: str | None, runtime: ctypes.CDLL | None,
                 notes: list[str]) -> tuple[Any, Any, str]:
        from ..mlu_driver import emulator_driver

        if device_name:
            os.environ.setdefault("BANG_EMU_DEVICE", device_name)
        device = _emulated_device(notes)
        if runtime is None:
            from bang_emu import toolchain

            runtime = ctypes.CDLL(str(toolchain.runtime_dir() / toolchain.LIB_NAME), mode=ctypes.RTLD_GLOBAL)
        driver, note = emulator_driver(runtime)
        return device, driver, note


def _emulated_device(notes: list[str]) -> Any:
    """The emulated `mlu` device of bang_emu.torch_mlu_emu, or the CPU when the shim is absent."""
    import torch

    try:
        from bang_emu import torch_mlu_emu

        torch_mlu_emu.activate()
        return torch.device("mlu")
    except ImportError as exc:
        reason = str(exc)
    except RuntimeError as exc:  # the shim imported but registered no `mlu` device type
        if "device type" not in str(exc):
            raise
        reason = str(exc).splitlines()[0]
    notes.append(f"emulated mlu device unavailable ({reason}); tensors stay on the CPU")
    return torch.device("cpu")


BACKEND = EmuHarnessBackend()
