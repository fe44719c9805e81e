"""Python side of the emulated `mlu` device: PrivateUse1 renamed to `mlu`, `torch.mlu` registered."""

from __future__ import annotations

from types import ModuleType

import torch

from bang_emu.torch_mlu_emu.build import load_device_library

BACKEND_NAME = "mlu"


def install(device_module: ModuleType) -> None:
    """Load the C++ device (allocator, guard, kernels, CPU fallback) and expose it as `mlu`.

    Idempotent: a second call (or a second `import torch_mlu`) changes nothing.
    """
    load_device_library()
    if torch._C._get_privateuse1_backend_name() != BACKEND_NAME:
        torch.utils.rename_privateuse1_backend(BACKEND_NAME)
    if getattr(torch, BACKEND_NAME, None) is None:
        torch._register_device_module(BACKEND_NAME, device_module)
    if not hasattr(torch.Tensor, f"is_{BACKEND_NAME}"):
        torch.utils.generate_methods_for_privateuse1_backend(
            for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=True
        )
