"""`grade run PROJECT -- COMMAND`: a student's own project (its setup.py, its tests) run in the sandbox with the
backend's torch_mlu, as on a development machine with a card (nothing is graded).

The project is copied to a work folder that becomes the sandbox's writable /build (the student's folder is
bound read-only and never written); bang_harness.project builds its setup.py in place there, then runs COMMAND.
The sandbox is the grading one (no network, read-only root, the run's limits below), so what passes here
passes on the grader's machine too.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from grader.orchestration.environment import resolve_environment
from grader.orchestration.options import GradeEnvironment
from grader.sandbox.base import Limits, Mounts, Phase, RunOutcome, cores
from grader.sandbox.layout import sandbox_user

DEFAULT_TIMEOUT_SECONDS = 1800.0  # a build with g++ (no precompiled header) plus the tests, on a loaded host
RUN_CPUS = 2.0  # setup.py compiles its sources one after another; the tests may use a second core
# Not copied into the sandbox: version control and earlier builds on the host (rebuilt inside).
SKIPPED = shutil.ignore_patterns(".git", ".hg", ".svn", "__pycache__", ".venv")


@dataclass
class ProjectRun:
    outcome: RunOutcome
    sandbox: str  # the runner's name (docker, bwrap, process)


def project_limits(timeout_seconds: float) -> Limits:
    return Limits(wall_seconds=timeout_seconds, cpus=cores(RUN_CPUS),
                  log_bytes=4 << 20)


def run_project(project: Path, command: list[str], environment: GradeEnvironment, *, build: bool = True,
                timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS) -> ProjectRun:
    """Runs `command` in a sandboxed copy of `project` (after its setup.py build unless `build` is False).
    Raises grader.orchestration.environment.UnavailableError when the backend or sandbox cannot run here."""
    backend, runner = resolve_environment(environment)
    with tempfile.TemporaryDirectory(prefix="bang-grader-run-") as scratch:
        work = Path(scratch)
        copy = work / "project"
        shutil.copytree(project, copy, symlinks=True, ignore=SKIPPED)
        _give_tree_to_sandbox(copy)
        (work / "io").mkdir()
        argv = ["python3", "-m", "bang_harness.project", "--backend", backend.name,
                *([] if build else ["--no-build"]), "--", *command]
        outcome = runner.run(Phase.BUILD, argv, Mounts(submission=project.resolve(), build=copy, io=work / "io"),
                             project_limits(timeout_seconds), env=backend.env)
    return ProjectRun(outcome=outcome, sandbox=runner.name)


def _give_tree_to_sandbox(root: Path) -> None:
    """The whole copy becomes the sandbox user's (setup.py writes build/ and the extension beside its sources);
    a grader that is not root runs the sandbox as itself, which already owns it."""
    if os.geteuid() != 0:
        return
    uid, gid = sandbox_user()
    for folder, dirs, files in os.walk(root):
        os.chown(folder, uid, gid, follow_symlinks=False)
        for name in [*dirs, *files]:
            os.chown(os.path.join(folder, name), uid, gid, follow_symlinks=False)
