"""Scoring: group points, the stage gate (correct AND requirements AND under threshold AND above the floor),
thresholds from reference times, the roofline floor and timing summaries."""

from __future__ import annotations

from pathlib import Path

import pytest

from grader.results import CaseResult, RequirementResult, Timing, Verdict
from grader.scoring import (
    compute_thresholds,
    decide_stage,
    group_scores,
    load_thresholds,
    summarise,
    write_thresholds,
)
from grader.scoring.roofline import floor_us
from grader.scoring.thresholds import StageThreshold
from grader.spec import load_assignment
from grader.spec.references import REFERENCES

MATMUL = load_assignment("matmul")


def _case(group: str, passed: bool, verdict: Verdict | None = None, entry: str = "matmul") -> CaseResult:
    return CaseResult(name=f"{group}-{passed}", group=group, entry=entry, shapes={}, dtype="float32", passed=passed,
                      verdict=verdict or (Verdict.PASSED if passed else Verdict.WRONG_ANSWER))


def _timing(us: float, floor: float | None = 1.0) -> Timing:
    return Timing(source="modelled", median_us=us, min_us=us, max_us=us, spread=0.0, repeats=1, floor_us=floor,
                  below_floor=floor is not None and us < floor)


def test_group_points_are_proportional_by_default():
    cases = [_case("tail", True), _case("tail", True), _case("tail", False), _case("tiny", True)]
    scores = {g.name: g for g in group_scores(MATMUL, cases)}
    assert scores["tail"].points == pytest.approx(15 * 2 / 3)
    assert (scores["tail"].passed_cases, scores["tail"].total_cases) == (2, 3)
    assert scores["tiny"].points == 5
    assert scores["large"].points == 0 and scores["large"].total_cases == 0


def test_all_or_nothing_groups(tmp_path: Path):
    spec = MATMUL.model_copy(update={"groups": [g.model_copy(update={"scoring": "all_or_nothing"})
                                                for g in MATMUL.groups]})
    scores = {g.name: g for g in group_scores(spec, [_case("tail", True), _case("tail", False)])}
    assert scores["tail"].points == 0


THRESHOLD = StageThreshold(reference_us=100.0, threshold_us=150.0, perf_dims={})
STAGE = MATMUL.stage("vector")


def test_stage_points_need_correctness_first():
    decision = decide_stage(STAGE, [_case("tail", False, Verdict.RUNTIME_ERROR)], [], _timing(10), THRESHOLD)
    assert decision.points == 0 and decision.verdict == Verdict.RUNTIME_ERROR
    assert "not correct yet" in decision.message


def test_stage_points_need_every_requirement():
    req = RequirementResult(name="uses_bang_matmul", description="must call __bang_matmul", passed=False,
                            detail="__bang_matmul called 0 time(s) per call")
    decision = decide_stage(STAGE, [_case("tail", True)], [req], _timing(10), THRESHOLD)
    assert decision.points == 0 and decision.verdict == Verdict.TOO_SLOW
    assert "must call __bang_matmul" in decision.message and "0 time(s)" in decision.message


def test_stage_points_under_the_threshold_only():
    assert decide_stage(STAGE, [_case("tail", True)], [], _timing(149), THRESHOLD).points == STAGE.points
    slow = decide_stage(STAGE, [_case("tail", True)], [], _timing(151), THRESHOLD)
    assert slow.points == 0 and slow.verdict == Verdict.TOO_SLOW and "1.01x" in slow.message


def test_a_time_under_the_roofline_floor_is_flagged_not_rewarded():
    decision = decide_stage(STAGE, [_case("tail", True)], [], _timing(5, floor=20), THRESHOLD)
    assert decision.points == 0 and "below the roofline floor" in decision.message


def test_missing_thresholds_say_how_to_calibrate():
    decision = decide_stage(STAGE, [_case("tail", True)], [], _timing(5), None)
    assert decision.points == 0 and "grade calibrate" in decision.message


def test_thresholds_apply_slack_but_stay_below_the_previous_stage_on_the_same_shape():
    refs = {"scalar_gdram": 1000.0, "scalar_nram": 100.0, "vector": 90.0, "multicore": 50.0, "pipeline": 45.0}
    table = compute_thresholds(MATMUL, refs)
    assert table["scalar_gdram"].threshold_us == pytest.approx(2000.0)  # slack 2.0, nothing before it
    assert table["scalar_nram"].threshold_us == pytest.approx(200.0)  # slack 2.0 is below the geomean 316
    assert table["vector"].threshold_us == pytest.approx((100 * 90) ** 0.5)  # geomean 94.9 beats 1.5x = 135
    assert table["multicore"].threshold_us == pytest.approx(75.0)  # different perf shape than vector: slack only
    assert table["pipeline"].threshold_us == pytest.approx((50 * 45) ** 0.5)
    assert "sram_union" not in table
    for t in table.values():
        assert t.threshold_us >= t.reference_us


def test_a_stage_that_buys_almost_no_speed_keeps_a_five_percent_margin():
    # sigmoid on the emulator: the pipeline reference is only 0.2% faster than the multi-core one.
    spec = load_assignment("sigmoid")
    table = compute_thresholds(spec, {"vector": 203.8, "multicore": 159.25, "pipeline": 158.97})
    assert table["pipeline"].threshold_us == pytest.approx(158.97 * 1.05)
    assert table["multicore"].threshold_us == pytest.approx(159.25 * 1.5)  # other shape than vector: slack


def test_thresholds_round_trip_through_toml(tmp_path: Path):
    table = compute_thresholds(MATMUL, {"vector": 50.0, "multicore": 4563.25})
    path = write_thresholds(MATMUL, "emu", "mlu370-x8", table, "modelled", root=tmp_path)
    assert path == tmp_path / "matmul" / "thresholds" / "emu-mlu370-x8.toml"
    loaded = load_thresholds(MATMUL, "emu", "mlu370-x8", root=tmp_path)
    assert loaded is not None and loaded.stages == table
    assert load_thresholds(MATMUL, "emu", "mlu270", root=tmp_path) is None


def test_roofline_floor_is_the_larger_of_io_and_compute():
    work = REFERENCES["matmul"].work({"a": (16384, 256), "b": (256, 128)}, 4)
    floor = floor_us(work, "float32", "mlu370-x8")
    io_us = (16384 * 256 + 256 * 128 + 16384 * 128) * 4 / 307.2e3
    compute_us = 2 * 16384 * 256 * 128 / (16 * 1.3 * 768 * 1e3)
    assert floor == pytest.approx(max(io_us, compute_us))
    # The lab's real MLU370-X8 times at 524288x256x128 (3.8 ms) sit well above the floor of that shape.
    lab = REFERENCES["matmul"].work({"a": (524288, 256), "b": (256, 128)}, 4)
    assert floor_us(lab, "float32", "mlu370-x8") < 3824.0
    assert floor_us(work, "float32", "unknown-device") is None


def test_timing_summary_uses_median_and_interquartile_spread():
    work = REFERENCES["sigmoid"].work({"x": (1 << 20,)}, 4)
    timing = summarise([100.0, 110.0, 90.0, 1000.0, 105.0], "hardware", work, "float32", "mlu370-x8")
    assert timing.median_us == 105.0 and timing.repeats == 5 and timing.max_us == 1000.0
    assert timing.spread == pytest.approx((110 - 100) / 105)
    assert timing.floor_us and not timing.below_floor and timing.achieved_gbps
    single = summarise([42.0], "modelled", work, "float32", "mlu370-x8")
    assert (single.spread, single.repeats) == (0.0, 1)
