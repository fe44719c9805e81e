"""Device peak figures for the roofline, when the results document does not carry its own.

The figures are the published MLU370 parameters (memory bandwidth, fp32 tensor ops per cycle per core,
vector-unit width) at the clock the course lab ran at (1.0 GHz). The report always shows `source`, so a
reader knows a roof is a paper figure and not a measurement.
"""

from __future__ import annotations

from grader.results import DevicePeaks, GradeResult

_LAB_CLOCK_GHZ = 1.0
_TENSOR_OPS_PER_CYCLE = 2 * 384  # fp32 x fp32 __bang_matmul, per core
_VECTOR_FP32_LANES = 128 // 4  # 128 B/cycle vector unit


def _mlu370(cores: int, gbps: float, note: str) -> DevicePeaks:
    return DevicePeaks(
        gdram_gbps=gbps,
        tensor_gflops=_TENSOR_OPS_PER_CYCLE * cores * _LAB_CLOCK_GHZ,
        vector_gflops=_VECTOR_FP32_LANES * cores * _LAB_CLOCK_GHZ,
        clock_ghz=_LAB_CLOCK_GHZ,
        cores=cores,
        source=f"published MLU370 figures at {_LAB_CLOCK_GHZ:.1f} GHz{note}",
    )


DEVICE_PEAKS: dict[str, DevicePeaks] = {
    "mlu370-x8": _mlu370(16, 307.2, ""),
    # X4 and M8 share the MLU370 core; their core counts are not published per SKU, so the X8's are assumed.
    "mlu370-x4": _mlu370(16, 307.2, " (X8 core count assumed)"),
    "mlu370-m8": _mlu370(16, 307.2, " (X8 core count assumed)"),
    "mlu270": DevicePeaks(
        gdram_gbps=102.4,
        vector_gflops=_VECTOR_FP32_LANES * 16 * _LAB_CLOCK_GHZ,
        clock_ghz=_LAB_CLOCK_GHZ,
        cores=16,
        source="published MLU270 bandwidth; no fp32 tensor peak is published",
    ),
}


def device_peaks(result: GradeResult) -> DevicePeaks | None:
    """The peaks to draw: the ones the grading run recorded, else this module's table, else none."""
    if result.device_peaks is not None:
        return result.device_peaks
    return DEVICE_PEAKS.get(result.device_profile.lower())
