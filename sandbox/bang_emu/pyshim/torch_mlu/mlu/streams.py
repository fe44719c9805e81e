"""torch.mlu.Stream / Event over the emulator's single queue; times are MODELLED, not measured."""

from __future__ import annotations

import torch
from bang_emu.torch_mlu_emu.build import load_device_library


class Stream:
    """The emulated device's one queue (the emulator's default queue)."""

    def __init__(self, device: object = None, priority: int = 0) -> None:
        self.device = torch.device("mlu", 0)
        self.priority = priority

    @property
    def mlu_stream(self) -> int:
        return load_device_library().default_queue()

    def synchronize(self) -> None:
        load_device_library().queue_sync()

    def query(self) -> bool:
        return load_device_library().queue_query()

    def wait_event(self, event: Event) -> None:
        event.synchronize()

    def wait_stream(self, stream: Stream) -> None:
        stream.synchronize()

    def record_event(self, event: Event | None = None) -> Event:
        event = event if event is not None else Event()
        event.record(self)
        return event

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Stream)

    def __hash__(self) -> int:
        return hash(self.mlu_stream)

    def __repr__(self) -> str:
        return "<torch.mlu.Stream device=mlu:0 (bang_emu default queue)>"


class Event:
    """A CNRT notifier placed on the emulator's queue.

    `elapsed_time(end)` is milliseconds (cnrtNotifierElapsedTime) and `hardware_time(end)` microseconds
    (cnrtNotifierDuration), both the emulator's modelled time of the kernels launched between the two
    notifiers, as torch_mlu reports them on hardware.
    """

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False) -> None:
        self.enable_timing = enable_timing
        self.blocking = blocking
        self._lib = load_device_library()
        self._handle = self._lib.notifier_create()
        self._recorded = False

    def __del__(self) -> None:
        handle = getattr(self, "_handle", None)
        if handle:
            self._lib.notifier_destroy(handle)
            self._handle = 0

    def record(self, stream: Stream | None = None) -> None:
        self._lib.notifier_place(self._handle)
        self._recorded = True

    def wait(self, stream: Stream | None = None) -> None:
        # One queue: work placed before the notifier is already ordered before later work.
        pass

    def query(self) -> bool:
        return not self._recorded or self._lib.notifier_query(self._handle)

    def synchronize(self) -> None:
        if self._recorded:
            self._lib.notifier_wait(self._handle)

    def _check_timing(self, end: Event, what: str) -> None:
        # torch_mlu's rule (MLUEvent::elapsed_time / hardware_time), not CUDA's: both notifiers placed, whatever
        # enable_timing says; the lab's own benchmark test times events made with the defaults.
        if not (self._recorded and end._recorded):
            raise RuntimeError(f"Both notifiers must be placed before calculating {what}.")
        end.synchronize()

    def elapsed_time(self, end_event: Event) -> float:
        """Modelled milliseconds between this event and `end_event`."""
        self._check_timing(end_event, "elapsed time")
        return float(self._lib.notifier_elapsed_ms(self._handle, end_event._handle))

    def hardware_time(self, end_event: Event) -> float:
        """Modelled microseconds between this event and `end_event`."""
        self._check_timing(end_event, "hardware time")
        return float(self._lib.notifier_duration_us(self._handle, end_event._handle))

    def __repr__(self) -> str:
        return f"<torch.mlu.Event (bang_emu notifier, modelled time) recorded={self._recorded}>"
