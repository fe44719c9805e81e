"""What every Docker container of the grader shares, whichever runner makes it (docker_runner's one per phase,
slot_runner's slot containers): its labels, the pinned seccomp profile, the runtime and cgroup parent chosen by
the environment, the pids limit under a runtime."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from bang_harness.protocol import harness_command

from grader.sandbox.base import SandboxError

RUN_LABEL = "org.bang-grader.sandbox"  # every container we create carries it; the sweep removes by it
OWNER_LABEL = "org.bang-grader.owner-pid"
HOST_LABEL = "org.bang-grader.owner-host"  # a pid only means something on the host (pid namespace) it came from
PHASE_LABEL = "org.bang-grader.phase"
COMMAND_LABEL = "org.bang-grader.command"  # what the container runs: the harness command (run, replay, ...)
TAG_LABEL = "org.bang-grader.tag"  # BANG_GRADER_CONTAINER_TAG's value: a run's own containers, told from others'
TAG_ENV = "BANG_GRADER_CONTAINER_TAG"


def container_labels(phase: str, argv: list[str] | tuple[str, ...] = ()) -> dict[str, str]:
    """The labels of every container a grader process makes: ours (the sweep and the reaper find them by these),
    whose, on which host, for what (its phase and, given its argv, its command), and the run's tag when its
    environment has one (inherited by batch workers)."""
    return {RUN_LABEL: "1", OWNER_LABEL: str(os.getpid()), HOST_LABEL: socket.gethostname(), PHASE_LABEL: phase,
            **({COMMAND_LABEL: command_of(argv)} if argv else {}),
            **({TAG_LABEL: tag} if (tag := os.environ.get(TAG_ENV)) else {})}


# A slot container's name says who holds it now (grader.sandbox.slot_runner), since labels cannot change: made,
# SLOT_NAME + its id (its creator, OWNER_LABEL); parked for the next grader process, PARKED_NAME + id (nobody: its
# zygote ends it once idle); adopted by another process, SLOT_NAME + id + ADOPTED_BY + that process's pid.
SLOT_NAME = "bang-grader-slot-"
PARKED_NAME = "bang-grader-parked-"
ADOPTED_BY = "-of-"


def owner_of(name: str, labels: dict[str, str]) -> int | None:
    """The grader process (on its host) answerable for one of our containers, by its name and labels: the adopter
    of a slot another process made, nobody for a parked slot, else its creator."""
    name = name.lstrip("/")
    if name.startswith(PARKED_NAME):
        return None
    if name.startswith(SLOT_NAME):
        _, adopted, pid = name.rpartition(ADOPTED_BY)
        if adopted and pid.isdigit():
            return int(pid)
    owner = labels.get(OWNER_LABEL, "")
    return int(owner) if owner.isdigit() else None


def command_of(argv: list[str] | tuple[str, ...]) -> str:
    """`python3 -m bang_harness replay` -> "replay"; any other command: its program's name."""
    return harness_command(argv) or (Path(argv[0]).name if argv else "")


SECCOMP_PROFILE = Path(__file__).resolve().parents[2] / "sandbox" / "images" / "seccomp" / "profile.json"
RUNTIME_ENV = "BANG_GRADER_DOCKER_RUNTIME"  # e.g. runsc (gVisor); unset: the daemon's default (runc)
# The cgroup every container of this grader goes under (unset: the daemon's default): its CPU account is then
# this grader's alone on a shared machine (benchmarks/cpu_ledger.py), or a course's slice.
CGROUP_PARENT_ENV = "BANG_GRADER_DOCKER_CGROUP_PARENT"
# gVisor's own sentry and gofer threads count in the container's pids cgroup, and on its ptrace platform every
# guest thread is a host thread as well (measured here: a limit of 64 fails to start a Python at all, and the
# build's default 256 + 128 gave "can't start new thread"). The pids limit becomes factor x pids + extra.
RUNTIME_PIDS = {"runsc": (4, 256)}


def pids_limit(pids: int, runtime: str | None) -> int:
    factor, extra = RUNTIME_PIDS.get(runtime or "", (1, 0))
    return int(pids) * factor + extra


def seccomp_option(profile: Path = SECCOMP_PROFILE) -> str:
    """The security_opt entry: the API takes the profile's JSON text, not a path (docker/docker-py#2819)."""
    try:
        text = profile.read_text(encoding="utf-8")
    except OSError as exc:
        raise SandboxError(f"seccomp profile {profile} is missing: {exc}") from exc
    return "seccomp=" + text
