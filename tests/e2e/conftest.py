"""End-to-end grading with the real harness, emulator and runner (docker when its image exists, else a plain
process). Builds take a minute each, so every submission is graded once per session and shared, and builds go
through the session's build cache."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from functools import cache
from pathlib import Path

from grader.orchestration import GradeEnvironment, GradeRequest, grade_submission
from grader.orchestration.build_cache import default_build_cache
from grader.results import GradeResult

ROOT = Path(__file__).resolve().parents[2]
KNOWN_BAD = ROOT / "reference_kernels" / "known_bad"
BUILD_CACHE = default_build_cache()  # the session's (tests/conftest.py), shared with every other test


def e2e_sandbox() -> str:
    """docker when the emulation image is built (CI builds it first), else an unsandboxed process."""
    forced = os.environ.get("BANG_GRADER_E2E_SANDBOX")
    if forced:
        return forced
    try:
        from grader.sandbox.images import emu_image_tag, image_exists
        from grader.sandbox.select import docker_status

        client, _ = docker_status()
        if client is not None and image_exists(client, emu_image_tag()):
            return "docker"
    except Exception:  # noqa: BLE001 -- no docker here: the process runner still exercises everything else
        pass
    return "none"


@cache
def graded(path: str, assignment: str | None = None, stages: tuple[str, ...] | None = None) -> GradeResult:
    return grade_submission(ROOT / path, GradeRequest(assignment=assignment, stages=stages),
                            GradeEnvironment(sandbox=e2e_sandbox(), build_cache=BUILD_CACHE))


@cache
def submitted_example() -> tuple[int, GradeResult, str, Path]:
    """The README's demo command, run as a real process: (exit code, result from --json, stderr, out dir)."""
    out = Path(tempfile.mkdtemp(prefix="bang-grader-e2e-example-"))
    proc = subprocess.run([sys.executable, "-m", "grader.cli", "submit", str(ROOT / "reference_kernels" / "example"),
                           "--out", str(out), "--json", "--sandbox", e2e_sandbox(), "--build-cache", str(BUILD_CACHE)],
                          capture_output=True, text=True, timeout=1500, cwd=ROOT)
    result = GradeResult.model_validate(json.loads(proc.stdout)) if proc.stdout.strip() else None
    assert result is not None, proc.stderr[-4000:]
    return proc.returncode, result, proc.stderr, out
