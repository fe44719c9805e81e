"""The device the student's entry runs on, and how a call's device time is measured on it.

emu: the emulated `mlu` device of bang_emu.torch_mlu_emu (CPU tensors if the shim is absent); time is the cost
model's, read from torch.mlu.Event when the shim provides it, otherwise summed from the launch trace.
mlu: torch_mlu's device; time from torch.mlu.Event (hardware notifiers).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from .protocol import split_line

TRACE_READ_CAP = 64 << 20


@dataclass
class TraceWindow:
    """The kernel launches the emulator appended to a trace file since a byte offset."""

    launches: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def read(cls, path: Path, offset: int) -> TraceWindow:
        if not path.exists():
            return cls()
        with path.open("rb") as fh:
            fh.seek(offset)
            data = fh.read(TRACE_READ_CAP)
        launches = []
        for line in data.splitlines():
            # Signed lines carry "<mac> " before the JSON; only the host verifies them (it has the key).
            parts = split_line(line)
            try:
                record = json.loads(parts[1] if parts is not None else line)
            except ValueError:
                continue  # a launch cut short mid-line; the host reads the file itself anyway
            if isinstance(record, dict) and record.get("record", "launch") == "launch":
                launches.append(record)
        return cls(launches)

    def modelled_us(self) -> float:
        return float(sum(float(r.get("modelled_time_us") or 0.0) for r in self.launches))

    def errors(self) -> list[str]:
        messages = []
        for record in self.launches:
            for diag in record.get("diagnostics") or []:
                if isinstance(diag, dict) and diag.get("severity", "error") == "error":
                    where = f" ({diag.get('kernel')}, {diag.get('file')}:{diag.get('line')})" if diag.get("file") else ""
                    messages.append(f"{diag.get('kind', 'error')}: {diag.get('message', '')}{where}")
        return messages


def trace_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


class DeviceSession:
    """Activates the backend's device once per worker and times single invocations on it."""

    def __init__(self, backend: str, device_name: str | None) -> None:
        self.backend = backend
        self.notes: list[str] = []
        if backend == "emu":
            if device_name:
                os.environ.setdefault("BANG_EMU_DEVICE", device_name)
            self.device = self._activate_emulated()
        elif backend == "mlu":
            import torch_mlu  # noqa: F401 -- registers the mlu device with torch

            self.device = torch.device("mlu")
        else:
            raise ValueError(f"unknown backend {backend!r}")
        self._mlu = getattr(torch, "mlu", None) if self.device.type == "mlu" else None
        self._events = self._mlu is not None and hasattr(self._mlu, "Event")

    def _activate_emulated(self) -> torch.device:
        try:
            from bang_emu import torch_mlu_emu

            torch_mlu_emu.activate()
            return torch.device("mlu")
        except ImportError as exc:
            reason = str(exc)
        except RuntimeError as exc:  # the shim imported but registered no `mlu` device type
            if "device type" not in str(exc):
                raise
            reason = str(exc).splitlines()[0]
        self.notes.append(f"emulated mlu device unavailable ({reason}); tensors stay on the CPU")
        return torch.device("cpu")

    def synchronize(self) -> None:
        if self._mlu is not None and hasattr(self._mlu, "synchronize"):
            self._mlu.synchronize()

    def to_device(self, tensor: torch.Tensor) -> torch.Tensor:
        # copy=True: a fresh buffer every invocation, even on the CPU, so mutation and pointer caching fail.
        return tensor.to(self.device, copy=True)

    def timed(self, fn: Callable[[], Any], trace: Path) -> tuple[Any, float | None, TraceWindow]:
        """Run fn, synchronise; returns its value, the device time in µs (None: no device clock) and the trace."""
        offset = trace_size(trace)
        device_us: float | None = None
        if self._events:
            start = self._mlu.Event(enable_timing=True)
            end = self._mlu.Event(enable_timing=True)
            start.record()
            value = fn()
            end.record()
            end.synchronize()
            self.synchronize()
            try:
                device_us = float(start.elapsed_time(end)) * 1000.0  # elapsed_time is in ms
            except (RuntimeError, AttributeError, NotImplementedError):
                device_us = None
        else:
            value = fn()
            self.synchronize()
        window = TraceWindow.read(trace, offset)
        if device_us is None and self.backend == "emu" and (self.device.type == "mlu" or window.launches):
            device_us = window.modelled_us()
        return value, device_us, window
