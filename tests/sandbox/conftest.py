"""Fixtures for the sandbox tests: the real emulation image, real runners and per-test job folders."""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

import pytest

from grader.sandbox.base import Limits, Mounts, Phase, RunOutcome

SMALL = Limits(wall_seconds=20, memory_bytes=1 << 30, pids=64, cpus=1.0, file_size_bytes=32 << 20,
               open_files=256, tmpfs_bytes=64 << 20, log_bytes=64 << 10)


def docker_answers() -> bool:
    try:
        import docker

        docker.from_env(timeout=10).ping()
        return True
    except Exception:
        return False


@pytest.fixture(scope="session")
def emu_image() -> str:
    if not docker_answers():
        pytest.skip("no Docker daemon answers (scripts/setup-system.sh starts one)")
    from grader.sandbox.images import ensure_emu_image

    return ensure_emu_image(log=lambda _m: None)


@pytest.fixture
def mounts(tmp_path: Path) -> Mounts:
    made = Mounts(submission=tmp_path / "submission", build=tmp_path / "build", io=tmp_path / "io")
    for path in (made.submission, made.build, made.io, made.io / "outputs", made.io / "inputs"):
        path.mkdir(parents=True)
    (made.submission / "ops.py").write_text("def sigmoid(x):\n    return x\n")
    (made.io / "inputs" / "c0_a.txt").write_text("host input")
    return made


@pytest.fixture(params=["docker", "bwrap"])
def runner(request: pytest.FixtureRequest):
    if request.param == "docker":
        image = request.getfixturevalue("emu_image")
        from grader.sandbox.docker_runner import DockerRunner

        return DockerRunner(image)
    from grader.sandbox.bwrap_runner import BwrapRunner, bwrap_available

    if not bwrap_available():
        pytest.skip("bwrap/prlimit/setpriv not installed")
    return BwrapRunner()


class Marked:
    """Python source tagged with a unique marker, so its processes and containers can be found afterwards."""

    def __init__(self, code: str) -> None:
        self.marker = f"bgmark{uuid.uuid4().hex[:12]}"
        self.code = f"# {self.marker}\n{code}"

    def argv(self) -> list[str]:
        return ["python3", "-c", self.code]


def run_code(runner, mounts: Mounts, code: str, limits: Limits = SMALL, phase: Phase = Phase.RUN) -> RunOutcome:
    marked = Marked(code)
    outcome = runner.run(phase, marked.argv(), mounts, limits)
    assert_nothing_left(marked.marker)
    return outcome


def processes_with(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in cmdline and int(entry.name) != os.getpid():
            found.append(int(entry.name))
    return found


def containers_with(marker: str) -> list[str]:
    import docker

    from grader.sandbox.docker_runner import container_summaries, summary_name
    from grader.sandbox.docker_settings import RUN_LABEL

    client = docker.from_env(timeout=30)
    names = []
    for summary in container_summaries(client, RUN_LABEL):
        if marker in (summary.get("Command") or ""):
            names.append(summary_name(summary))
    return names


def assert_nothing_left(marker: str) -> None:
    """No process and no container of that run survives it (killed trees get a moment to be reaped)."""
    deadline = time.monotonic() + 3
    while processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert processes_with(marker) == []
    if docker_answers():
        assert containers_with(marker) == []
