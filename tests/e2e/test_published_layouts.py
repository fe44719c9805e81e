"""A public AICS exp_5_1 project graded exactly as its author published it (issue 13): no handout adapter, no
grade.toml -- the layout table finds the sources, the extension's name and the lab's `sigmoid` entry itself.

The project is read from a fetched mirror of its repository at test time (never copied into this repository);
without the mirror the test skips and says which repository to fetch. The expected verdict is the reading of
its code recorded in tests/realcode/answers.py for the same answer graded through the handout adapter."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from bang_emu import safe_tar

from grader.orchestration import GradeEnvironment, GradeRequest, grade_submission
from tests.e2e.conftest import BUILD_CACHE, e2e_sandbox
from tests.realcode import answers

pytestmark = pytest.mark.slow


def published_folder(answer: answers.Answer, destination: Path) -> Path:
    """The answer's folder from its mirror, every file as committed."""
    if not answers.available(answer):
        pytest.skip(f"no mirror of {answer.repo} at {answer.mirror} (fetch github:{answer.repo} to run this)")
    archive = subprocess.run(["git", "--git-dir", str(answer.mirror), "archive", "--format=tar",
                              f"{answer.commit or 'HEAD'}:{answer.root}"], capture_output=True, check=True, timeout=120)
    safe_tar.extract_tar(archive.stdout, destination)
    return destination


def test_an_exp_5_1_project_is_graded_as_published(tmp_path):
    answer = answers.by_key("kolp323")
    root = published_folder(answer, tmp_path / "exp_5_1")
    assert (root / "setup.py").is_file() and not (root / "grade.toml").exists()
    result = grade_submission(root, GradeRequest(), GradeEnvironment(sandbox=e2e_sandbox(),  # type: ignore[arg-type]
                                                                     build_cache=BUILD_CACHE))
    assert result.layout == "aics_exp_5_1" and result.assignment == "sigmoid", result.message
    assert "entry: mlu_custom_ext.mlu_functions.mlu_functions.sigmoid" in result.message
    summary = answers.summary(result.model_dump(mode="json"))
    expect = answer.expect
    assert summary["verdict"] == expect.verdict, summary["message"][-3000:]
    assert summary["groups_passed"] == expect.passed_groups and summary["groups_failed"] == expect.failed_groups
    assert summary["stages_passed"] == expect.stages_passed
    assert expect.score[0] <= summary["score"] <= expect.score[1]
