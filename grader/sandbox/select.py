"""Chooses the runner for a grading run: docker when it can, one pod per phase when the grader is itself a
Kubernetes pod without Docker, bwrap for self-checks, plain processes only when asked for explicitly, and
never an unsandboxed (or cgroup-less) runner for batch grading."""

from __future__ import annotations

from typing import Literal

import docker
import docker.errors
import requests

from grader.i18n import _
from grader.sandbox.base import Runner, SandboxError, SandboxTarget
from grader.sandbox.bwrap_runner import BwrapRunner, bwrap_available
from grader.sandbox.docker_runner import DockerRunner
from grader.sandbox.pod_runner import PodRunner, PodSettings, in_cluster

SandboxKind = Literal["auto", "docker", "bwrap", "none"]


class SandboxRefused(RuntimeError):
    """The requested sandbox is not allowed or not available here; the message says what to do."""


def docker_status() -> tuple[docker.DockerClient | None, str]:
    """A client when the daemon answers, else None and why."""
    try:
        client = docker.from_env(timeout=10)
        client.ping()
        return client, "ok"
    except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
        return None, _("no Docker daemon answers ({error})").format(error=type(exc).__name__)


def select_runner(kind: SandboxKind, batch: bool, backend: SandboxTarget, device: str | None = None) -> Runner:
    """A runner for `backend` (grader.backends.get_backend(name)) on `device`, in the backend's own image."""
    if kind == "none":
        if batch:
            raise SandboxRefused(_("batch grading refuses to run student code unsandboxed (--sandbox none): "
                                   "use --sandbox docker (start dockerd, then `grade images build`)"))
        from grader.sandbox.process import ProcessRunner

        return ProcessRunner()
    if kind == "bwrap" and batch:
        raise SandboxRefused(_("bubblewrap has no cgroup limits and is meant for self-checks only: batch grading "
                               "needs --sandbox docker"))
    if backend.passes_device and kind != "docker" and kind != "auto":
        raise SandboxRefused(_("the {backend} backend runs only in the docker sandbox (device passthrough)").format(
            backend=backend.name))
    if kind in ("docker", "auto"):
        client, why = docker_status()
        tag = backend.ready_image(client) if client is not None else None
        if tag is not None:
            devices = backend.device_nodes(device)
            if backend.passes_device and not devices:
                raise SandboxRefused(_("no device nodes of {backend} device {device} on this host").format(
                    backend=backend.name, device=device or backend.default_device))
            from grader.sandbox.slot_runner import parks_at_exit, slots_possible, slots_wanted

            # slots where they pay: a batch's or a server's (one grading after another), or a one-shot that parks
            # them for the next one-shot (`grade submit`)
            return DockerRunner(tag, client=client, devices=devices,
                                slots=(batch or parks_at_exit()) and not backend.passes_device and slots_wanted()
                                and slots_possible())
        if client is not None:
            why = _("the sandbox image {tag} is not built (run `{fix}`)").format(tag=backend.image_tag(),
                                                                                fix=backend.image_fix())
        else:
            cluster, cluster_why = in_cluster()
            if cluster:  # a grading pod: no daemon, but the API server can start a pod per phase
                try:
                    return PodRunner(PodSettings.from_env(), backend)
                except SandboxError as exc:
                    raise SandboxRefused(_("pod sandbox unavailable: {error}").format(error=exc)) from exc
            why = _("{first}; {second}").format(first=why, second=cluster_why)
        if kind == "docker" or batch or backend.passes_device:
            raise SandboxRefused(_("docker sandbox unavailable: {why}").format(why=why))
    if not bwrap_available():
        raise SandboxRefused(_("no sandbox available: neither Docker nor bubblewrap (apt-get install bubblewrap); "
                               "`--sandbox none` runs unsandboxed for your own code only"))
    return BwrapRunner()
