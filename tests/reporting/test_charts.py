"""Chart geometry: what a reader infers from the picture must match the numbers."""

from __future__ import annotations

import math

import pytest

from grader.reporting import charts
from grader.reporting.devices import DEVICE_PEAKS, device_peaks
from grader.reporting.render import assignment_operator

from . import samples


def test_bar_ends_left_of_the_threshold_exactly_when_fast_enough():
    for s in samples.matmul_stages():
        c = charts.stage_bar_chart(s)
        threshold = next(m for m in c.markers if m.kind == "threshold")
        assert (c.bar_x <= threshold.x) == c.fast_enough == (s.timing.median_us <= s.threshold_us)
    slow = samples.slow_sigmoid().stages[0]
    c = charts.stage_bar_chart(slow)
    assert not c.fast_enough and c.bar_x > next(m.x for m in c.markers if m.kind == "threshold")


def test_log_axis_when_times_span_orders_of_magnitude():
    slow = samples.slow_sigmoid().stages[0]
    slow.timing.median_us = slow.timing.min_us = slow.timing.max_us = 2.0e6
    c = charts.stage_bar_chart(slow)
    assert c.log_scale
    assert all(c.x0 <= t.x <= c.x1 + 1e-6 for t in c.ticks)
    assert c.x0 <= c.bar_x <= c.x1


def test_untimed_stage_has_no_bar_chart():
    assert charts.stage_bar_chart(samples.failing_matmul().stages[3]) is None


def test_matmul_workload_is_2mnk_and_minimum_traffic():
    result = samples.passing_matmul()
    operator = assignment_operator(result)
    assert operator == charts.Operator("matmul", ("a", "b"))  # the document's facts, not a name match
    s = result.stages[0]  # perf shape named as the lab programs name it (left, right): matched by position
    flops, nbytes = charts.stage_workload(s, operator)
    assert flops == 2 * 128 * 256 * 128
    assert nbytes == 4 * (128 * 256 + 256 * 128 + 128 * 128)
    assert charts.stage_workload(s, None) is None
    assert charts.stage_workload(s, charts.Operator("sigmoid", ("x",))) is None  # two inputs for a one-input op


def test_the_roofs_follow_the_assignments_operator_not_the_stage_names():
    result = samples.passing_matmul()
    for stage in result.stages:  # names that say nothing about the operator
        stage.name, stage.entry = stage.name.replace("matmul", "op"), "op"
        stage.timing.achieved_gflops = stage.timing.achieved_gbps = None  # rates from the spec's work
    peaks = device_peaks(result)
    rf = charts.roofline(result.stages, result.cases, peaks, assignment_operator(result))
    assert {r.kind for r in rf.roofs} == {"memory", "tensor"} and len(rf.points) == 6
    unknown = charts.roofline(result.stages, result.cases, peaks, None)
    assert unknown is None  # no rates recorded and no operator to derive them from
    result.assignment = "not-on-this-machine"  # the operator is the document's: its spec need not be here
    assert assignment_operator(result) == charts.Operator("matmul", ("a", "b"))
    result.assignment_facts = None  # a document from before it carried the assignment
    assert assignment_operator(result) is None


def test_roofline_points_stay_under_the_roofs():
    result = samples.passing_matmul()
    peaks = device_peaks(result)
    rf = charts.roofline(result.stages, result.cases, peaks, assignment_operator(result))
    assert len(rf.points) == 6
    for p in rf.points:
        attainable = min(peaks.tensor_gflops, peaks.gdram_gbps * p.intensity)
        assert p.gflops <= attainable * 1.001, p
    # numbers stay readable: no two markers on top of each other
    for a in rf.points:
        for b in rf.points:
            if a is not b:
                assert math.hypot(a.x - b.x, a.y - b.y) >= 18
    assert {r.kind for r in rf.roofs} == {"memory", "tensor"}  # matmul runs on the tensor unit
    assert all(0 < p.of_roof <= 1.001 for p in rf.points)
    sigmoid = samples.slow_sigmoid()
    rf = charts.roofline(sigmoid.stages, sigmoid.cases, peaks, assignment_operator(sigmoid))
    assert {r.kind for r in rf.roofs} == {"memory", "vector"}
    assert rf.points[0].of_roof == pytest.approx(62.4 / 307.2, rel=0.01)  # memory-bound: GB/s over peak GB/s


def test_roofline_uses_the_results_own_peaks_first():
    result = samples.passing_matmul()
    assert device_peaks(result) is DEVICE_PEAKS["mlu370-x8"]
    result.device_peaks = DEVICE_PEAKS["mlu270"]
    assert device_peaks(result).gdram_gbps == 102.4
    result.device_profile, result.device_peaks = "unknown-card", None
    assert charts.roofline(result.stages, result.cases, device_peaks(result)) is None


def test_mlu370_x8_peaks_follow_the_published_figures():
    p = DEVICE_PEAKS["mlu370-x8"]
    assert p.gdram_gbps == 307.2
    assert p.tensor_gflops == pytest.approx(2 * 384 * 16 * 1.3)  # the published top clock: the floor's peaks
    assert "published" in p.source


def test_time_split_segments_tile_the_bar():
    segs = charts.time_split(samples.matmul_stages()[3].trace)
    assert [s.name for s in segs] == ["scalar", "tensor", "io", "wait"]
    assert math.isclose(sum(s.w for s in segs), 100.0)
    assert math.isclose(segs[-1].x + segs[-1].w, 100.0)


def test_memory_use_and_transfers():
    trace = samples.matmul_stages()[2].trace
    mem = {m.name: m for m in charts.memory_use(trace)}
    assert mem["nram"].fraction == 196608 / 786432
    moved = charts.transfers(trace)
    assert moved[0].fraction_of_max == 1.0 and moved[-1].direction == "NRAM2GDRAM"


def test_stage_bars_show_the_previous_stages_reference_and_the_roofline_floor():
    stages = samples.matmul_stages()
    nram, vector = stages[1], stages[2]
    c = charts.stage_bar_chart(vector, nram, 2)
    by_kind = {m.kind: m for m in c.markers}
    assert set(by_kind) == {"threshold", "reference", "previous", "floor"}
    assert by_kind["previous"].us == nram.reference_us and by_kind["previous"].stage == 2
    assert by_kind["floor"].us == vector.timing.floor_us > 0
    # positions follow the times on the axis: floor < you < previous stage's reference
    assert by_kind["floor"].x < c.bar_x < by_kind["previous"].x
    xs = sorted(c.markers, key=lambda m: m.x)
    assert [m.us for m in xs] == sorted(m.us for m in c.markers)
    # one label row each, inside the picture: targets above the track, neighbours below the tick labels
    rows = {k: c.label_y(m) for k, m in by_kind.items()}
    assert len(set(rows.values())) == 4 and all(12 <= y <= c.height for y in rows.values())
    assert rows["threshold"] < c.track_y and rows["previous"] < rows["threshold"]
    assert rows["floor"] > rows["reference"] > c.track_y + c.track_h + 20  # below the tick labels
    # the first stage has no stage before it; a stage without a floor recorded shows none
    first = charts.stage_bar_chart(stages[0])
    assert {m.kind for m in first.markers} == {"threshold", "reference", "floor"}
    vector.timing.floor_us = None
    assert "floor" not in {m.kind for m in charts.stage_bar_chart(vector, nram, 2).markers}
