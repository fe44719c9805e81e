"""The device the student's entry runs on, and how a call's device time is measured on it.

Which device and which timing driver is the backend's (bang_harness/backends/<name>.py, `activate`). On every
backend device time comes from the grader's own driver (mlu_driver.NotifierDriver), bound before any student
code loads: CNRT notifiers on the queue captured then (modelled µs on the emulator, hardware µs on a card),
never torch.mlu.Event, which the student's Python can replace.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from .backends import get_harness_backend
from .protocol import split_line

if TYPE_CHECKING:
    import ctypes

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
    """Activates the backend's device once per worker and times single invocations on it.

    Made before the student's extension or module is imported: the timing driver binds its CNRT functions,
    notifiers and queue now (on emu, `runtime` is the emulator runtime the worker loaded first).
    """

    def __init__(self, backend: str, device_name: str | None, runtime: ctypes.CDLL | None = None) -> None:
        self.backend = backend
        self.notes: list[str] = []
        self.device, driver, note = get_harness_backend(backend).activate(device_name, runtime, self.notes)
        self._measure = driver.measure  # a bound method now: patching the class later does not reach it
        self.timing_note = note

    def to_device(self, tensor: torch.Tensor) -> torch.Tensor:
        # copy=True: a fresh buffer every invocation, even on the CPU, so mutation and pointer caching fail.
        return tensor.to(self.device, copy=True)

    def timed(self, fn: Callable[[], Any], trace: Path) -> tuple[Any, float, TraceWindow]:
        """Run fn between the driver's notifiers; returns its value, the device time in µs and the trace.

        On the mlu backend the driver's record of the invocation (protocol.KernelWindow: notifier time and
        CNPAPI's kernels) is appended to the call's trace file, which nothing else writes there; the host
        judges kernel use and time from it (grader.checks.kernel_use)."""
        offset = trace_size(trace)
        value, timing = self._measure(fn, trace.name)
        window = TraceWindow.read(trace, offset)
        if timing.window is not None:
            with trace.open("ab") as fh:
                fh.write(timing.window.to_line())
        return value, timing.device_us, window
