"""Runner selection: batch grading never runs unsandboxed or under bwrap; auto prefers docker."""

from __future__ import annotations

import pytest

from grader.backends import get_backend
from grader.backends.mlu import MluBackend
from grader.sandbox.bwrap_runner import BwrapRunner
from grader.sandbox.docker_runner import DockerRunner
from grader.sandbox.images import emu_image_tag, mlu_image_tag
from grader.sandbox.select import SandboxRefused, select_runner


@pytest.mark.parametrize("kind", ["none", "bwrap"])
def test_batch_refuses_weak_sandboxes(kind):
    with pytest.raises(SandboxRefused, match="batch grading|self-checks"):
        select_runner(kind, batch=True, backend=get_backend("emu"))


@pytest.mark.docker
def test_auto_prefers_docker_when_the_image_exists(emu_image):
    runner = select_runner("auto", batch=True, backend=get_backend("emu"))
    assert isinstance(runner, DockerRunner) and runner.image == emu_image_tag()  # rebuilt if sandbox/ changed
    assert isinstance(select_runner("docker", batch=False, backend=get_backend("emu")), DockerRunner)


def test_bwrap_on_request_for_self_checks():
    assert isinstance(select_runner("bwrap", batch=False, backend=get_backend("emu")), BwrapRunner)


def test_auto_falls_back_to_bwrap_only_for_self_checks(monkeypatch):
    import grader.sandbox.select as select

    monkeypatch.setattr(select, "docker_status", lambda: (None, "no Docker daemon answers (test)"))
    assert isinstance(select_runner("auto", batch=False, backend=get_backend("emu")), BwrapRunner)
    with pytest.raises(SandboxRefused, match="no Docker daemon"):
        select_runner("auto", batch=True, backend=get_backend("emu"))
    with pytest.raises(SandboxRefused, match="no Docker daemon"):
        select_runner("docker", batch=False, backend=get_backend("emu"))


def test_a_backend_that_passes_a_device_runs_only_under_docker():
    for kind in ("bwrap", "none"):
        with pytest.raises(SandboxRefused, match="only in the docker sandbox|unsandboxed"):
            select_runner(kind, batch=kind == "none", backend=MluBackend(), device="0")
    with pytest.raises(SandboxRefused, match="mlu backend runs only in the docker sandbox"):
        select_runner("bwrap", batch=False, backend=MluBackend())


@pytest.mark.docker
def test_each_backend_runs_in_its_own_image(emu_image):
    """The MLU backend never falls back to the emulation image: its own is asked for, by the command that builds
    it (issue 30: `-b mlu` used to build and run in the emulation image)."""
    mlu = MluBackend()
    assert mlu.image_tag().startswith("bang-grader-mlu:") and mlu.image_tag() != emu_image_tag()
    assert mlu.image_tag() == mlu_image_tag("yellow.hub.cambricon.com/pytorch/pytorch:v1.17.0-torch1.13.1-ubuntu20.04-py310")
    with pytest.raises(SandboxRefused, match=r"bang-grader-mlu:\w+ is not built \(run `grade images build --backend mlu`\)"):
        select_runner("docker", batch=True, backend=mlu, device="0")
    assert select_runner("docker", batch=True, backend=get_backend("emu")).image == emu_image_tag()
