"""CPU seconds of a grading on a shared machine: what the grader's own containers, its own processes and the
Docker daemon spent, not the whole machine's busy time (other sessions' work would count in that).

    with Ledger() as ledger:          # every container this process's graders create goes under one cgroup
        grade ...                     # (BANG_GRADER_DOCKER_CGROUP_PARENT, read by the workers too)
    ledger.containers, ledger.host, ledger.daemon   # CPU seconds

The containers' account is exact: cgroup v1 cpuacct (or v2 cpu.stat) charges every ancestor as it charges a
container, so the parent keeps the seconds of containers already removed. The host's is this process's and its
reaped children's (batch workers, nm) getrusage. The daemon's (dockerd, containerd and the live shims) is the
machine's and is shared with any other Docker user: read it as an upper bound.

`ContainerClock` times single containers (per phase, per round) for startup_breakdown.py.
"""

from __future__ import annotations

import os
import resource
import time
import uuid
from contextlib import suppress
from pathlib import Path

from grader.sandbox.docker_settings import CGROUP_PARENT_ENV

CGROUP = Path("/sys/fs/cgroup")
DAEMONS = ("dockerd", "containerd", "containerd-shim", "containerd-shim-runc-v2")


def cgroup_cpu_seconds(group: str) -> float | None:
    """CPU seconds charged to cgroup `group` (a path under the hierarchy's root), None when it is not there."""
    v1 = CGROUP / "cpuacct" / group.strip("/") / "cpuacct.usage"
    with suppress(OSError, ValueError):
        return int(v1.read_text()) / 1e9
    v2 = CGROUP / group.strip("/") / "cpu.stat"
    with suppress(OSError, ValueError):
        for line in v2.read_text().splitlines():
            if line.startswith("usage_usec "):
                return int(line.split()[1]) / 1e6
    return None


def daemon_cpu_seconds() -> float:
    """dockerd's, containerd's and the live shims' CPU seconds (with their reaped children's)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        with suppress(OSError, ValueError, IndexError):
            stat = (proc / "stat").read_text()
            name = stat[stat.index("(") + 1:stat.rindex(")")]
            if name in DAEMONS or name.startswith("containerd-shim"):
                fields = stat[stat.rindex(")") + 2:].split()
                total += sum(int(v) for v in fields[11:15])  # utime stime cutime cstime
    return total / tick


def host_cpu_seconds() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


class Ledger:
    """Containers, host and daemon CPU seconds between enter and exit (see the module's docstring)."""

    def __init__(self) -> None:
        self.parent = f"/bang-bench-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.containers = self.host = self.daemon = self.wall = 0.0
        self._previous: str | None = None

    def __enter__(self) -> Ledger:
        self._previous = os.environ.get(CGROUP_PARENT_ENV)
        os.environ[CGROUP_PARENT_ENV] = self.parent
        self._host, self._daemon, self._wall = host_cpu_seconds(), daemon_cpu_seconds(), time.monotonic()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall = time.monotonic() - self._wall
        self.host = host_cpu_seconds() - self._host
        self.daemon = daemon_cpu_seconds() - self._daemon
        self.containers = cgroup_cpu_seconds(self.parent) or 0.0
        if self._previous is None:
            os.environ.pop(CGROUP_PARENT_ENV, None)
        else:
            os.environ[CGROUP_PARENT_ENV] = self._previous
        remove_cgroup(self.parent)  # the daemon made it in each hierarchy; empty now

    def row(self) -> dict[str, float]:
        return {"containers_cpu_s": round(self.containers, 2), "host_cpu_s": round(self.host, 2),
                "daemon_cpu_s_upper_bound": round(self.daemon, 2), "wall_s": round(self.wall, 2)}


class ContainerClock:
    """Patches the docker runner in this process: each container created is recorded (`created`: name, phase, its
    /io folder's name, its cgroup parent, in order) and goes under a cgroup parent of its own (below the ledger's
    when one is open), which keeps its CPU seconds after the container and its own cgroup are gone (`seconds`)."""

    def __init__(self) -> None:
        from grader.sandbox import docker_runner

        self.base = f"/bang-clock-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.created: list[tuple[str, str, str, str]] = []
        self._module = docker_runner
        self._saved = docker_runner.DockerRunner._create

    def __enter__(self) -> ContainerClock:
        clock, create = self, self._saved

        def recording_create(runner, phase, argv, mounts, *rest):  # type: ignore[no-untyped-def]
            outer = os.environ.get(CGROUP_PARENT_ENV)
            parent = f"{outer or clock.base}/c{len(clock.created)}"
            os.environ[CGROUP_PARENT_ENV] = parent
            try:
                container = create(runner, phase, argv, mounts, *rest)
            finally:
                if outer is None:
                    os.environ.pop(CGROUP_PARENT_ENV, None)
                else:
                    os.environ[CGROUP_PARENT_ENV] = outer
            clock.created.append((container.name, str(phase), Path(mounts.io).name, parent))
            return container

        self._module.DockerRunner._create = recording_create  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        self._module.DockerRunner._create = self._saved  # type: ignore[method-assign]
        for _name, _phase, _io, parent in self.created:
            remove_cgroup(parent)
        remove_cgroup(self.base)

    def seconds(self, name: str) -> float | None:
        """The container's CPU seconds so far (all of them once it has ended)."""
        for created, _phase, _io, parent in self.created:
            if created == name:
                return cgroup_cpu_seconds(parent)
        return None


def remove_cgroup(group: str) -> None:
    """The (empty) cgroup `group` in every hierarchy the daemon made it in, deepest first."""
    for controller in [*CGROUP.iterdir(), CGROUP]:
        folder = controller / group.strip("/")
        if folder.is_dir():
            for sub in sorted((p for p in folder.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
                with suppress(OSError):
                    sub.rmdir()
            with suppress(OSError):
                folder.rmdir()
