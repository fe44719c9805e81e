"""Runner selection: batch grading never runs unsandboxed or under bwrap; auto prefers docker."""

from __future__ import annotations

import pytest

from grader.backends.mlu import MluBackend
from grader.sandbox.bwrap_runner import BwrapRunner
from grader.sandbox.docker_runner import DockerRunner
from grader.sandbox.images import emu_image_tag
from grader.sandbox.select import SandboxRefused, select_runner


@pytest.mark.parametrize("kind", ["none", "bwrap"])
def test_batch_refuses_weak_sandboxes(kind):
    with pytest.raises(SandboxRefused, match="batch grading|self-checks"):
        select_runner(kind, batch=True)


@pytest.mark.docker
def test_auto_prefers_docker_when_the_image_exists(emu_image):
    runner = select_runner("auto", batch=True)
    assert isinstance(runner, DockerRunner) and runner.image == emu_image_tag()  # rebuilt if sandbox/ changed
    assert isinstance(select_runner("docker", batch=False), DockerRunner)


def test_bwrap_on_request_for_self_checks():
    assert isinstance(select_runner("bwrap", batch=False), BwrapRunner)


def test_auto_falls_back_to_bwrap_only_for_self_checks(monkeypatch):
    import grader.sandbox.select as select

    monkeypatch.setattr(select, "docker_status", lambda: (None, "no Docker daemon answers (test)"))
    assert isinstance(select_runner("auto", batch=False), BwrapRunner)
    with pytest.raises(SandboxRefused, match="no Docker daemon"):
        select_runner("auto", batch=True)
    with pytest.raises(SandboxRefused, match="no Docker daemon"):
        select_runner("docker", batch=False)


def test_a_backend_that_passes_a_device_runs_only_under_docker():
    for kind in ("bwrap", "none"):
        with pytest.raises(SandboxRefused, match="only in the docker sandbox|unsandboxed"):
            select_runner(kind, batch=kind == "none", backend=MluBackend(), device="0")
    with pytest.raises(SandboxRefused, match="mlu backend runs only in the docker sandbox"):
        select_runner("bwrap", batch=False, backend=MluBackend())
