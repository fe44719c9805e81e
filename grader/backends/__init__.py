"""Backends: what differs between grading on the emulator (`emu`) and on a real MLU (`mlu`).

One module per backend (grader/backends/<name>.py, one concrete Backend subclass), found here by discovery:
adding a backend adds a module here and its harness side (sandbox/bang_harness/backends/<name>.py), nothing else.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil

from grader.backends.base import Backend, TimingSource


def _discover() -> dict[str, type[Backend]]:
    found: dict[str, type[Backend]] = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name == "base" or info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        for cls in vars(module).values():
            if (inspect.isclass(cls) and issubclass(cls, Backend) and cls.__module__ == module.__name__
                    and not inspect.isabstract(cls)):
                if cls.name in found:
                    raise ImportError(f"two backends named {cls.name!r}: {found[cls.name]} and {cls}")
                found[cls.name] = cls
    return found


BACKENDS: dict[str, type[Backend]] = _discover()
DEFAULT_BACKEND = "emu"  # what --backend and GradeEnvironment default to: every machine can grade on it

__all__ = ["BACKENDS", "DEFAULT_BACKEND", "Backend", "TimingSource", "get_backend"]


def get_backend(name: str) -> Backend:
    try:
        return BACKENDS[name]()
    except KeyError:
        raise ValueError(f"unknown backend {name!r}; expected one of {', '.join(BACKENDS)}") from None
