"""Public AICS exp_5_1 sigmoid answers and Cambricon's own example, moved into the handout layout without changing
a line of their code (tests/realcode/answers.py says exactly what the grader's layout adapter adds), graded by the
real grader. Each must get the verdict that reading its code says is right: no correct kernel failed, no
compile error that is not the student's, and the report's headline names the root cause."""

from __future__ import annotations

import pytest

from grader.reporting.hints import diagnose
from grader.reporting.next_step import overall_next_step
from grader.results import GradeResult
from tests.realcode import answers
from tests.realcode.conftest import require_mirror

IDS = [a.key for a in answers.ANSWERS]


@pytest.mark.parametrize("answer", answers.ANSWERS, ids=IDS)
def test_the_layout_adapter_copies_the_answer_byte_for_byte(answer, tmp_path):
    require_mirror(answer)
    staged = answers.stage(answer, tmp_path / "submission")
    for target, data in staged.copied.items():
        assert (tmp_path / "submission" / target).read_bytes() == data
    written = sorted(p.relative_to(staged.path).as_posix() for p in staged.path.rglob("*") if p.is_file())
    assert written == sorted([*staged.copied, *staged.adapter_files])
    assert staged.adapter_files[:2] == ["ops.py", "grade.toml"]
    assert not set(staged.adapter_files) & set(staged.copied)
    for name in staged.adapter_files:
        assert "not by the student" in (staged.path / name).read_text()


@pytest.mark.slow
@pytest.mark.parametrize("answer", answers.ANSWERS, ids=IDS)
def test_the_grader_agrees_with_our_reading_of_the_code(answer, grade_answer):
    got = answers.summary(grade_answer(answer))
    want = answer.expect
    context = f"{answer.repo}: {got['message']}\n{got['compiler_output'][-3000:]}"
    assert got["verdict"] != "compile_error", f"a compile error in code real cncc builds: {context}"
    assert got["verdict"] == want.verdict, context
    assert want.passed_groups <= got["groups_passed"], context
    assert want.failed_groups <= got["groups_failed"], context
    assert got["stages_passed"] == set(want.stages_passed), context
    assert want.score[0] <= got["score"] <= want.score[1], context


# the sigmoid answers whose own binding casts every dtype to float* (the exp_5_2 programs have the grader's binding)
FLOAT_ONLY = [a for a in answers.ANSWERS if a.expect.failed_groups == {"half"} and a.assignment == "sigmoid"]


@pytest.mark.slow
@pytest.mark.parametrize("answer", FLOAT_ONLY, ids=[a.key for a in FLOAT_ONLY])
def test_a_float_only_binding_is_told_to_dispatch_on_the_dtype(answer, grade_answer):
    # the real results document of a correct fp32 answer whose binding casts every dtype to float*
    result = GradeResult.model_validate(grade_answer(answer))
    findings = diagnose(result)
    assert findings[0].kind == "fp16_float_pointers", [f.kind for f in findings]
    assert findings[0].location and findings[0].location.file.startswith("cpp/")
    assert "tail_only" not in [f.kind for f in findings]
    step = overall_next_step(result, findings)
    # one task on one core costs the multicore and pipeline stages (20 points; a scalar loop all three, 30), the
    # fp16 group 10: the headline is the speed step, the dtype dispatch the finding below it
    half = next(g for g in result.groups if g.name == "half")
    assert step.rule in ("split_over_tasks", "use_builtin"), (step.rule, step.points)
    assert step.points > half.points_possible - half.points, (step.rule, step.points)
    assert "Clamp" not in step.action
