"""Whether the emulation image of these sources is built and a Docker daemon answers: tests that run a real
container skip visibly otherwise (`grade setup` builds it)."""

from __future__ import annotations


def emu_image_ready() -> bool:
    try:
        from grader.sandbox.images import emu_image_tag, image_exists
        from grader.sandbox.select import docker_status

        client, _why = docker_status()
        return client is not None and image_exists(client, emu_image_tag())
    except Exception:  # noqa: BLE001 -- no docker here
        return False
