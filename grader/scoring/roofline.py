"""Roofline floor: the least time any correct kernel needs (bytes over peak bandwidth, flops over peak).

A measured time under the floor is physically impossible on that device, so it is flagged and never
rewarded (a forged or cached result, or a cost-model gap worth reporting). The peaks come from the one device
table (sandbox/bang_emu/devices.json, via bang_emu.devices, standard library only): per figure the higher of
the published card's and the cost model's, so the floor is a lower bound for both, never a hurdle for honest
code (tests/test_roofline_devices.py checks it against the model).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from bang_emu import devices

from grader.spec.references import Work


@dataclass(frozen=True)
class DevicePeaks:
    gdram_gbps: float  # whole card
    tensor_gops: dict[str, float]  # matmul unit, by dtype, whole card at the top clock
    vector_gops: dict[str, float]  # vector unit, elementwise ops


@cache
def device_peaks(device: str) -> DevicePeaks | None:
    """The whole card's peaks at its top clock; None for a device the table does not know."""
    figures = devices.peaks(device)
    if figures is None:
        return None
    scale = figures["cores"] * figures["clock_mhz"] / 1e3  # giga-cycles per second over the card
    lanes = figures["vector_bytes_per_cycle"]  # vector unit: one element per lane and cycle
    return DevicePeaks(
        gdram_gbps=figures["gdram_gbps"],
        tensor_gops={"float32": scale * figures["tensor_ops_per_cycle_fp32"],
                     "float16": scale * figures["tensor_ops_per_cycle_fp16"]},
        vector_gops={"float32": scale * lanes / 4, "float16": scale * lanes / 2},
    )


def floor_us(work: Work, dtype: str, device: str) -> float | None:
    peaks = device_peaks(device)
    if peaks is None:
        return None
    io_us = work.bytes_moved / (peaks.gdram_gbps * 1e3)
    table = peaks.tensor_gops if work.unit == "tensor" else peaks.vector_gops
    compute_us = work.flops / (table.get(dtype, max(table.values())) * 1e3)
    return max(io_us, compute_us)


def achieved(work: Work, time_us: float) -> tuple[float | None, float | None]:
    """(GB/s, GFLOP/s) a time corresponds to."""
    if time_us <= 0:
        return None, None
    return work.bytes_moved / (time_us * 1e3), work.flops / (time_us * 1e3)
