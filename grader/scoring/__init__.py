"""Scoring: points per case group and stage, thresholds per backend/device, timing summary, roofline floor."""

from grader.scoring.points import StageDecision, decide_stage, group_scores
from grader.scoring.thresholds import (
    StageThreshold,
    ThresholdTable,
    at_shape,
    compute_thresholds,
    load_thresholds,
    write_thresholds,
)
from grader.scoring.timing import summarise

__all__ = ["StageDecision", "StageThreshold", "ThresholdTable", "at_shape", "compute_thresholds", "decide_stage", "group_scores",
           "load_thresholds", "summarise", "write_thresholds"]
