"""Failure classification and advice: each known failure shape must be named by its own kind."""

from __future__ import annotations

from grader.reporting.hints import case_kind, compile_error_advice, diagnose, is_tail_case
from grader.results import EmuDiagnostic, Mismatch, SourceLocation, Verdict

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
    assert oob.kind == "gdram_oob_write"
    assert oob.where == "mlu/sigmoid.mlu:27"
    assert "min(chunk, n - offset)" in oob.advice


def test_each_known_diagnostic_kind_has_its_own_advice():
    result = samples.runtime_error()
    advice = {}
    for kind in ("async_hazard", "nram_overflow", "barrier_deadlock", "gdram_oob_write", "unwritten_output"):
        diag = EmuDiagnostic(kind=kind, message="m", location=SourceLocation(file="mlu/k.mlu", line=3))
        result.cases[1].diagnostics = [diag]
        result.stages[0].trace.diagnostics = []
        result.cases[1].mismatches = []
        advice[kind] = next(f for f in diagnose(result) if f.kind == kind).advice
    assert "__sync_io" in advice["async_hazard"]
    assert "768 KB" in advice["nram_overflow"]
    assert "0x80" in advice["barrier_deadlock"]
    assert len(set(advice.values())) == len(advice)


def test_unknown_diagnostic_kind_still_shows_the_emulator_message():
    result = samples.runtime_error()
    result.cases[1].diagnostics = [EmuDiagnostic(kind="strange_thing", message="odd value in register")]
    result.stages[0].trace.diagnostics = []
    finding = next(f for f in diagnose(result) if f.kind == "strange_thing")
    assert "odd value in register" in finding.evidence


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
