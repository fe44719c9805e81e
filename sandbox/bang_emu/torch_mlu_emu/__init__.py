"""torch integration of the BANG-on-CPU emulator.

- `include_dirs()` / `link_args()`: what a C++ binding file (`cpp/*.cpp`) needs to compile against the
  emulated torch_mlu headers (`aten/utils/tensor_util.h`, `framework/core/MLUStream.h`, ...) and link the
  emulator runtime.
- `activate()`: makes `import torch_mlu` work in this process (an emulated torch_mlu: the `mlu` device
  as PyTorch's PrivateUse1 backend in host memory, `torch.mlu.*`, `torch_mlu.utils.cpp_extension`).
  Setting `PYTHONPATH` to `pyshim_dir()` has the same effect for a child process.
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import ModuleType

from bang_emu.torch_mlu_emu.build import INCLUDE_DIR, emulator_include_dirs, emulator_link_args

#: The emulated torch_mlu headers alone (for the emulator core's own include list: use this constant,
#: not include_dirs(), which itself asks the core for its directories).
HEADER_DIR: Path = INCLUDE_DIR
PYSHIM_DIR: Path = Path(__file__).resolve().parent.parent / "pyshim"

__all__ = ["HEADER_DIR", "PYSHIM_DIR", "activate", "include_dirs", "link_args", "pyshim_dir"]


def include_dirs() -> list[Path]:
    """Include dirs for binding .cpp files: the torch_mlu emulation headers, then BANG/CNRT's."""
    dirs = [HEADER_DIR]
    for extra in emulator_include_dirs():
        if extra not in dirs:
            dirs.append(extra)
    return dirs


def link_args() -> list[str]:
    """Linker arguments for a torch extension that contains emulated .mlu code (the emulator runtime)."""
    return emulator_link_args()


def pyshim_dir() -> Path:
    """Directory holding the importable `torch_mlu` shim package (put it on PYTHONPATH)."""
    return PYSHIM_DIR


def activate() -> ModuleType:
    """Make `import torch_mlu` work here and set up the `mlu` device; returns the torch_mlu module.

    Builds the device library into the cache on first use (see `build.prebuild`).
    """
    shim = str(PYSHIM_DIR)
    if shim not in sys.path:
        sys.path.insert(0, shim)
    import torch_mlu

    return torch_mlu
