"""Summarises raw per-call times into a Timing (median and spread), bounded by the roofline floor."""

from __future__ import annotations

from typing import Literal

import numpy as np

from grader.results import Timing
from grader.scoring.roofline import achieved, floor_us
from grader.spec.references import Work

# mlu: stop repeating once the interquartile spread is this small relative to the median, or at the budget.
TARGET_SPREAD = 0.02
MAX_ROUNDS = 5


def summarise(samples_us: list[float], source: Literal["modelled", "hardware", "host_clock"], work: Work,
              dtype: str, device: str) -> Timing:
    values = np.asarray(samples_us, dtype=np.float64)
    median = float(np.median(values))
    p25, p75 = np.percentile(values, [25, 75])
    spread = float((p75 - p25) / median) if median > 0 else 0.0
    floor = floor_us(work, dtype, device)
    gbps, gflops = achieved(work, median)
    return Timing(source=source, median_us=median, min_us=float(values.min()), max_us=float(values.max()),
                  spread=spread, repeats=int(values.size), floor_us=floor,
                  below_floor=floor is not None and median < floor, achieved_gbps=gbps, achieved_gflops=gflops)


def settled(samples_us: list[float]) -> bool:
    if len(samples_us) < 5:
        return False
    values = np.asarray(samples_us)
    p25, p75 = np.percentile(values, [25, 75])
    return float((p75 - p25) / np.median(values)) <= TARGET_SPREAD
