"""Lab programs scored as extensions are (grader/orchestration/programs.py): one case and one stage per program,
the base's points rule, the base's calibrated thresholds for the backend and device carried to the lab's dims.
Host-side only: the judged program is built here as the capture reading leaves it."""

from __future__ import annotations

from pathlib import Path

import pytest

from grader.drivers.calibrate import calibrated_assignment
from grader.orchestration.programs import JudgedProgram, program_stage_result
from grader.programs.spec import load_programs
from grader.results import CaseResult, TraceSummary, Verdict
from grader.scoring import StageThreshold, at_shape, load_thresholds
from grader.scoring.thresholds import write_thresholds

SPEC, BASE = load_programs("matmul_programs")
SCORED = SPEC.scored_as(BASE)
DEVICE = "mlu370-x8"


def _stage(name: str):  # noqa: ANN202
    return next(s for s in SPEC.stages if s.stage == name)


def _judged(name: str, time_us: float, dims: dict[str, int] | None = None, passed: bool = True,
            builtins: dict[str, int] | None = None, cores: int = 1) -> JudgedProgram:
    stage = _stage(name)
    case = CaseResult(name=f"{stage.prefix}x", group=name, entry=SPEC.kernel, shapes={}, dtype="float32",
                      verdict=Verdict.PASSED if passed else Verdict.WRONG_ANSWER, passed=passed)
    trace = TraceSummary(kernel=SPEC.kernel, device_profile=DEVICE, modelled_time_us=time_us, cores_used=cores,
                         builtin_counts=builtins or {}, onchip_peak_bytes={"nram": 4096, "sram": 4096},
                         func_type="UNION1")
    return JudgedProgram(case, [time_us], trace if passed else None, [dict(dims or stage.dims)])


def test_the_programs_points_are_a_group_and_a_stage_each():
    assert SCORED.max_score == 60 == len(SPEC.stages) * (SPEC.correct_points + SPEC.speed_points)
    for stage in SPEC.stages:
        group = next(g for g in SCORED.groups if g.name == stage.stage)
        assert group.points == SPEC.correct_points and group.scoring == "all_or_nothing"
        scored = SCORED.stage(stage.stage)
        assert scored.points == SPEC.speed_points and scored.groups == [stage.stage]
        assert dict(scored.perf.dims) == stage.dims
        assert scored.requirements == BASE.stage(stage.stage).requirements


def test_thresholds_are_the_base_calibration_carried_to_the_lab_dims():
    table = load_thresholds(BASE, "emu", DEVICE)
    assert table is not None
    for stage in SPEC.stages:
        base = table.stages[stage.stage]
        carried = at_shape(SCORED, base, stage.dims)
        ratio = stage.dims["M"] / base.perf_dims["M"]  # K and N are the base's: the work scales with the rows
        assert carried.threshold_us == pytest.approx(base.threshold_us * ratio, rel=1e-12)
        assert carried.perf_dims == stage.dims
    # 04: x32 of the 16384-row calibration (programs.toml held 7923.408 by hand before the reference kernels
    # arranged the right matrix in WRAM's line order, 0.77 us more at the calibration's shape)
    assert at_shape(SCORED, table.stages["multicore"], _stage("multicore").dims).threshold_us == \
        pytest.approx(32 * 248.378)


def test_a_program_under_the_threshold_reaches_its_stage():
    table = load_thresholds(BASE, "emu", DEVICE)
    stage = program_stage_result(SPEC, SCORED, _stage("vector"), "03_v", _judged(
        "vector", 50.0, builtins={"__bang_matmul": 1}), table, DEVICE)
    assert stage.verdict == Verdict.PASSED and stage.points == SPEC.speed_points, stage.message
    assert stage.threshold_us == table.stages["vector"].threshold_us and stage.timing.floor_us is not None
    assert stage.perf_shape == {"a": [128, 256], "b": [256, 128]} and stage.title.startswith("03_v.mlu: ")
    slow = program_stage_result(SPEC, SCORED, _stage("vector"), "03_v", _judged(
        "vector", 90.0, builtins={"__bang_matmul": 1}), table, DEVICE)
    assert slow.verdict == Verdict.TOO_SLOW and slow.points == 0 and "threshold" in slow.message


def test_the_base_requirements_and_the_lab_dims_gate_the_speed_points():
    table = load_thresholds(BASE, "emu", DEVICE)
    no_matmul = program_stage_result(SPEC, SCORED, _stage("vector"), "03_v", _judged("vector", 50.0), table, DEVICE)
    assert no_matmul.verdict == Verdict.TOO_SLOW and no_matmul.points == 0
    assert [r.name for r in no_matmul.requirements if not r.passed] == ["uses_bang_matmul"]
    elsewhere = program_stage_result(SPEC, SCORED, _stage("scalar_nram"), "02_s", _judged(
        "scalar_nram", 1000.0, dims={"M": 128, "K": 256, "N": 256}), table, DEVICE)
    assert elsewhere.verdict == Verdict.TOO_SLOW and elsewhere.points == 0 and elsewhere.correct
    assert [r.name for r in elsewhere.requirements if not r.passed] == ["lab_dims"]
    assert "M=128, K=256, N=256" in elsewhere.message
    twice = _judged("scalar_nram", 1000.0)  # the lab's shape and another one: the threshold is the lab shape's
    twice.dims.append({"M": 64, "K": 256, "N": 128})
    twice_stage = program_stage_result(SPEC, SCORED, _stage("scalar_nram"), "02_s", twice, table, DEVICE)
    assert twice_stage.verdict == Verdict.TOO_SLOW and twice_stage.points == 0
    wrong = program_stage_result(SPEC, SCORED, _stage("vector"), "03_v", _judged("vector", 50.0, passed=False),
                                 table, DEVICE)
    assert wrong.verdict == Verdict.WRONG_ANSWER and wrong.points == 0 and not wrong.correct


def test_a_device_is_covered_by_its_own_calibration(tmp_path: Path):
    """No table for the device: speed not graded (the extensions' rule); `grade calibrate` writing one for the
    device is what grades it, with the programs' thresholds carried from it."""
    judged = _judged("multicore", 6000.0, builtins={"__bang_matmul": 4096}, cores=16)
    unknown = program_stage_result(SPEC, SCORED, _stage("multicore"), "04_m", judged,
                                   load_thresholds(BASE, "emu", "mlu290", tmp_path), "mlu290")
    assert unknown.verdict == Verdict.PASSED and unknown.points == 0 and "grade calibrate" in unknown.message
    dims = dict(BASE.stage("multicore").perf.dims)
    write_thresholds(BASE, "emu", "mlu290", {"multicore": StageThreshold(150.0, 200.0, dims)}, "modelled",
                     root=tmp_path)
    table = load_thresholds(BASE, "emu", "mlu290", tmp_path)
    calibrated = program_stage_result(SPEC, SCORED, _stage("multicore"), "04_m", judged, table, "mlu290")
    assert calibrated.threshold_us == pytest.approx(200.0 * 32)
    assert calibrated.verdict == Verdict.PASSED and calibrated.points == SPEC.speed_points, calibrated.message


def test_calibrating_the_programs_calibrates_their_base():
    lines: list[str] = []
    assert calibrated_assignment("matmul_programs", lines.append) == "matmul" and "matmul's thresholds" in lines[0]
    assert calibrated_assignment("sigmoid", lines.append) == "sigmoid" and len(lines) == 1
