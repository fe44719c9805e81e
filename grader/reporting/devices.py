"""Device peak figures for the report's roofline chart, when the results document does not carry its own.

A result records the peaks it was scored with (GradeResult.device_peaks, filled by the pipeline from
grader.scoring.roofline); a document from before that carries none, and gets the same peaks here,
DevicePeaks.for_device: built from the one device table (sandbox/bang_emu/devices.json). The report always
shows `source`, so a reader knows a roof is a paper figure and not a measurement.
"""

from __future__ import annotations

from bang_emu import devices

from grader.results import DevicePeaks, GradeResult

DEVICE_PEAKS: dict[str, DevicePeaks] = {
    name: peaks for name in devices.names() if (peaks := DevicePeaks.for_device(name)) is not None}


def device_peaks(result: GradeResult) -> DevicePeaks | None:
    """The peaks to draw: the ones the grading run recorded, else the device table's, else none."""
    if result.device_peaks is not None:
        return result.device_peaks
    device = result.device_profile.lower()
    return DEVICE_PEAKS.get(device) or DevicePeaks.for_device(device)
