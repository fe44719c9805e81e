"""torch_mlu, emulated by bang_emu (no MLU needed).

Importing this package makes the `mlu` device usable: PyTorch's PrivateUse1 backend renamed to `mlu`,
tensors in host memory, operators without an mlu kernel run on CPU (fallback), custom ops registered
with `TORCH_LIBRARY_IMPL(ns, PrivateUse1, m)` dispatch for mlu tensors. Every time reported by
`torch.mlu.Event` is the emulator's MODELLED time, not a measurement.
"""

from bang_emu.torch_mlu_emu import device as _device

from torch_mlu import mlu, utils

_device.install(mlu)

__version__ = "0.0.0+bang_emu"
__all__ = ["mlu", "utils"]
