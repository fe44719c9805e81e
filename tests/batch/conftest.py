"""Shared pieces of the batch tests: GradeResult documents shaped like the real pipeline's, for the parts
(store, exports, dashboard) that only read results."""

from __future__ import annotations

from pathlib import Path

import pytest
from factories import grade_result

from grader.batch.exports import ClassRow
from grader.batch.intake import StudentSubmission
from grader.results import (
    BuildInfo,
    CaseResult,
    EmuDiagnostic,
    GradeResult,
    GroupScore,
    Seeds,
    StageResult,
    Student,
    Timing,
    Verdict,
    Versions,
)

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


def make_result(student: str, *, verdict: Verdict = Verdict.PASSED, stage_us: float = 50.0,
                failing_case: bool = False, diagnostic: str | None = None) -> GradeResult:
    ok = verdict == Verdict.PASSED
    cases = [
        CaseResult(name="aligned_128", group="aligned", entry="matmul", shapes={"a": [128, 256]}, dtype="float32",
                   verdict=Verdict.PASSED, passed=True, diff1=1e-7),
        CaseResult(name="tail_97", group="tails", entry="matmul", shapes={"a": [97, 89]}, dtype="float32",
                   verdict=Verdict.WRONG_ANSWER if failing_case else Verdict.PASSED, passed=not failing_case,
                   diagnostics=[EmuDiagnostic(kind=diagnostic, message="write past the end")] if diagnostic else []),
    ]
    groups = [GroupScore(name="aligned", points=4, points_possible=4, passed_cases=1, total_cases=1),
              GroupScore(name="tails", points=0 if failing_case else 4, points_possible=4,
                         passed_cases=0 if failing_case else 1, total_cases=1)]
    stages = [StageResult(name="vector", title="Vector builtins", entry="matmul", points=2 if ok else 0,
                          points_possible=2, correct=not failing_case, verdict=verdict,
                          timing=Timing(source="modelled", median_us=stage_us, min_us=stage_us, max_us=stage_us,
                                        spread=0.0, repeats=5), threshold_us=80.0)]
    score = sum(g.points for g in groups) + sum(s.points for s in stages)
    return grade_result(student=Student(id=student, name=student.title()), submission_path=f"/subs/{student}",
                        submission_hash="ab" * 32, verdict=verdict, message="" if ok else f"{verdict} in a case",
                        score=score, max_score=10, groups=groups, cases=cases, stages=stages,
                        build=BuildInfo(ok=True, toolchain="cncc-emu 0.1"),
                        seeds=Seeds(mode="secret", master_digest="0123456789abcdef"),
                        versions=Versions(grader="0.1.0"))


@pytest.fixture
def class_rows() -> list[ClassRow]:
    specs = [("alice", Verdict.PASSED, 31.0, False, None), ("bob", Verdict.PASSED, 75.0, False, None),
             ("carol", Verdict.WRONG_ANSWER, 40.0, True, None),
             ("dave", Verdict.RUNTIME_ERROR, 60.0, True, "gdram_oob_write"),
             ("erin", Verdict.TOO_SLOW, 120.0, False, None)]
    rows = []
    for sid, verdict, us, failing, diag in specs:
        result = make_result(sid, verdict=verdict, stage_us=us, failing_case=failing, diagnostic=diag)
        sub = StudentSubmission(student_id=sid, name=sid.title(), origin=sid, path=Path(f"/subs/{sid}"),
                         content_hash=sid * 4, extra={"Section": "A1"})
        rows.append(ClassRow(sub, result))
    compile_fail = make_result("frank", verdict=Verdict.COMPILE_ERROR).model_copy(
        update={"groups": [], "stages": [], "cases": [], "score": 0.0,
                "build": BuildInfo(ok=False, toolchain="cncc-emu 0.1", compiler_output="error: expected ';'")})
    rows.append(ClassRow(StudentSubmission("frank", "Frank", "frank.zip", Path("/subs/frank"), content_hash="f" * 64),
                         compile_fail))
    return rows
