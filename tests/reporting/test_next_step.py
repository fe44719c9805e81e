"""The "what to do next" rules: each rung of the stage ladder is recognised from its emulator trace."""

from __future__ import annotations

from grader.reporting.next_step import next_step_for_stage, overall_next_step
from grader.results import EmuDiagnostic, SourceLocation
from grader.spec import load_assignment

from . import samples


def stage(i):
    return samples.matmul_stages()[i]


def test_scalar_gdram_stage_is_told_to_stage_in_nram():
    step = next_step_for_stage(stage(0))
    assert step.rule == "stage_in_nram"
    assert "__memcpy" in step.action and "100%" in step.why


def test_scalar_nram_stage_is_told_to_use_the_tensor_builtin():
    step = next_step_for_stage(stage(1), facts=load_assignment("matmul").facts())  # the builtin comes from its [feedback]
    assert step.rule == "use_builtin"
    assert "__bang_matmul" in step.action and "__bang_matmul" in step.snippet


def test_scalar_nram_sigmoid_is_told_to_use_the_vector_builtin():
    s = stage(1)
    s.name, s.entry, s.trace.kernel = "sigmoid_nram", "sigmoid", "sigmoid_kernel"
    assert "__bang_active_sigmoid" in next_step_for_stage(s, facts=load_assignment("sigmoid").facts()).action


def test_single_core_vector_stage_is_told_to_split_over_tasks():
    step = next_step_for_stage(stage(2), device_cores=16)
    assert step.rule == "split_over_tasks"
    assert "taskDim" in step.action and "16 cores" in step.why


def test_io_bound_synchronous_stage_is_told_to_double_buffer():
    step = next_step_for_stage(stage(3))
    assert step.rule == "double_buffer"
    assert "__memcpy_async" in step.action and "%" in step.why


def test_async_block_matmul_is_told_to_stage_in_sram():
    step = next_step_for_stage(stage(4))
    assert step.rule == "sram_staging"
    assert "UNION1" in step.action and "128 tasks" in step.why


def test_io_bound_with_small_tiles_is_told_to_grow_tiles():
    s = samples.slow_sigmoid().stages[0]
    s.trace.dim, s.trace.cores_used = (16, 1, 1), 16
    s.trace.builtin_counts["__memcpy_async"] = 512
    s.trace.onchip_peak_bytes["nram"] = 65536
    assert next_step_for_stage(s).rule == "bigger_tiles"


def test_emulator_error_in_the_trace_comes_before_speed():
    s = stage(0)
    s.trace.diagnostics = [
        EmuDiagnostic(
            kind="async_hazard",
            message="read of pending buffer",
            location=SourceLocation(file="mlu/k.mlu", line=40),
        )
    ]
    step = next_step_for_stage(s)
    assert step.rule == "fix_async_hazard"
    assert step.location.line == 40


def test_no_trace_no_derivation():
    s = stage(0)
    s.trace = None
    assert next_step_for_stage(s) is None


def test_overall_step_for_a_slow_submission_targets_the_first_slow_stage():
    step = overall_next_step(samples.slow_sigmoid())
    assert step.rule == "split_over_tasks"
    assert step.stage == "sigmoid_vector"


def test_overall_step_for_a_wrong_stage_fixes_its_failure_first():
    step = overall_next_step(samples.failing_matmul())
    assert step.rule == "fix_tail_only"
    assert step.stage == "matmul_multicore"
    assert step.snippet and "n - start" in step.snippet


def test_overall_step_for_a_compile_error_points_at_the_line():
    step = overall_next_step(samples.compile_error())
    assert step.rule == "fix_compile_error"
    assert step.location.line == 12


def test_overall_step_for_a_runtime_error_fixes_the_diagnostic():
    step = overall_next_step(samples.runtime_error())
    assert step.rule == "fix_gdram_out_of_bounds"
    assert "Clamp" in step.action


def test_overall_step_for_a_timeout():
    assert overall_next_step(samples.timeout()).rule == "fix_timeout"


def test_full_marks_says_so():
    assert overall_next_step(samples.passing_matmul()).rule == "done"


def test_assignment_hint_is_used_when_no_trace_exists():
    result = samples.slow_sigmoid()
    result.stages[0].trace = None
    result.stages[0].next_step = "use 16 tasks"
    step = overall_next_step(result)
    assert step.rule == "grader" and step.action == "use 16 tasks"


def test_a_wrong_later_stage_comes_before_a_slow_earlier_one():
    result = samples.failing_matmul()
    result.stages[0].threshold_us = 1000.0  # stage 1 now too slow, stage 4 still wrong
    step = overall_next_step(result)
    assert step.stage == "matmul_multicore" and step.rule.startswith("fix_")


def test_stages_without_thresholds_are_not_called_slow():
    result = samples.passing_matmul()
    for stage in result.stages:
        stage.threshold_us, stage.points = None, 0.0
        stage.message = "speed not graded: no threshold for this backend/device"
    step = overall_next_step(result)
    assert step.rule == "speed_not_graded"
    assert "no threshold" in step.why


def test_same_shape_on_two_entries_is_told_apart():
    result = samples.failing_matmul()
    for case in result.cases:
        case.name = case.name.split("/")[1]  # the pipeline names cases by shape only
    finding = overall_next_step(result).finding
    assert finding.cases == ("matmul_multicore/127x256x128", "matmul_multicore/129x33x65")


def test_a_wrong_stage_is_fixed_by_its_first_finding_however_many_cases_the_others_cover():
    """diagnose() orders a wrong stage's findings (an emulator check before the wrong values it causes): a
    later finding on the same stage is not a separate candidate, even when it covers more failing cases."""
    from grader.reporting.hints import Finding, case_label

    result = samples.failing_matmul()
    for stage in result.stages:  # the wrong stages worth little, the failing groups much
        if not stage.correct:
            stage.points_possible = 1.0
    failing = [case_label(c) for c in result.cases if not c.passed]
    assert len(failing) >= 2
    first = Finding("gdram_out_of_bounds", "GDRAM write out of bounds", "seen", "clamp", cases=(failing[0],))
    wider = Finding("tail_only", "Only tails fail", "seen", "handle the remainder", cases=tuple(failing))
    step = overall_next_step(result, [first, wider])
    assert step.rule == "fix_gdram_out_of_bounds" and step.stage == "matmul_multicore"
