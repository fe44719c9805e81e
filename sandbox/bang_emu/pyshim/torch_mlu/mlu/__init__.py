"""torch.mlu for the emulated device: one device (mlu:0), one queue, modelled timing."""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from bang_emu.torch_mlu_emu.build import load_device_library

from torch_mlu.mlu._utils import _get_device_index
from torch_mlu.mlu.streams import Event, Stream

__all__ = [
    "Event",
    "Stream",
    "current_device",
    "current_stream",
    "default_stream",
    "device",
    "device_count",
    "get_device_capability",
    "get_device_name",
    "get_device_properties",
    "initial_seed",
    "is_bf16_supported",
    "is_available",
    "is_initialized",
    "manual_seed",
    "manual_seed_all",
    "set_device",
    "set_stream",
    "stream",
    "synchronize",
]


@dataclass(frozen=True)
class _MLUDeviceProperties:
    name: str
    major: int
    minor: int
    total_memory: int
    cluster_count: int
    core_num_per_cluster: int
    multi_processor_count: int


def is_available() -> bool:
    return True


def is_initialized() -> bool:
    return True


def _is_in_bad_fork() -> bool:
    return False


def init() -> None:
    load_device_library()


def device_count() -> int:
    return 1


def current_device() -> int:
    return 0


def _check_index(device: Any) -> int:
    index = _get_device_index(device, optional=True)
    if index not in (0, -1):
        raise RuntimeError(f"the emulated mlu backend has one device (mlu:0), got {device!r}")
    return 0


def set_device(device: Any) -> None:
    _check_index(device)


@contextmanager
def device(device: Any):  # noqa: ANN201  (context manager)
    _check_index(device)
    yield


def synchronize(device: Any = None) -> None:
    """Wait for the queue; raises if an emulated kernel failed a check (see stderr for the diagnostic)."""
    _check_index(device)
    load_device_library().queue_sync()


def current_stream(device: Any = None) -> Stream:
    _check_index(device)
    return Stream()


def default_stream(device: Any = None) -> Stream:
    _check_index(device)
    return Stream()


@contextmanager
def stream(stream: Stream | None):  # noqa: ANN201  (context manager)
    # One queue: every stream is the default one.
    yield


def set_stream(stream: Stream) -> None:
    pass


def get_device_properties(device: Any = None) -> _MLUDeviceProperties:
    """The emulated device profile (env BANG_EMU_DEVICE); its name says it is modelled."""
    _check_index(device)
    prop = load_device_library().device_properties()
    name = prop["name"] if "bang_emu" in prop["name"] else f"{prop['name']} (bang_emu, modelled)"
    return _MLUDeviceProperties(
        name=name,
        major=prop["major"],
        minor=prop["minor"],
        total_memory=prop["total_memory"],
        cluster_count=prop["cluster_count"],
        core_num_per_cluster=prop["core_num_per_cluster"],
        multi_processor_count=prop["cluster_count"] * prop["core_num_per_cluster"],
    )


def get_device_name(device: Any = None) -> str:
    return get_device_properties(device).name


def get_device_capability(device: Any = None) -> tuple[int, int]:
    props = get_device_properties(device)
    return props.major, props.minor


# Random numbers for mlu tensors come from the CPU generator (random ops run through the CPU fallback).
# Seed it directly: torch.manual_seed itself calls torch.mlu.manual_seed_all.
def manual_seed(seed: int) -> None:
    torch.default_generator.manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    torch.default_generator.manual_seed(int(seed))


def initial_seed() -> int:
    return torch.initial_seed()


def seed() -> None:
    torch.default_generator.seed()


def seed_all() -> None:
    torch.default_generator.seed()


def get_rng_state(device: Any = None) -> torch.Tensor:
    return torch.default_generator.get_state()


def set_rng_state(new_state: torch.Tensor, device: Any = None) -> None:
    torch.default_generator.set_state(new_state)


def is_bf16_supported() -> bool:
    return True  # bfloat16 tensors are stored and copied like any other; their ops run on the CPU fallback


def empty_cache() -> None:
    pass


def memory_allocated(device: Any = None) -> int:
    return 0
