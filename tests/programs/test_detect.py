"""Which folders `grade submit` takes as lab programs without `-a` (grader/programs/spec.py)."""

from __future__ import annotations

from pathlib import Path

from grader.programs.spec import programs_assignment_for

PROGRAM = "__mlu_global__ void multiplyMatricesMLU(float* l, float* r, float* o, int m, int n, int k) {}\n" \
          "int main() { return 0; }\n"


def test_a_folder_of_stage_programs_is_the_programs_assignment(tmp_path: Path) -> None:
    (tmp_path / "01_scalar.mlu").write_text(PROGRAM)
    (tmp_path / "README.md").write_text("lab")
    assert programs_assignment_for(tmp_path) == "matmul_programs"


def test_kernels_without_main_or_with_a_binding_are_not_programs(tmp_path: Path) -> None:
    (tmp_path / "01_scalar.mlu").write_text(PROGRAM.replace("int main()", "int helper()"))
    assert programs_assignment_for(tmp_path) is None  # no main(): a kernel file of an extension
    (tmp_path / "01_scalar.mlu").write_text(PROGRAM)
    (tmp_path / "binding.cpp").write_text("// PYBIND11_MODULE\n")
    assert programs_assignment_for(tmp_path) is None  # a flat extension project
    (tmp_path / "binding.cpp").unlink()
    (tmp_path / "other.mlu").write_text(PROGRAM)
    (tmp_path / "01_scalar.mlu").unlink()
    assert programs_assignment_for(tmp_path) is None  # no file named like a stage
