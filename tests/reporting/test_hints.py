"""Failure classification and advice: each known failure shape must be named by its own kind."""

from __future__ import annotations

from grader.reporting.hints import case_kind, compile_error_advice, diagnose, is_tail_case
from grader.results import (
    EmuDiagnostic,
    GradeResult,
    GroupScore,
    Mismatch,
    SourceExcerpt,
    SourceLocation,
    Verdict,
)

from . import samples


def kinds(result):
    return [f.kind for f in diagnose(result)]


def test_tail_only_failures_point_at_remainder_handling():
    found = kinds(samples.failing_matmul())
    assert found[0] == "tail_only"
    assert "unwritten_output" in found


def test_tail_only_is_not_claimed_when_an_aligned_case_fails_too():
    result = samples.failing_matmul()
    aligned = next(c for c in result.cases if c.group == "aligned" and c.entry == "matmul_multicore")
    aligned.passed, aligned.verdict = False, Verdict.WRONG_ANSWER
    aligned.mismatches = [Mismatch(index=[0, 0], expected=1.0, actual=7.0)]
    assert "tail_only" not in kinds(result)
    assert "wrong_values" in kinds(result)


def test_fp16_only_failures_point_at_the_fp16_sum_not_the_remainder():
    # Tail-shaped cases failing in fp16 only: the dtype is the pattern, not the shape.
    result = samples.failing_matmul()
    for case in result.cases:
        case.dtype = "float16" if not case.passed else "float32"
    findings = diagnose(result)
    assert findings[0].kind == "fp16_only" and "tail_only" not in kinds(result)
    assert "fp32" in findings[0].advice and "float32 cases pass" in findings[0].evidence


def test_fp16_only_is_not_claimed_when_an_fp32_case_fails_too():
    result = samples.failing_matmul()
    failing = [c for c in result.cases if not c.passed]
    for case in failing[1:]:
        case.dtype = "float16"
    assert "fp16_only" not in kinds(result)


def test_partly_unwritten_output_reports_the_fraction_and_task_offsets():
    finding = next(f for f in diagnose(samples.failing_matmul()) if f.kind == "unwritten_output")
    assert "11.8%" in finding.evidence
    assert "taskId" in finding.advice
    assert finding.cases == ("matmul_multicore/127x256x128", "matmul_multicore/129x33x65")


def test_fully_unwritten_output_says_copy_back():
    result = samples.failing_matmul()
    for case in result.cases:
        case.passed, case.verdict, case.unwritten_fraction = False, Verdict.WRONG_ANSWER, 1.0
    finding = next(f for f in diagnose(result) if f.kind == "unwritten_output")
    assert "NRAM2GDRAM" in finding.advice


def test_a_tiny_case_left_entirely_unwritten_is_still_a_remainder_problem():
    # n = 1 with 64-element lines: the whole output is the dropped remainder, but aligned cases do write
    result = samples.failing_matmul()
    tiny = next(c for c in result.cases if c.name == "matmul_multicore/127x256x128")
    tiny.unwritten_fraction = 1.0
    finding = next(f for f in diagnose(result) if f.kind == "unwritten_output")
    assert "NRAM2GDRAM" not in finding.advice and "taskId" in finding.advice


def test_nan_outputs_blame_uninitialised_nram():
    result = samples.failing_matmul()
    for case in result.cases:
        if not case.passed:
            case.unwritten_fraction = None
            case.nan_inf_mismatch = 12
            case.mismatches = [Mismatch(index=[3, 1], expected=0.5, actual=float("nan"))]
    finding = next(f for f in diagnose(result) if f.kind == "nan_output")
    assert "NRAM" in finding.advice and "24" in finding.evidence


def test_case_kinds_cover_zero_precision_and_wrong_values():
    case = samples.failing_matmul().cases[-2]
    case.unwritten_fraction = None
    case.mismatches = [Mismatch(index=[0], expected=2.0, actual=0.0)]
    assert case_kind(case) == "zero_output"
    case.mismatches = [Mismatch(index=[0], expected=2.0, actual=2.01)]
    assert case_kind(case) == "precision"
    case.mismatches = [Mismatch(index=[0], expected=2.0, actual=-9.0)]
    assert case_kind(case) == "wrong_values"
    case.passed = True
    assert case_kind(case) is None


def test_emulator_diagnostic_keeps_its_source_line_and_specific_advice():
    findings = diagnose(samples.runtime_error())
    oob = findings[0]
    assert oob.kind == "gdram_out_of_bounds"
    assert oob.where == "mlu/sigmoid.mlu:27"
    assert "min(chunk, n - offset)" in oob.advice


def test_each_known_diagnostic_kind_has_its_own_advice():
    result = samples.runtime_error()
    advice = {}
    for kind in ("async-hazard", "onchip-out-of-bounds", "barrier-deadlock", "gdram-out-of-bounds", "host-access"):
        diag = EmuDiagnostic(kind=kind, message="m", location=SourceLocation(file="mlu/k.mlu", line=3))
        result.cases[1].diagnostics = [diag]
        result.stages[0].trace.diagnostics = []
        result.cases[1].mismatches = []
        advice[kind] = next(f for f in diagnose(result) if f.kind == kind.replace("-", "_")).advice
    assert "__sync_io" in advice["async-hazard"]
    assert "tiles" in advice["onchip-out-of-bounds"]
    assert "0x80" in advice["barrier-deadlock"]
    assert "cnrtMemcpy" in advice["host-access"]
    assert len(set(advice.values())) == len(advice)


def test_unknown_diagnostic_kind_still_shows_the_emulator_message():
    result = samples.runtime_error()
    result.cases[1].diagnostics = [EmuDiagnostic(kind="strange_thing", message="odd value in register")]
    result.stages[0].trace.diagnostics = []
    finding = next(f for f in diagnose(result) if f.kind == "strange_thing")
    # the emulator's words ride along as its original output (labelled where shown), not in the grader's sentence
    assert finding.original == "strange_thing: odd value in register"
    assert "odd value" not in finding.evidence and "strange_thing" in finding.title


def test_compile_error_findings_come_from_the_compiler_messages():
    findings = diagnose(samples.compile_error())
    assert [f.kind for f in findings] == ["compile_error"]
    assert findings[0].where == "mlu/matmul.mlu:12"
    assert "__bang_matmull" in findings[0].evidence
    assert "spelling" in findings[0].advice


def test_compile_error_without_parsable_lines_shows_the_last_line():
    result = samples.compile_error()
    result.build.compiler_output = "something odd happened\nlinker gave up"
    findings = diagnose(result)
    assert findings[0].evidence == "linker gave up"


def test_compile_advice_rules():
    assert "<bang.h>" in compile_error_advice("'__bang_active_sigmod' was not declared in this scope")
    assert "Declare" in compile_error_advice("'per_task' was not declared in this scope")
    assert "argument" in compile_error_advice("no matching function for call to '__memcpy(float*, int)'")
    assert "extern" in compile_error_advice("undefined reference to `sigmoid_entry'")
    assert "first error" in compile_error_advice("some brand-new diagnostic")


def test_blocking_verdicts_have_a_finding():
    for verdict in (Verdict.TIMEOUT, Verdict.CRASH, Verdict.NOT_USING_KERNEL, Verdict.UNGRADABLE_LAYOUT):
        result = samples.timeout()
        result.verdict = verdict
        assert kinds(result)[0] == verdict.value


def test_passing_submission_has_no_findings():
    assert diagnose(samples.passing_matmul()) == []


def test_tail_cases_are_recognised_by_group_or_name():
    cases = samples.failing_matmul().cases
    assert {is_tail_case(c) for c in cases if c.group == "tail"} == {True}
    assert {is_tail_case(c) for c in cases if c.group == "aligned"} == {False}


def test_the_emulators_hyphenated_kinds_get_their_advice():
    result = samples.runtime_error()
    result.stages[0].trace.diagnostics = []
    for kind, phrase in [
        ("gdram-out-of-bounds", "min(chunk, n - offset)"),
        ("onchip-out-of-bounds", "tiles"),
        ("async-hazard", "__sync_io"),
        ("barrier-deadlock", "0x80"),
        ("wram-scalar-access", "__bang_matmul"),
        ("invalid-address", "device pointers"),
    ]:
        result.cases[1].diagnostics = [EmuDiagnostic(kind=kind, message="m")]
        finding = diagnose(result)[0]
        assert finding.kind == kind.replace("-", "_")
        assert phrase in finding.advice, kind
        assert finding.action and "See the emulator" not in finding.advice


def test_tail_cases_are_recognised_by_shape_when_the_group_does_not_say_so():
    case = samples.failing_matmul().cases[0]
    case.group, case.name = "tiny", "x1"
    case.shapes = {"x": [1]}
    assert is_tail_case(case)
    case.shapes = {"x": [4096]}
    assert not is_tail_case(case)


def test_real_gcc_output_unicode_quotes_suggestion_and_repeats():
    # g++ 12 as the grader sees it: typographic quotes, one error per template instantiation, host paths
    result = samples.compile_error()
    result.submission_path = "/work/subs/alice"
    error = (
        "/work/subs/alice/mlu/sigmoid.mlu:16:25: error: \u2018__bang_active_sigmod\u2019 was not declared in "
        "this scope; did you mean \u2018__bang_active_sigmoid\u2019?\n"
    )
    result.build.compiler_output = error + "   16 |     __bang_active_sigmod(tile);\n" + error
    findings = diagnose(result)
    assert len(findings) == 1
    assert findings[0].where == "mlu/sigmoid.mlu:16"
    assert findings[0].advice.startswith("The compiler suggests `__bang_active_sigmoid`.")
    assert "<bang.h>" in findings[0].advice


# --- only fp16 fails: is there a half path at all? (issue 12) -----------------------------------------------

# Shaped like the real document of a float-only lab sigmoid (one task, float template, binding casting every
# dtype to float*): the fp32 cases pass, the two fp16 cases stop on the emulator's out-of-bounds check, because
# n halves are read as n floats. Binding sources below are written for these tests.
_FLOAT_ONLY_BINDING = """\
#include <torch/extension.h>
#include "sigmoid_entry.h"

torch::Tensor sigmoid_mlu(torch::Tensor x) {
  auto y = at::empty_like(x);
  // the lab's template: every tensor is handed over as float
  sigmoid_entry(queue(), reinterpret_cast<float*>(y.data_ptr()),
                reinterpret_cast<float*>(x.data_ptr()), x.numel());
  return y;
}
"""

_DISPATCHING_BINDING = """\
#include <torch/extension.h>
#include "sigmoid_entry.h"

torch::Tensor sigmoid_mlu(torch::Tensor x) {
  auto y = at::empty_like(x);
  if (x.scalar_type() == at::kHalf) {
    sigmoid_entry(queue(), reinterpret_cast<half*>(y.data_ptr()), reinterpret_cast<half*>(x.data_ptr()), x.numel());
  } else {
    sigmoid_entry(queue(), reinterpret_cast<float*>(y.data_ptr()), reinterpret_cast<float*>(x.data_ptr()), x.numel());
  }
  return y;
}
"""


def _half_oob(n: int) -> EmuDiagnostic:
    return EmuDiagnostic(
        severity="error",
        kind="gdram-out-of-bounds",
        message=f"__memcpy_async: source (GDRAM2NRAM) range of {4 * n} B reaches {2 * n} B past its end of GDRAM "
        f"buffer tensor c10::Half[{n}] on mlu; check the offsets and sizes of the last task / last tile",
        kernel="bang_sigmoid_kernel",
        location=SourceLocation(file="/submission/mlu/sigmoid.mlu", line=35),
    )


def fp16_only_sigmoid(tmp_path, binding: str | None = _FLOAT_ONLY_BINDING):
    """A correct fp32 sigmoid whose fp16 cases (tail-shaped: 129 elements) stop on the emulator's check."""
    result = samples.slow_sigmoid()
    result.verdict = Verdict.RUNTIME_ERROR
    for n in (129, 65536):
        result.cases.append(samples._case(
            f"sigmoid/half_{n}", "half", "sigmoid", {"x": [n]}, dtype="float16", verdict=Verdict.RUNTIME_ERROR,
            passed=False, diff1=None, diff2=None, diff3=None, diagnostics=[_half_oob(n)],
            message="bang-emu: error: gdram-out-of-bounds"))
    result.submission_path = str(tmp_path)
    if binding is not None:
        (tmp_path / "cpp").mkdir()
        (tmp_path / "cpp" / "binding.cpp").write_text(binding)
        (tmp_path / "mlu").mkdir()
        (tmp_path / "mlu" / "sigmoid.mlu").write_text("template <typename T> __mlu_global__ void k(T *y, T *x);\n")
    return result


def test_fp16_only_failures_with_a_float_only_binding_say_dispatch_on_the_dtype(tmp_path):
    from grader.reporting.next_step import overall_next_step

    result = fp16_only_sigmoid(tmp_path)
    findings = diagnose(result)
    first = findings[0]
    assert first.kind == "fp16_float_pointers"
    assert first.where == "cpp/binding.cpp:7"
    assert "reinterpret_cast<float*>(y.data_ptr())" in first.evidence and "float32 cases pass" in first.evidence
    assert "Dispatch on the dtype" in first.action
    # the emulator's out-of-bounds check in the fp16 cases is the consequence, not a second bug to clamp
    assert not any("Clamp" in f.action or f.kind in ("gdram_out_of_bounds", "tail_only") for f in findings)
    step = overall_next_step(_with_half_group(result, 20.0), findings)  # 20 points at stake, the speed 14
    assert step.rule == "fix_fp16_float_pointers" and step.action.startswith("Dispatch on the dtype")
    assert step.snippet and "scalar_type() == at::kHalf" in step.snippet
    assert step.location.file == "cpp/binding.cpp"


def _with_half_group(result: GradeResult, points_possible: float) -> GradeResult:
    """The failing fp16 cases' group, all its points lost."""
    half = {c.group for c in result.cases if not c.passed}
    assert len(half) == 1
    failing = sum(not c.passed for c in result.cases)
    return result.model_copy(update={"groups": [*result.groups, GroupScore(
        name=half.pop(), points=0.0, points_possible=points_possible, passed_cases=0, total_cases=failing)]})


def test_the_next_step_is_the_one_with_the_most_points_at_stake(tmp_path):
    # the stage is correct (half does not gate it) and slow, 14 of its points lost: the fp16 fix comes first
    # when the half group is worth more, the speed step when it is worth less (issue 28: a 10-point extension
    # headlined over 20 points lost to one core)
    from grader.reporting.next_step import overall_next_step

    result = fp16_only_sigmoid(tmp_path)
    assert result.stages[0].correct and result.stages[0].verdict == Verdict.TOO_SLOW
    first = overall_next_step(_with_half_group(result, 20.0))
    assert (first.rule, first.points) == ("fix_fp16_float_pointers", 20.0)
    first = overall_next_step(_with_half_group(result, 10.0))
    assert (first.rule, first.points) == ("split_over_tasks", 14.0)


def test_data_ptr_float_and_c_casts_count_comments_do_not(tmp_path):
    binding = _FLOAT_ONLY_BINDING.replace("reinterpret_cast<float*>(y.data_ptr())", "y.data_ptr<float>()")
    binding = binding.replace("reinterpret_cast<float*>(x.data_ptr())", "(float *)x.data_ptr()")
    result = fp16_only_sigmoid(tmp_path, binding)
    assert diagnose(result)[0].where == "cpp/binding.cpp:7"

    commented = "// reinterpret_cast<float*>(x.data_ptr())\n/* (float*)x */\nvoid f(void *p);\n"
    (tmp_path / "cpp" / "binding.cpp").write_text(commented)
    assert diagnose(result)[0].kind == "fp16_only"


def test_a_binding_that_dispatches_on_the_dtype_gets_the_half_path_advice_instead(tmp_path):
    findings = diagnose(fp16_only_sigmoid(tmp_path, _DISPATCHING_BINDING))
    assert findings[0].kind == "fp16_only"
    assert "tail_only" not in [f.kind for f in findings]
    # sigmoid sums nothing: the advice is about the half path, not fp32 sums of products
    assert "sizeof(T)" in findings[0].advice and "products" not in findings[0].advice
    # without the float-pointer explanation the emulator's located check stays listed
    assert "gdram_out_of_bounds" in [f.kind for f in findings]


def test_an_fp32_failure_too_means_no_fp16_pattern(tmp_path):
    result = fp16_only_sigmoid(tmp_path)
    fp32 = result.cases[0]
    fp32.passed, fp32.verdict = False, Verdict.WRONG_ANSWER
    fp32.mismatches = [Mismatch(index=[0], expected=0.5, actual=0.9)]
    assert not {"fp16_only", "fp16_float_pointers"} & set(kinds(result))


def test_the_cast_is_found_in_the_documents_excerpts_when_the_folder_is_gone(tmp_path):
    result = fp16_only_sigmoid(tmp_path / "gone", binding=None)
    result.source_excerpts = [SourceExcerpt(file="cpp/binding.cpp", first_line=5,
                                            lines=_FLOAT_ONLY_BINDING.splitlines()[4:8])]
    first = diagnose(result)[0]
    assert first.kind == "fp16_float_pointers" and first.where == "cpp/binding.cpp:7"


def test_matmul_fp16_only_keeps_the_fp32_sum_advice(tmp_path):
    # half_running_sum-like: a dispatching binding, precision lost in fp16 sums
    result = samples.failing_matmul()
    for case in result.cases:
        case.dtype = "float16" if not case.passed else "float32"
    result.submission_path = str(tmp_path)
    first = diagnose(result)[0]
    assert first.kind == "fp16_only" and "fp32" in first.advice and "products" in first.advice


def test_a_failure_within_the_builtins_documented_error_is_never_blamed_on_the_student():
    """Issue 27: a reference kernel's n1 saturated to 0 (documented for __bang_active_sigmoid below -7.75) failed a
    relative metric. The report says the tolerance did it: no "tail", no "zeros", and the next step is to report."""
    from grader.reporting.next_step import overall_next_step

    result = samples.saturated_sigmoid()
    found = kinds(result)
    assert found == ["builtin_tolerance"], found
    assert case_kind(result.cases[0], result.assignment_facts) == "builtin_tolerance"
    assert case_kind(result.cases[0]) == "zero_output"  # without the assignment's tolerance nothing can tell
    # the document carries the tolerances it was judged by: the same report where assignments/sigmoid is not
    result.assignment = "not-on-this-machine"
    assert kinds(result) == ["builtin_tolerance"]
    step = overall_next_step(result)
    assert step is not None and "report" in step.action and "instructor" in step.action


def test_zeros_where_the_reference_is_not_tiny_are_still_the_students():
    result = samples.saturated_sigmoid(expected=4.5e-3)  # x = -5.4: above the saturation, a real zero is wrong
    assert kinds(result)[0] in ("tail_only", "zero_output") and "builtin_tolerance" not in kinds(result)


def test_the_terminal_carries_the_reports_diagnosis_and_next_step(tmp_path):
    """The CLI's failure lines say what the report says (the finding's title, where, and its fix once), and its
    next-step line is the report's, with its points at stake."""
    import io

    from rich.console import Console

    from grader.cli.summary import print_summary
    from grader.reporting.next_step import overall_next_step
    from grader.reporting.render import render_report_html

    result = _with_half_group(fp16_only_sigmoid(tmp_path), 10.0)
    out = io.StringIO()
    print_summary(result, Console(file=out, width=300, color_system=None))
    text = out.getvalue()
    finding = diagnose(result)[0]
    failing = [c for c in result.cases if not c.passed]
    assert len(failing) >= 2 and text.count(f"{finding.title} ({finding.where})") == len(failing), text
    assert text.count("fix: " + finding.action) == 1
    step = overall_next_step(result)
    assert f"next step ({step.points:g} points at stake): [{step.stage_title}] {step.action}" in text, text
    html = render_report_html(result)
    assert f"{step.points:g} points at stake" in html and finding.title in html
