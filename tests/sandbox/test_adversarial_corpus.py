"""The adversarial corpus, graded end to end with the docker runner: each fixture gets its expected verdict,
its message says why, and nothing of it is left behind (no container of this grader, no leftover files
outside the output folder)."""

from __future__ import annotations

import os
import time
import tomllib
from pathlib import Path

import docker
import pytest

from grader.orchestration.options import GradeOptions
from grader.sandbox.docker_runner import OWNER_LABEL, RUN_LABEL

CORPUS = Path(__file__).resolve().parents[2] / "reference_kernels" / "adversarial"
FIXTURES = sorted(p for p in CORPUS.iterdir() if (p / "expected.toml").is_file())

pytestmark = pytest.mark.docker


def _param(fixture: Path):
    expected = tomllib.loads((fixture / "expected.toml").read_text())
    marks = [pytest.mark.slow] if expected.get("slow") else []
    return pytest.param(fixture, expected, id=fixture.name, marks=marks)


def _grade(submission: Path, out: Path):
    from grader.orchestration import grade_submission

    return grade_submission(submission, GradeOptions(sandbox="docker", batch=True, out_dir=out, seed="corpus",
                                                     seed_mode="public"))


def _our_containers() -> list[str]:
    client = docker.from_env(timeout=30)
    return [c.name for c in client.containers.list(all=True, filters={"label": f"{OWNER_LABEL}={os.getpid()}"})
            if RUN_LABEL in c.labels]


def test_corpus_is_complete():
    names = {p.name for p in FIXTURES}
    assert {"fork_bomb", "disk_fill", "tmpfs_fill", "endless_output", "sleep_forever", "busy_loop",
            "network_access", "read_proc", "host_files", "include_host_path", "forged_results", "kill_parent",
            "symlink_copy_out", "timer_patching"} <= names


@pytest.mark.parametrize(("fixture", "expected"), [_param(f) for f in FIXTURES])
def test_fixture_gets_its_verdict(fixture, expected, emu_image, tmp_path):
    started = time.monotonic()
    result = _grade(fixture, tmp_path / "out")
    text = result.to_json().lower()
    if "verdict_of_reference" in expected:
        reference = _grade(CORPUS.parent / expected["verdict_of_reference"], tmp_path / "reference")
        assert result.verdict == reference.verdict, result.message
        for mine, theirs in zip(result.stages, reference.stages, strict=True):
            if mine.timing and theirs.timing:  # patched clocks change nothing the grader uses
                assert mine.timing.median_us == pytest.approx(theirs.timing.median_us, rel=0.05)
    else:
        assert result.verdict == expected["verdict"], f"{result.verdict}: {result.message}"
    for word in expected["message_contains"]:
        assert word.lower() in text, f"{word!r} not in the result of {fixture.name}"
    assert _our_containers() == []
    # the host stayed responsive and the runner's limits, not the suite's timeout, ended the attack
    assert time.monotonic() - started < 600
