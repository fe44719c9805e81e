"""grade_submission() on submissions that never reach the build: it returns a verdict and never raises; the job
around it (orchestration/job.py) writes results.json atomically, and the report beside it."""

from __future__ import annotations

import json

from factories import MATMUL_FILES, write_tree

from grader.orchestration import GradeEnvironment, GradeObserver, GradeRequest, grade_submission
from grader.orchestration.job import run_job
from grader.orchestration.score_stages import next_step
from grader.results import GradeResult, Verdict
from grader.spec import load_assignment

GOOD = MATMUL_FILES


def test_layout_errors_become_a_result_with_results_json(tmp_path):
    sub = write_tree(tmp_path / "sub", {k: v for k, v in GOOD.items() if not k.startswith("cpp/")})
    steps = []
    done = run_job(sub, GradeRequest(), GradeEnvironment(),
                   GradeObserver(out_dir=tmp_path / "out", progress=lambda s, f: steps.append(s)))
    result = done.result
    assert done.results == tmp_path / "out" / "results.json" and done.report == tmp_path / "out" / "report.html"
    assert "missing folder cpp/" in done.report.read_text(encoding="utf-8")
    assert result.verdict == Verdict.UNGRADABLE_LAYOUT and result.score == 0
    assert "missing folder cpp/" in result.message and result.assignment == "matmul"  # guessed from ops.py
    assert result.max_score == load_assignment("matmul").max_score and steps
    stored = GradeResult.from_json((tmp_path / "out" / "results.json").read_text())
    assert stored.verdict == Verdict.UNGRADABLE_LAYOUT and stored.submission_hash == result.submission_hash
    assert not list((tmp_path / "out").glob(".*tmp"))


def test_a_module_syntax_error_is_a_compile_error(tmp_path):
    sub = write_tree(tmp_path, {**GOOD, "ops.py": "def matmul(a, b):\nreturn a\n", "grade.toml": 'assignment = "matmul"'})
    result = grade_submission(sub, GradeRequest())
    assert result.verdict == Verdict.COMPILE_ERROR
    assert result.build is not None and "ops.py:2" in result.build.compiler_output


def test_an_unknown_assignment_in_grade_toml_is_the_students_layout_problem(tmp_path):
    sub = write_tree(tmp_path, {**GOOD, "grade.toml": 'assignment = "matmull"\n'})
    result = grade_submission(sub, GradeRequest())
    assert result.verdict == Verdict.UNGRADABLE_LAYOUT and "'matmull' is unknown" in result.message


def test_an_ambiguous_module_asks_for_the_assignment(tmp_path):
    sub = write_tree(tmp_path, {**GOOD, "ops.py": "def matmul(a, b): ...\ndef sigmoid(x): ...\n"})
    result = grade_submission(sub, GradeRequest())
    assert result.verdict == Verdict.UNGRADABLE_LAYOUT and "--assignment" in result.message


def test_a_missing_entry_function_for_a_stage_is_named(tmp_path):
    sub = write_tree(tmp_path, {**GOOD, "grade.toml": 'assignment = "matmul"\n[entries]\nvector = "matmul_vector"\n'})
    result = grade_submission(sub, GradeRequest(stages=("vector", "multicore")))
    assert result.verdict == Verdict.UNGRADABLE_LAYOUT
    assert "matmul_vector  (serves stage vector)" in result.message


def test_results_are_valid_json_with_seeds_and_versions(tmp_path):
    result = grade_submission(tmp_path / "does-not-exist", GradeRequest(seed_mode="secret"))
    data = json.loads(result.to_json())
    assert data["verdict"] == "ungradable_layout" and data["schema_version"] == "1.0"
    assert data["seeds"]["mode"] == "secret" and data["seeds"]["master"] is None
    assert data["versions"]["grader"] and data["finished_at"]


def test_an_unavailable_backend_is_reported_not_blamed_on_the_student(tmp_path):
    sub = write_tree(tmp_path, GOOD)
    result = grade_submission(sub, GradeRequest(), GradeEnvironment(backend="mlu"))
    assert result.verdict == Verdict.ENVIRONMENT_ERROR
    assert "backend 'mlu' is not available here" in result.message and "grade doctor" in result.message


def test_next_step_is_how_to_reach_this_stage_or_else_the_next():
    spec = load_assignment("matmul")
    assert "many tasks" in next_step(spec, "multicore", reached=False)
    assert "__memcpy_async" in next_step(spec, "multicore", reached=True)
    assert next_step(spec, "sram_union", reached=True) is None
