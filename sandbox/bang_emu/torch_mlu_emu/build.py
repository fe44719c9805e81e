"""Build, cache and load the emulated mlu device library (`_bang_emu_torch_mlu`).

The library is a torch C++ extension compiled once per (sources, torch, python, compiler, emulator
runtime) and cached under `$BANG_EMU_CACHE` (default `~/.cache/bang_emu`) in a directory named by that
hash. Inside the grading container the root filesystem is read-only, so the image build runs
`python -m bang_emu.torch_mlu_emu prebuild` and run time only loads.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.machinery
import importlib.util
import os
import subprocess
import sys
import sysconfig
from functools import cache
from pathlib import Path
from types import ModuleType

MODULE_NAME = "_bang_emu_torch_mlu"
PACKAGE_DIR = Path(__file__).resolve().parent
INCLUDE_DIR = PACKAGE_DIR / "include"
CSRC_DIR = PACKAGE_DIR / "csrc"


class DeviceLibraryError(RuntimeError):
    """The device library could not be built or loaded."""


def cache_root() -> Path:
    return Path(os.environ.get("BANG_EMU_CACHE") or Path.home() / ".cache" / "bang_emu")


def compiler() -> str:
    return os.environ.get("CXX", "c++")


def _toolchain() -> ModuleType:
    from bang_emu import toolchain  # the emulator core: headers and runtime library

    return toolchain


def emulator_include_dirs() -> list[Path]:
    return [Path(p) for p in _toolchain().include_dirs()]


def emulator_link_args() -> list[str]:
    return list(_toolchain().runtime_link_args())


def torch_compile_args() -> list[str]:
    """Flags a translation unit including torch headers needs (what torch's BuildExtension adds)."""
    import torch
    from torch.utils import cpp_extension

    includes = [*cpp_extension.include_paths(), sysconfig.get_paths()["include"]]
    return [
        "-std=c++17",
        "-fPIC",
        f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
        *(f"-I{p}" for p in includes),
    ]


def torch_link_args() -> list[str]:
    from torch.utils import cpp_extension

    args: list[str] = []
    for lib_dir in cpp_extension.library_paths():
        args += [f"-L{lib_dir}", f"-Wl,-rpath,{lib_dir}"]
    return args + ["-lc10", "-ltorch", "-ltorch_cpu", "-ltorch_python"]


def _sources() -> list[Path]:
    return sorted([*CSRC_DIR.glob("*.cpp"), *INCLUDE_DIR.rglob("*.h")])


@cache
def _compiler_identity() -> str:
    try:
        return subprocess.run([compiler(), "--version"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        raise DeviceLibraryError(f"C++ compiler {compiler()!r} is not usable: {exc}") from exc


def build_key() -> str:
    """Hash of everything the built library depends on."""
    import torch

    digest = hashlib.sha256()
    for path in _sources():
        digest.update(str(path.relative_to(PACKAGE_DIR)).encode())
        digest.update(path.read_bytes())
    for part in (
        torch.__version__,
        sys.version,
        _compiler_identity(),
        repr(emulator_include_dirs()),
        repr(emulator_link_args()),
    ):
        digest.update(part.encode())
    return digest.hexdigest()[:16]


def library_path() -> Path:
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    return cache_root() / "torch_mlu" / build_key() / f"{MODULE_NAME}{suffix}"


def compile_command(output: Path) -> list[str]:
    return [
        compiler(),
        "-shared",
        "-O2",
        f"-DTORCH_EXTENSION_NAME={MODULE_NAME}",
        "-DTORCH_API_INCLUDE_EXTENSION_H",
        *torch_compile_args(),
        *(f"-I{p}" for p in emulator_include_dirs()),
        f"-I{INCLUDE_DIR}",
        *(str(p) for p in sorted(CSRC_DIR.glob("*.cpp"))),
        "-o",
        str(output),
        *torch_link_args(),
        *emulator_link_args(),
    ]


def prebuild() -> Path:
    """Build the device library into the cache unless it is there already; returns its path."""
    target = library_path()
    if target.exists():
        return target
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DeviceLibraryError(
            f"the emulated mlu device library is not built and its cache {target.parent} is not writable "
            f"({exc}); build it ahead of time with `python -m bang_emu.torch_mlu_emu prebuild`"
        ) from exc
    # Concurrent first uses (parallel tests, batch workers) build once; the others wait on the lock.
    with open(target.parent / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if target.exists():
            return target
        partial = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        result = subprocess.run(compile_command(partial), capture_output=True, text=True)
        if result.returncode != 0:
            partial.unlink(missing_ok=True)
            raise DeviceLibraryError(
                f"building the emulated mlu device library failed:\n{result.stderr[-6000:]}"
            )
        os.replace(partial, target)
    return target


@cache
def load_device_library() -> ModuleType:
    """Import the device library (building it first if needed); registers the mlu backend's C++ side."""
    import torch  # noqa: F401  (libtorch must be loaded before the extension)

    path = prebuild()
    loader = importlib.machinery.ExtensionFileLoader(MODULE_NAME, str(path))
    spec = importlib.util.spec_from_file_location(MODULE_NAME, str(path), loader=loader)
    if spec is None:
        raise DeviceLibraryError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    sys.modules[MODULE_NAME] = module
    return module
