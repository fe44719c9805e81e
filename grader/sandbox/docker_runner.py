"""DockerRunner: one fresh, locked-down container per harness phase (create, start, wait, always remove).

No network, read-only root, capped tmpfs, non-root user, no capabilities, no-new-privileges, the pinned seccomp
profile (sandbox/images/seccomp/profile.json: allow by default, refuse ptrace, process_vm_*, io_uring, bpf,
keyctl, userfaultfd, perf_event_open, mount/unshare/setns ...), cgroup pids / memory (= swap) / CPU limits,
rlimits for file size, open files and core dumps, docker-init, capped logs. /io is a size-capped tmpfs when
the grader is root and the daemon shares our mount namespace (grader.sandbox.io_cap), so `fallocate` cannot
outrun the disk poll. An OCI runtime other than runc (gVisor: `runsc`) is used when asked for
(`runtime=` or env BANG_GRADER_DOCKER_RUNTIME) and registered with the daemon.
Outputs are read afterwards from the host side of the /io bind mount with grader.sandbox.capped (never
`docker cp`, which follows symlinks). A wall-clock timer of our own kills the container: docker's wait
timeout only stops waiting (docker/docker-py#1966).
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import docker
import docker.errors
import requests
from bang_harness.protocol import slot_command
from docker.types import LogConfig, Mount, Ulimit

from grader.sandbox.base import (
    SANDBOX_BUILD,
    SANDBOX_IO,
    SANDBOX_SUBMISSION,
    Limits,
    Mounts,
    Phase,
    SandboxError,
    Started,
    StartingRunner,
)
from grader.sandbox.docker_settings import (
    CGROUP_PARENT_ENV,
    HOST_LABEL,
    PARKED_NAME,
    RUN_LABEL,
    RUNTIME_ENV,
    container_labels,
    owner_of,
    pids_limit,
    seccomp_option,
)
from grader.sandbox.io_cap import same_mount_namespace_as
from grader.sandbox.layout import sandbox_env
from grader.sandbox.lifeline import watch_this_process
from grader.sandbox.supervise import Ending, supervise

KILL_GRACE_SECONDS = 30.0
# The daemon marks a container OOMKilled from an event of its own, which can land after the exit it reports (seen
# in CI: a memory hog killed by signal 9 read back OOMKilled false under load): a SIGKILL we did not send is
# looked at again for this long before it is taken for a plain kill.
OOM_EVENT_GRACE_SECONDS = 2.0


class DockerRunner(StartingRunner):
    name = "docker"

    def __init__(self, image: str, client: docker.DockerClient | None = None, devices: list[str] | None = None,
                 shm_bytes: int = 64 << 20, runtime: str | None = None, cap_io: bool | None = None,
                 slots: bool = False) -> None:
        self.client = client or docker.from_env(timeout=60)
        # The run phase's sandboxes (the rounds, the replay) as jobs of slot containers
        # (grader.sandbox.slot_runner): a batch's and a server's, or a one-shot's that parks them (`grade submit`).
        self.slots = slots and not devices and not (runtime or os.environ.get(RUNTIME_ENV))
        self.slot_note = ""
        self.image = image
        self.devices = list(devices or [])
        self.shm_bytes = shm_bytes
        self.runtime = runtime or os.environ.get(RUNTIME_ENV) or None
        self.seccomp = seccomp_option()
        # A host mount under /io reaches the container only if the daemon sees our mounts (a local daemon).
        self.cap_io = same_mount_namespace_as() if cap_io is None else cap_io
        self.io_note = ""
        try:
            # Containers of graders that died (SIGKILL, SIGTERM without cleanup) are removed before we add ours,
            # and ours will be removed when this process dies, whatever kills it (grader.sandbox.reaper).
            sweep_leftovers(self.client, only_dead_owners=True)
            watch_this_process()
            self.client.images.get(image)  # create() never pulls; checking here gives a clear message
            if self.runtime and self.runtime not in (self.client.info().get("Runtimes") or {}):
                raise SandboxError(f"the Docker daemon has no runtime {self.runtime!r}: register it in "
                                   f"/etc/docker/daemon.json (sandbox/images/seccomp/README.md, gVisor)")
        except docker.errors.ImageNotFound as exc:
            raise SandboxError(f"sandbox image {image} is not built: run `grade images build`") from exc
        except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
            raise SandboxError(f"Docker daemon unavailable: {exc}") from exc

    def start(self, phase: Phase, argv: list[str], mounts: Mounts, limits: Limits,
              env: dict[str, str] | None = None) -> Started:
        """The container started (or, with slots, the job of a slot container: a plain container when no slot
        can be had); its outcome (and its removal) come from the returned handle."""
        if self.slots and phase is Phase.RUN and slot_command(argv) is not None:
            from grader.sandbox.slot_runner import start_in_slot

            try:
                started, self.io_note = start_in_slot(self.client, self.image, mounts, argv, limits, env,
                                                      self.cap_io)
                return started
            except SandboxError as exc:  # the slot itself failed: never the student's fault
                self.slot_note = f"no slot ({exc}): a plain container"
                print(f"bang-grader: {self.slot_note}", file=sys.stderr, flush=True)  # the worker's log
        # The io note is kept off outcome.notes: those end up in the student's messages.
        started, self.io_note = supervise(
            phase, mounts, limits, lambda uid, gid: _Container(self._create(phase, argv, mounts, limits, env, uid, gid)),
            cap_io=self.cap_io)
        return started

    def _create(self, phase: Phase, argv: list[str], mounts: Mounts, limits: Limits,
                env: dict[str, str] | None, uid: int, gid: int) -> docker.models.containers.Container:
        job = uuid.uuid4().hex[:12]
        build_ro = phase is not Phase.BUILD
        try:
            return self.client.containers.create(
                self.image,
                argv,
                name=f"bang-grader-{phase}-{job}",
                labels=container_labels(str(phase), argv),
                user=f"{uid}:{gid}",
                working_dir="/tmp",
                environment=sandbox_env(phase, env),
                network_mode="none",
                read_only=True,
                tmpfs={"/tmp": f"rw,nosuid,nodev,noexec,size={limits.tmpfs_bytes},mode=1777"},
                mounts=[
                    Mount(SANDBOX_SUBMISSION, str(mounts.submission), type="bind", read_only=True),
                    # exec: the extension built here is dlopen'ed in the run phase (bind mounts are not noexec).
                    Mount(SANDBOX_BUILD, str(mounts.build), type="bind", read_only=build_ro),
                    Mount(SANDBOX_IO, str(mounts.io), type="bind", read_only=False),
                ],
                devices=[f"{d}:{d}:rw" for d in self.devices],  # rw, not rwm: no mknod
                cap_drop=["ALL"],
                security_opt=["no-new-privileges", self.seccomp],
                **({"runtime": self.runtime} if self.runtime else {}),
                **({"cgroup_parent": parent} if (parent := os.environ.get(CGROUP_PARENT_ENV)) else {}),
                pids_limit=pids_limit(limits.pids, self.runtime),
                mem_limit=int(limits.memory_bytes),
                memswap_limit=int(limits.memory_bytes),
                nano_cpus=int(limits.cpus * 1e9),
                shm_size=self.shm_bytes,
                ipc_mode="private",
                init=True,
                ulimits=[
                    Ulimit(name="core", soft=0, hard=0),
                    Ulimit(name="nofile", soft=limits.open_files, hard=limits.open_files),
                    Ulimit(name="fsize", soft=limits.file_size_bytes, hard=limits.file_size_bytes),
                ],
                log_config=LogConfig(type="json-file",
                                     config={"max-size": str(max(limits.log_bytes, 1 << 16)), "max-file": "1"}),
                stdin_open=False,
                tty=False,
            )
        except docker.errors.ImageNotFound as exc:
            raise SandboxError(f"sandbox image {self.image} is not built: run `grade images build`") from exc
        except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
            raise SandboxError(f"could not create the sandbox container: {exc}") from exc


class _Container:
    """One phase's container as the supervision (grader.sandbox.supervise) drives it."""

    def __init__(self, container: docker.models.containers.Container) -> None:
        self.container = container
        self.result: dict = {}

    def start(self) -> dict[str, Any]:
        with _docker_run_errors():
            # Attached before the start so nothing printed early is missed; the log driver caps what the daemon
            # keeps.
            streams = {name: self.container.attach(stdout=name == "stdout", stderr=name == "stderr", stream=True,
                                                   logs=True) for name in ("stdout", "stderr")}
            self.container.start()
        return streams

    def wait(self, seconds: float | None) -> bool:
        with _docker_run_errors():
            if seconds is None:
                self.result = self.container.wait(timeout=KILL_GRACE_SECONDS)
                return True
            try:
                # Our own wall clock: docker's wait timeout only stops waiting (docker/docker-py#1966).
                self.result = self.container.wait(timeout=max(seconds, 0.1))
            except requests.exceptions.RequestException:  # ReadTimeout / ConnectionError: the clock ran out
                return False
        return True

    def stop(self) -> None:
        try:
            self.container.kill()
        except (docker.errors.APIError, requests.exceptions.RequestException):
            pass  # already stopped

    def ending(self, stopped: bool) -> Ending:
        code = int(self.result.get("StatusCode", -1))
        unexplained_kill = not stopped and code == 128 + signal.SIGKILL
        deadline = time.monotonic() + OOM_EVENT_GRACE_SECONDS
        while True:
            with _docker_run_errors():
                self.container.reload()
            oom = bool(self.container.attrs.get("State", {}).get("OOMKilled", False))
            if oom or not unexplained_kill or time.monotonic() >= deadline:
                break
            time.sleep(0.05)
        # docker-init reports a child killed by signal N as 128+N.
        return Ending(code, code - 128 if code > 128 else None, oom_killed=oom)

    def close(self) -> None:
        try:
            self.container.remove(force=True, v=True)
        except docker.errors.NotFound:
            pass
        except (docker.errors.APIError, requests.exceptions.RequestException):
            # Left for the sweep (sweep_leftovers) rather than hiding the run's real outcome.
            pass


@contextmanager
def _docker_run_errors() -> Iterator[None]:
    try:
        yield
    except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
        raise SandboxError(f"docker run failed: {exc}") from exc


def sweep_leftovers(client: docker.DockerClient | None = None, only_dead_owners: bool = False) -> list[str]:
    """Removes containers we created and lost (grader crash, daemon hiccup); returns their names.

    With `only_dead_owners`, containers whose creating grader process is still alive are left alone, so a
    concurrent batch run is not disturbed."""
    def lost(summary: dict) -> bool:
        labels = summary.get("Labels") or {}
        if not only_dead_owners:
            return True
        if labels.get(HOST_LABEL) != socket.gethostname():
            return False
        name = summary_name(summary)
        owner = owner_of(name, labels)
        if owner is not None:
            return not _pid_alive(owner)
        return name.startswith(PARKED_NAME) and summary.get("State") != "running"  # a parked slot that ended

    return _remove_where(client or docker.from_env(timeout=60), RUN_LABEL, lost)


def remove_containers_of(owner: int, client: docker.DockerClient | None = None) -> list[str]:
    """Removes the containers the grader process `owner` of this host created (grader.sandbox.reaper, once it
    is dead)."""
    def held(summary: dict) -> bool:  # a slot it parked, or another process adopted, is not its own any more
        labels = summary.get("Labels") or {}
        return labels.get(HOST_LABEL) == socket.gethostname() and owner_of(summary_name(summary), labels) == owner

    return _remove_where(client or docker.from_env(timeout=60), RUN_LABEL, held)


def container_summaries(client: docker.DockerClient, label: str) -> list[dict]:
    """The list endpoint's summaries (Id, Names, Labels, Command) of the containers carrying `label`, not
    containers.list(): that inspects each container afterwards, and one that a concurrent grading (or a
    finishing run) removes in between raises NotFound for the whole listing."""
    return client.api.containers(all=True, filters={"label": label})


def summary_name(summary: dict) -> str:
    return str((summary.get("Names") or [summary["Id"]])[0]).lstrip("/")


def _remove_where(client: docker.DockerClient, label: str, chosen: Callable[[dict], bool]) -> list[str]:
    removed = []
    for summary in container_summaries(client, label):
        if not chosen(summary):
            continue
        try:
            client.api.remove_container(summary["Id"], force=True, v=True)
            removed.append(summary_name(summary))
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError as exc:
            if exc.status_code != 409:  # 409: another remover (a reaper, a concurrent sweep) is at it already
                raise
    return removed


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
