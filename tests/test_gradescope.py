"""The one Gradescope adapter (grader/gradescope.py): one test per case group and per stage, scores summing to
ours, only keys Gradescope's spec allows, and the same file from `grade submit --gradescope` and `grade batch`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from factories import grade_result

from grader.batch.exports import ClassRow, write_exports
from grader.batch.intake import StudentSubmission
from grader.gradescope import to_gradescope, write_gradescope
from grader.orchestration.job import write_report
from grader.results import (
    BuildInfo,
    CaseResult,
    GradeResult,
    GroupScore,
    Seeds,
    StageResult,
    Timing,
    Verdict,
    Versions,
)

# Gradescope autograder results.json: the keys it reads (docs/specs.md).
ALLOWED_TOP = {"score", "execution_time", "output", "output_format", "test_output_format", "test_name_format",
               "visibility", "stdout_visibility", "extra_data", "tests", "leaderboard"}
ALLOWED_TEST = {"score", "max_score", "status", "name", "name_format", "number", "output", "output_format",
                "tags", "visibility", "extra_data"}
OUTPUT_FORMATS = {"text", "html", "simple_format", "md", "ansi"}


def _result() -> GradeResult:
    return grade_result(
        submission_path="/s", verdict=Verdict.TOO_SLOW, score=47.5, max_score=100,
        groups=[GroupScore(name="tail", points=7.5, points_possible=15, passed_cases=2, total_cases=4),
                GroupScore(name="tiny", points=5, points_possible=5, passed_cases=3, total_cases=3)],
        cases=[CaseResult(name="primes", group="tail", entry="matmul", shapes={}, dtype="float32",
                          verdict=Verdict.WRONG_ANSWER, passed=False, message="DIFF1 0.1 > 1e-05\nmore")],
        stages=[StageResult(name="vector", title="03", entry="matmul", points=35, points_possible=40, correct=True,
                            verdict=Verdict.TOO_SLOW, message="slow", next_step="split rows", threshold_us=90.0,
                            timing=Timing(source="modelled", median_us=123.4, min_us=120, max_us=130, spread=0.01,
                                          repeats=5))],
        build=BuildInfo(ok=True, toolchain="cncc-emu"),
        seeds=Seeds(mode="secret", master=None, master_digest="abc"), versions=Versions(grader="0.1.0"))


def test_scores_and_tests_match_the_result(tmp_path):
    out = to_gradescope(_result())
    scored = [t for t in out["tests"] if "score" in t]
    assert out["score"] == 47.5 == sum(t["score"] for t in scored)
    assert [t["name"] for t in out["tests"]] == ["Build", "Correctness: tail", "Correctness: tiny",
                                                  "Stage vector: 03"]
    tail = out["tests"][1]
    assert tail["max_score"] == 15 and "primes (matmul): wrong_answer: DIFF1 0.1 > 1e-05" in tail["output"]
    stage = out["tests"][3]
    assert stage["status"] == "failed" and "next step: split rows" in stage["output"]
    assert "time 123.4 us, modelled (mlu370-x8); threshold 90 us" in stage["output"]
    assert out["extra_data"]["seed_digest"] == "abc" and out["extra_data"]["time_is_modelled"] is True
    assert out["extra_data"]["submission_hash"] == "h"
    path = write_gradescope(_result(), tmp_path / "results" / "results.json")
    assert json.loads(path.read_text())["score"] == 47.5


def test_only_keys_and_values_gradescope_accepts():
    doc = to_gradescope(_result().model_copy(update={"integrity": ["x"]}))
    assert set(doc) <= ALLOWED_TOP and doc["output_format"] in OUTPUT_FORMATS
    for test in doc["tests"]:
        assert set(test) <= ALLOWED_TEST, test["name"]
        assert test.get("status", "passed") in ("passed", "failed")
        assert test.get("output_format", "text") in OUTPUT_FORMATS


def test_integrity_findings_are_shown_as_a_failed_unscored_test():
    doc = to_gradescope(_result().model_copy(update={"integrity": ["matmul(), case tiny: no output record"]}))
    (test,) = [t for t in doc["tests"] if t["name"].startswith("Integrity")]
    assert test["status"] == "failed" and test["max_score"] == 0 and "no output record" in test["output"]
    assert "Integrity" not in json.dumps(to_gradescope(_result()))


def _batch_export(result: GradeResult, out: Path) -> bytes:
    """What `grade batch` writes for one student with `result` stored."""
    sub = StudentSubmission(student_id="s1", name="S One", origin="s1", path=None, content_hash="0" * 64)
    write_exports([ClassRow(sub, result)], out, "Lab", write_report)
    return (out / "gradescope" / sub.slug / "results.json").read_bytes()


def test_submit_and_batch_write_the_same_file_for_the_same_result(tmp_path):
    # The real `grade submit --gradescope` on a submission it rejects at once (no emulator needed) ...
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "ops.py").write_text("def sigmoid(x):\n    return x\n")
    proc = subprocess.run([sys.executable, "-m", "grader.cli", "submit", str(tmp_path / "sub"), "--out",
                           str(tmp_path / "out"), "--gradescope", str(tmp_path / "gs.json"), "--no-setup"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr
    submitted = (tmp_path / "gs.json").read_bytes()
    assert json.loads(submitted)["extra_data"]["verdict"] == "ungradable_layout"
    # ... and the batch's export of the result it stored are the same bytes.
    stored = GradeResult.from_json((tmp_path / "out" / "results.json").read_text())
    assert _batch_export(stored, tmp_path / "batch") == submitted
    # A full result (build, groups, cases, stages, timing) takes the same single path both ways.
    write_gradescope(_result(), tmp_path / "full.json")
    assert _batch_export(_result(), tmp_path / "batch-full") == (tmp_path / "full.json").read_bytes()
