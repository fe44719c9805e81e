"""Grader kinds (grader/orchestration/kinds.py): the assignment's spec file chooses how a submission is graded,
and a new kind is its class, its place in pipeline.KINDS and its spec file -- proved by adding a toy one."""

from __future__ import annotations

from pathlib import Path

from grader.orchestration import pipeline
from grader.orchestration.kinds import Grader, choose, kind_named
from grader.orchestration.options import DEFAULT_ENVIRONMENT, GradeEnvironment, GradeRequest, Progress
from grader.orchestration.pipeline import KINDS, _Grading, grade_submission
from grader.orchestration.programs import ProgramsGrader
from grader.results import GradeResult, Verdict, Versions
from grader.spec import SeedPlan

PROGRAM = "__mlu_global__ void multiplyMatricesMLU(float* l, float* r, float* o, int m, int n, int k) {}\n" \
          "int main() { return 0; }\n"


def test_the_named_assignments_spec_file_chooses_the_kind(tmp_path: Path) -> None:
    assert kind_named(KINDS, "matmul_programs") is ProgramsGrader
    assert kind_named(KINDS, "matmul") is _Grading and kind_named(KINDS, "sigmoid") is _Grading
    assert kind_named(KINDS, "no_such_assignment") is None
    programs = choose(KINDS, tmp_path, GradeRequest(assignment="matmul_programs"), DEFAULT_ENVIRONMENT)
    assert isinstance(programs, ProgramsGrader) and programs.spec.base == "matmul"
    assert type(choose(KINDS, tmp_path, GradeRequest(assignment="matmul"), DEFAULT_ENVIRONMENT)) is _Grading
    unknown = choose(KINDS, tmp_path, GradeRequest(assignment="no_such_assignment"), DEFAULT_ENVIRONMENT)
    assert type(unknown) is _Grading and unknown.request.assignment == "no_such_assignment"  # it says so itself


def test_without_an_assignment_the_first_kind_that_recognises_the_folder(tmp_path: Path) -> None:
    (tmp_path / "01_scalar.mlu").write_text(PROGRAM)
    chosen = choose(KINDS, tmp_path, GradeRequest(), DEFAULT_ENVIRONMENT)
    assert isinstance(chosen, ProgramsGrader) and chosen.request.assignment == "matmul_programs"
    (tmp_path / "01_scalar.mlu").write_text(PROGRAM.replace("int main()", "int helper()"))
    default = choose(KINDS, tmp_path, GradeRequest(), DEFAULT_ENVIRONMENT)
    assert type(default) is _Grading and default.request.assignment is None  # resolve.py finds it later


def test_calibration_follows_the_kind() -> None:
    assert ProgramsGrader.calibrated_as("matmul_programs") == "matmul"
    assert _Grading.calibrated_as("matmul") == "matmul"


class Toy(Grader):
    """A new kind: one class and its spec file (and, to take a folder without -a, what it recognises); it grades
    every folder 7 of 7."""

    spec_file = "toy.toml"

    def __init__(self, root: Path, request: GradeRequest, environment: GradeEnvironment,
                 progress: Progress | None = None) -> None:
        super().__init__(root, request, environment, progress)
        self.seeds = SeedPlan.create("public", None)

    @classmethod
    def recognise(cls, folder: Path) -> str | None:
        return "toy" if (folder / "toy.txt").is_file() else None

    def run(self) -> GradeResult:
        return self.finish(Verdict.PASSED, "toy")

    def finish(self, verdict: Verdict | None, message: str = "") -> GradeResult:
        return GradeResult(assignment=self.request.assignment or "", submission_path=str(self.root),
                           submission_hash="", backend=self.environment.backend, device_profile="",
                           time_source="modelled", sandbox=self.environment.sandbox, verdict=verdict or Verdict.PASSED, message=message, score=7.0,
                           max_score=7.0, seeds=self.seeds.record(), versions=Versions(grader="test"))


def test_a_new_kind_is_a_class_and_its_spec_file(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    assignments = tmp_path / "assignments"
    (assignments / "toy").mkdir(parents=True)
    (assignments / "toy" / "toy.toml").write_text("")
    assert kind_named((Toy, *KINDS), "toy", assignments) is Toy and kind_named(KINDS, "toy", assignments) is None
    chosen = choose((Toy, *KINDS), tmp_path, GradeRequest(assignment="toy"), DEFAULT_ENVIRONMENT, assignments=assignments)
    assert isinstance(chosen, Toy) and chosen.run().score == 7.0
    # grade_submission knows no kind by name: one more entry of pipeline.KINDS and the toy is graded through it
    folder = tmp_path / "submission"
    folder.mkdir()
    (folder / "toy.txt").write_text("")
    monkeypatch.setattr(pipeline, "KINDS", (Toy, *KINDS))
    result = grade_submission(folder, GradeRequest())
    assert (result.assignment, result.verdict, result.message, result.score) == ("toy", Verdict.PASSED, "toy", 7.0)
