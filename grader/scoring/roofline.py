"""Roofline floor: the least time any correct kernel needs (bytes over peak bandwidth, flops over peak).

A measured time under the floor is physically impossible on that device, so it is flagged and never
rewarded (a forged or cached result, or a cost-model gap worth reporting). The peaks come from the one device
table (sandbox/bang_emu/devices.json, via bang_emu.devices, standard library only): per figure the higher of
the published card's and the cost model's (`devices.peaks`), so the floor is a lower bound for both, never a
hurdle for honest code (tests/emu/test_roofline_floor.py checks it against the model).
"""

from __future__ import annotations

from functools import cache

from grader.results import DevicePeaks
from grader.spec.references import Work


@cache
def device_peaks(device: str) -> DevicePeaks | None:
    """The whole card's peaks at its top clock (DevicePeaks.for_device); None for a device the table does not know."""
    return DevicePeaks.for_device(device)


def floor_us(work: Work, dtype: str, device: str) -> float | None:
    peaks = device_peaks(device)
    if peaks is None:
        return None
    io_us = work.bytes_moved / (peaks.gdram_gbps * 1e3)
    compute = peaks.unit_gflops("tensor" if work.unit == "tensor" else "vector", dtype)
    return max(io_us, work.flops / (compute * 1e3) if compute else 0.0)


def achieved(work: Work, time_us: float) -> tuple[float | None, float | None]:
    """(GB/s, GFLOP/s) a time corresponds to."""
    if time_us <= 0:
        return None, None
    return work.bytes_moved / (time_us * 1e3), work.flops / (time_us * 1e3)
