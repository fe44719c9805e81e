"""torch_mlu.utils.cpp_extension, emulated: MLUExtension / BuildExtension build mixed C++/BANG extensions.

`.mlu` sources go through the emulator's `cncc-emu` (with the `cncc` entry of `extra_compile_args`),
`.cpp` sources through the C++ compiler with the emulated torch_mlu headers, and the result links the
emulator runtime instead of libtorch_mlu/libcnrt. A setup.py written for torch_mlu works unchanged.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import bang_emu.torch_mlu_emu as _emu
import setuptools
from torch.utils import cpp_extension as _torch_cpp_extension

__all__ = ["BuildExtension", "MLUExtension", "include_paths", "library_paths"]


def _is_mlu_file(path: str) -> bool:
    return os.path.splitext(path)[1] == ".mlu"


def include_paths() -> list[str]:
    """Torch's include paths, then the emulated torch_mlu and BANG/CNRT headers."""
    return [*_torch_cpp_extension.include_paths(), *(str(p) for p in _emu.include_dirs())]


def library_paths() -> list[str]:
    return list(_torch_cpp_extension.library_paths())


def MLUExtension(name: str, sources: list[str], *args: Any, **kwargs: Any) -> setuptools.Extension:  # noqa: N802
    """A setuptools.Extension for C++/BANG sources, like torch_mlu's (emulated toolchain)."""
    kwargs["include_dirs"] = [*kwargs.get("include_dirs", []), *include_paths()]
    kwargs["library_dirs"] = [*kwargs.get("library_dirs", []), *library_paths()]
    # torch_mlu also links "torch_mlu"; here the emulator runtime (link_args) takes its place.
    kwargs["libraries"] = [*kwargs.get("libraries", []), "c10", "torch", "torch_cpu", "torch_python"]
    kwargs["extra_link_args"] = [*kwargs.get("extra_link_args", []), *_emu.link_args()]
    kwargs["language"] = "c++"
    return setuptools.Extension(name, sources, *args, **kwargs)


_OLD_STD = ("-std=c++11", "-std=c++14", "-std=gnu++11", "-std=gnu++14")


def _raise_old_std(args: Any) -> Any:
    """Lab setup.py files of the torch 1.x era ask for C++14; the torch 2.x headers here need C++17."""
    def fix(flags: list[str]) -> list[str]:
        if any(f in _OLD_STD for f in flags):
            print("torch_mlu (emulated): note: -std=c++14 raised to -std=c++17 (torch 2.x headers need it)",
                  flush=True)
        return ["-std=c++17" if f in _OLD_STD else f for f in flags]

    if isinstance(args, dict):
        return {key: fix(list(value)) if isinstance(value, list) else value for key, value in args.items()}
    return fix(list(args)) if isinstance(args, list) else args


class MluCompileError(RuntimeError):
    """cncc-emu rejected a .mlu source."""


class BuildExtension(_torch_cpp_extension.BuildExtension):
    """torch's BuildExtension plus `.mlu` sources compiled by cncc-emu.

    `extra_compile_args` may be a dict with `cxx` and `cncc` entries, as with torch_mlu. Builds use the
    plain setuptools backend: torch's ninja backend only knows CUDA/SYCL as a second language.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["use_ninja"] = False
        super().__init__(*args, **kwargs)
        self._cncc_flags: list[str] = []

    def build_extensions(self) -> None:
        self.compiler.src_extensions += [".mlu"]
        compile_cxx = self.compiler._compile

        def compile_any(obj: str, src: str, ext: str, cc_args: list[str], extra_postargs: Any, pp_opts: list[str]) -> None:
            if _is_mlu_file(src):
                self._compile_mlu(obj, src, pp_opts)
            else:
                compile_cxx(obj, src, ext, cc_args, extra_postargs, pp_opts)

        # torch's BuildExtension wraps whatever _compile is installed now, so .cpp keeps torch's handling.
        self.compiler._compile = compile_any
        super().build_extensions()

    def build_extension(self, ext: setuptools.Extension) -> None:
        ext.extra_compile_args = _raise_old_std(ext.extra_compile_args)
        args = ext.extra_compile_args
        self._cncc_flags = list(args.get("cncc", [])) if isinstance(args, dict) else []
        super().build_extension(ext)

    def _compile_mlu(self, obj: str, src: str, pp_opts: list[str]) -> None:
        from bang_emu import toolchain

        flags = ["-c", "-fPIC", *self._cncc_flags, *pp_opts]
        print(f"cncc-emu {src} -> {obj}", flush=True)
        result: subprocess.CompletedProcess = toolchain.compile_mlu(Path(src), Path(obj), flags)
        if result.returncode != 0:
            output = "".join(part for part in (result.stdout, result.stderr) if isinstance(part, str))
            raise MluCompileError(f"cncc-emu failed on {src} (exit {result.returncode}):\n{output}")
