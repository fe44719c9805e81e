"""Roofline floor: the least time any correct kernel needs (bytes over peak bandwidth, flops over peak).

A measured time under the floor is physically impossible on that device, so it is flagged and never
rewarded (a forged or cached result, or a cost-model gap worth reporting). Peaks are the published
figures (calibration.md) rounded *up* -- the floor must be a lower bound, never a hurdle for honest code.
"""

from __future__ import annotations

from dataclasses import dataclass

from grader.spec.references import Work


@dataclass(frozen=True)
class DevicePeaks:
    gdram_gbps: float  # whole card
    tensor_gops: dict[str, float]  # matmul unit, by dtype, whole card at the top clock
    vector_gops: dict[str, float]  # vector unit, elementwise ops


def _card(cores: int, ghz: float, gbps: float, tensor_fp32: int, tensor_fp16: int) -> DevicePeaks:
    # Vector unit: 128 B/cycle/core (DEVGUIDE), i.e. 32 fp32 or 64 fp16 lanes.
    return DevicePeaks(
        gdram_gbps=gbps,
        tensor_gops={"float32": cores * ghz * tensor_fp32, "float16": cores * ghz * tensor_fp16},
        vector_gops={"float32": cores * ghz * 32, "float16": cores * ghz * 64},
    )


# MLU370: fp32xfp32 2x384, fp16xfp16 2x1536 ops/cycle/core; X8 16 cores up to 1.3 GHz, 307.2 GB/s.
PEAKS: dict[str, DevicePeaks] = {
    "mlu370-x8": _card(16, 1.3, 307.2, 768, 3072),
    "mlu370-x4": _card(8, 1.0, 307.2, 768, 3072),
    "mlu370-m8": _card(16, 1.3, 307.2, 768, 3072),
    # MLU270 has no fp32 tensor path; its int16 peak (2x2048) bounds anything a kernel could do there.
    "mlu270": _card(16, 1.0, 102.4, 4096, 4096),
}


def floor_us(work: Work, dtype: str, device: str) -> float | None:
    peaks = PEAKS.get(device)
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
