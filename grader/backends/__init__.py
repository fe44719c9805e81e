"""Backends: what differs between grading on the emulator (`emu`) and on a real MLU (`mlu`)."""

from __future__ import annotations

from grader.backends.base import Backend, TimingSource
from grader.backends.emu import EmuBackend
from grader.backends.mlu import MluBackend

BACKENDS: dict[str, type[Backend]] = {"emu": EmuBackend, "mlu": MluBackend}

__all__ = ["BACKENDS", "Backend", "EmuBackend", "MluBackend", "TimingSource", "get_backend"]


def get_backend(name: str) -> Backend:
    try:
        return BACKENDS[name]()
    except KeyError:
        raise ValueError(f"unknown backend {name!r}; expected one of {', '.join(BACKENDS)}") from None
