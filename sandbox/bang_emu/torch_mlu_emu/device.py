"""Python side of the emulated `mlu` device: PrivateUse1 renamed to `mlu`, `torch.mlu` registered."""

from __future__ import annotations

import atexit
import time
from types import ModuleType

import torch

from bang_emu.torch_mlu_emu.build import load_device_library

BACKEND_NAME = "mlu"
_installed = False


def _let_autograd_device_threads_finish() -> None:
    # After a backward pass on mlu tensors, the autograd engine's mlu worker thread still owns the graph
    # task and needs the GIL once to release its Python objects. If the interpreter starts finalising
    # first, that thread is killed inside a noexcept frame and the process aborts ("terminate called
    # without an active exception"). Releasing the GIL briefly at exit lets it finish.
    time.sleep(0.05)


def install(device_module: ModuleType) -> None:
    """Load the C++ device (allocator, guard, kernels, CPU fallback) and expose it as `mlu`.

    Idempotent: a second call (or a second `import torch_mlu`) changes nothing.
    """
    global _installed
    load_device_library()
    if not _installed:
        atexit.register(_let_autograd_device_threads_finish)
        _installed = True
    if torch._C._get_privateuse1_backend_name() != BACKEND_NAME:
        torch.utils.rename_privateuse1_backend(BACKEND_NAME)
    if getattr(torch, BACKEND_NAME, None) is None:
        torch._register_device_module(BACKEND_NAME, device_module)
    if not hasattr(torch.Tensor, f"is_{BACKEND_NAME}"):
        torch.utils.generate_methods_for_privateuse1_backend(
            for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=True
        )
