"""The harness's side of each backend, one module per backend (`backends/<name>.py`, defining BACKEND), looked
up by the job's backend name: its toolchain (build phase) and its device (run phase).

The host's side of the same backend is grader/backends/<name>.py; the two meet only in that name (the harness
imports nothing from grader). Standard library only at import time: torch, the emulator and torch_mlu are
imported inside the methods that need them.
"""

from __future__ import annotations

import importlib
import pkgutil
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..job import CallResult
from ..protocol import ErrorKind

if TYPE_CHECKING:
    import ctypes

    from ..toolchains import Toolchain

# The timing driver's measure(fn, label) -> (value, DeviceTiming) (mlu_driver.py).
Measure = Callable[..., Any]


class HarnessBackend(ABC):
    name: str
    # The worker loads the emulator runtime before anything else (it reads the trace key, fixes the profile).
    loads_emulator_runtime: bool = False

    @abstractmethod
    def toolchain(self) -> Toolchain:
        """How .mlu files become objects, and what the C++ side compiles and links against."""

    @abstractmethod
    def activate(self, device_name: str | None, runtime: ctypes.CDLL | None,
                 notes: list[str]) -> tuple[Any, Any, str]:
        """Activates the device once per worker, before student code: (torch.device, timing driver, the
        driver's note). `runtime`: the emulator runtime the worker loaded first, if this backend loads one;
        `notes` collects what the worker prints for the host."""

    def worker_env(self, device_name: str | None) -> dict[str, str]:
        """Variables a worker starts with so that it targets `device_name` (none: the default)."""
        return {}

    def leaves_device_faulted(self, result: CallResult) -> bool:
        """A kernel fault can leave the device's error state set (sticky, as on real hardware): later calls
        must not inherit it, so they get a fresh process and device."""
        return result.error_kind == ErrorKind.EMULATOR_ERROR


def names() -> list[str]:
    """Every backend this harness has a module for."""
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))


def get_harness_backend(name: str) -> HarnessBackend:
    if name not in names():
        raise ValueError(f"unknown backend {name!r}; expected one of {names()}")
    return importlib.import_module(f"{__name__}.{name}").BACKEND
