"""Gradescope export: one test per case group and per stage, scores summing to ours."""

from __future__ import annotations

import json

from grader.gradescope import to_gradescope, write_gradescope
from grader.results import (
    BuildInfo,
    CaseResult,
    GradeResult,
    GroupScore,
    Seeds,
    StageResult,
    Verdict,
    Versions,
)


def _result() -> GradeResult:
    return GradeResult(
        assignment="matmul", submission_path="/s", submission_hash="h", backend="emu", device_profile="mlu370-x8",
        time_is_modelled=True, sandbox="docker", verdict=Verdict.TOO_SLOW, score=47.5, max_score=100,
        groups=[GroupScore(name="tail", points=7.5, points_possible=15, passed_cases=2, total_cases=4),
                GroupScore(name="tiny", points=5, points_possible=5, passed_cases=3, total_cases=3)],
        cases=[CaseResult(name="primes", group="tail", entry="matmul", shapes={}, dtype="float32",
                          verdict=Verdict.WRONG_ANSWER, passed=False, message="DIFF1 0.1 > 1e-05\nmore")],
        stages=[StageResult(name="vector", title="03", entry="matmul", points=35, points_possible=40, correct=True,
                            verdict=Verdict.TOO_SLOW, message="slow", next_step="split rows")],
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
    assert out["extra_data"]["seed_digest"] == "abc" and out["extra_data"]["time_is_modelled"] is True
    path = write_gradescope(_result(), tmp_path / "results" / "results.json")
    assert json.loads(path.read_text())["score"] == 47.5


def test_integrity_findings_are_shown_as_a_failed_unscored_test():
    doc = to_gradescope(_result().model_copy(update={"integrity": ["matmul(), case tiny: no output record"]}))
    (test,) = [t for t in doc["tests"] if t["name"].startswith("Integrity")]
    assert test["status"] == "failed" and test["max_score"] == 0 and "no output record" in test["output"]
    assert "Integrity" not in json.dumps(to_gradescope(_result()))
