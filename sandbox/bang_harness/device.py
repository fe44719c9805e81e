"""The device the student's entry runs on, and how a call's device time is measured on it.

emu: the emulated `mlu` device of bang_emu.torch_mlu_emu (CPU tensors if the shim is absent).
mlu: torch_mlu's device.
On both, device time comes from the grader's own driver (mlu_driver.NotifierDriver), bound before any student
code loads: CNRT notifiers on the queue captured then (modelled µs on the emulator, hardware µs on a card),
never torch.mlu.Event, which the student's Python can replace.
"""

from __future__ import annotations

import ctypes
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from .mlu_driver import emulator_driver, mlu_driver
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
        if backend == "emu":
            if device_name:
                os.environ.setdefault("BANG_EMU_DEVICE", device_name)
            self.device = self._activate_emulated()
            if runtime is None:
                from bang_emu import toolchain

                runtime = ctypes.CDLL(str(toolchain.runtime_dir() / toolchain.LIB_NAME), mode=ctypes.RTLD_GLOBAL)
            driver, note = emulator_driver(runtime)
        elif backend == "mlu":
            import torch_mlu  # noqa: F401 -- registers the mlu device with torch

            self.device = torch.device("mlu")
            driver, note = mlu_driver(int(torch.mlu.current_stream().mlu_stream))
            self.notes.append(f"timing: the harness's CNRT notifiers; {note}")  # CNPAPI or not, visibly
        else:
            raise ValueError(f"unknown backend {backend!r}")
        self._measure = driver.measure  # a bound method now: patching the class later does not reach it
        self.timing_note = note

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
