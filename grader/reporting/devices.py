"""Device peak figures for the report's roofline chart, when the results document does not carry its own.

The roofs are the device's figures in the one device table (sandbox/bang_emu/devices.json, the ones the cost
model runs with: for the MLU370-X8 the published rates at the clock the course lab ran at, 1.0 GHz). The
report always shows `source`, so a reader knows a roof is a paper figure and not a measurement.
"""

from __future__ import annotations

from bang_emu import devices

from grader.results import DevicePeaks, GradeResult


def _table_peaks(device: str, figures: dict[str, float]) -> DevicePeaks:
    source = devices.published(device).get("source", "")
    return DevicePeaks.from_figures(figures, f"devices.json at {figures['clock_mhz'] / 1e3:.1f} GHz; {source}")


DEVICE_PEAKS: dict[str, DevicePeaks] = {name: _table_peaks(name, f) for name, f in devices.load().items()}


def device_peaks(result: GradeResult) -> DevicePeaks | None:
    """The peaks to draw: the ones the grading run recorded, else the device table's, else none."""
    if result.device_peaks is not None:
        return result.device_peaks
    return DEVICE_PEAKS.get(result.device_profile.lower())
