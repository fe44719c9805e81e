"""grader.orchestration.project_run (`grade run`) through the process runner, which needs no image: the project is
run on a copy with the emulated torch_mlu importable, its setup.py first, the command's own exit status back.
tests/test_cli.py runs the same in the docker sandbox."""

from __future__ import annotations

from pathlib import Path

from grader.orchestration.options import GradeEnvironment
from grader.orchestration.project_run import run_project
from grader.sandbox.process import ProcessRunner

CHECK = """
import pathlib, sys, torch, torch_mlu
start, end = torch.mlu.Event(), torch.mlu.Event()
start.record(); y = torch.ones(3).to("mlu") * 2; end.record(); end.synchronize()
pathlib.Path("made_by_the_command.txt").write_text("x")
print("built" if pathlib.Path("built.txt").exists() else "not built", y.cpu().tolist(), start.hardware_time(end))
sys.exit(5)
"""


def _project(tmp_path: Path, setup: str | None) -> Path:
    project = tmp_path / "project"
    project.mkdir()
    (project / "check.py").write_text(CHECK)
    if setup is not None:
        (project / "setup.py").write_text(setup)
    return project


def _run(project: Path, **kwargs: object):  # noqa: ANN202
    return run_project(project, ["python", "check.py"], GradeEnvironment(sandbox="none", runner=ProcessRunner()),
                       timeout_seconds=300, **kwargs).outcome


def test_setup_py_is_built_first_then_the_command_runs_on_a_copy(tmp_path):
    project = _project(tmp_path, "import pathlib\npathlib.Path('built.txt').write_text('x')\n")
    outcome = _run(project)
    assert outcome.exit_code == 5, outcome.stderr_tail  # the command's own status
    assert "built [2.0, 2.0, 2.0] 0.0" in outcome.stdout_tail
    assert "$ python setup.py build_ext --inplace" in outcome.stderr_tail
    assert sorted(p.name for p in project.iterdir()) == ["check.py", "setup.py"]  # never written


def test_a_failed_build_stops_before_the_command_and_no_build_skips_it(tmp_path):
    project = _project(tmp_path, "import sys\nsys.exit(3)\n")
    failed = _run(project)
    assert failed.exit_code == 3 and "setup.py build_ext failed (exit status 3)" in failed.stderr_tail
    assert "[2.0, 2.0, 2.0]" not in failed.stdout_tail
    skipped = _run(project, build=False)
    assert skipped.exit_code == 5 and "not built [2.0, 2.0, 2.0]" in skipped.stdout_tail
