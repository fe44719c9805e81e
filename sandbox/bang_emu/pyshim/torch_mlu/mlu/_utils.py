"""torch_mlu.mlu._utils: device index resolution with torch_mlu's errors (torch_mlu's test_device checks them)."""

from __future__ import annotations

from typing import Any

import torch


def _get_device_index(device: Any, optional: bool = False, allow_cpu: bool = False) -> int:
    """The index of `device` (an int, "mlu", "mlu:0", a torch.device); None or an index-less "mlu" is the current
    device (0). A CPU device is refused unless `allow_cpu` (then -1), as torch_mlu and torch.cuda do."""
    if isinstance(device, str):
        device = torch.device(device)  # "mlu0" raises RuntimeError("Invalid device string ...") here
    if isinstance(device, torch.device):
        if device.type == "cpu" and allow_cpu:
            return -1
        if device.type != "mlu":
            raise ValueError(f"Expected a mlu device, but got: {device}")
        device = device.index
    if device is None:
        if not optional:
            raise ValueError("Expected a mlu device with a specified index or an integer, but got: None")
        return 0
    return int(device)
