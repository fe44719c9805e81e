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
import socket
import threading
import time
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import docker
import docker.errors
import requests
from docker.types import LogConfig, Mount, Ulimit

from grader.sandbox.base import (
    SANDBOX_BUILD,
    SANDBOX_IO,
    SANDBOX_SUBMISSION,
    Limits,
    Mounts,
    Phase,
    RunOutcome,
    SandboxError,
    Started,
    StartingRunner,
)
from grader.sandbox.io_cap import capped_io, same_mount_namespace_as
from grader.sandbox.layout import (
    MAX_NEW_ENTRIES,
    check_mounts,
    prepare_writable,
    sandbox_env,
    sandbox_user,
    writable_dirs,
)
from grader.sandbox.lifeline import watch_this_process
from grader.sandbox.watch import (
    FLOOD_FACTOR,
    NOTE_OUTPUT_FLOOD,
    DiskWatch,
    KillSwitch,
    OutputTail,
    pump,
    tree_usage,
)

RUN_LABEL = "org.bang-grader.sandbox"  # every container we create carries it; the sweep removes by it
OWNER_LABEL = "org.bang-grader.owner-pid"
HOST_LABEL = "org.bang-grader.owner-host"  # a pid only means something on the host (pid namespace) it came from
KILL_GRACE_SECONDS = 30.0
SECCOMP_PROFILE = Path(__file__).resolve().parents[2] / "sandbox" / "images" / "seccomp" / "profile.json"
RUNTIME_ENV = "BANG_GRADER_DOCKER_RUNTIME"  # e.g. runsc (gVisor); unset: the daemon's default (runc)
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


@dataclass
class _Live:
    """A started container and the host-side guards that watch it until it is removed."""

    container: docker.models.containers.Container
    kill: KillSwitch
    notes: list[str]
    tails: dict[str, OutputTail]
    disk: DiskWatch
    pumps: list[threading.Thread] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)


class DockerRunner(StartingRunner):
    name = "docker"

    def __init__(self, image: str, client: docker.DockerClient | None = None, devices: list[str] | None = None,
                 shm_bytes: int = 64 << 20, runtime: str | None = None, cap_io: bool | None = None) -> None:
        self.client = client or docker.from_env(timeout=60)
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
        """The container started; its outcome (and its removal) come from the returned handle."""
        check_mounts(mounts)
        cleanup = ExitStack()
        # Kept off outcome.notes: those end up in the student's messages.
        self.io_note = cleanup.enter_context(capped_io(mounts.io, limits.tmpfs_bytes, enabled=self.cap_io))
        try:
            live = self._start(phase, argv, mounts, limits, env)
        except BaseException:
            cleanup.close()
            raise
        return Started(lambda: self._finish(live, limits, cleanup), live.kill)

    def _start(self, phase: Phase, argv: list[str], mounts: Mounts, limits: Limits,
               env: dict[str, str] | None) -> _Live:
        uid, gid = sandbox_user()
        prepare_writable(phase, mounts, uid, gid)
        watched = writable_dirs(phase, mounts)
        base_bytes, base_files = tree_usage(watched, 1 << 62, 1 << 62)
        container = self._create(phase, argv, mounts, limits, env, uid, gid)
        notes: list[str] = []

        def stop_container() -> None:
            try:
                container.kill()
            except (docker.errors.APIError, requests.exceptions.RequestException):
                pass  # already stopped

        kill = KillSwitch(stop_container, notes)

        flood = limits.log_bytes * FLOOD_FACTOR
        tails = {
            name: OutputTail(limits.log_bytes, flood, lambda n=name: kill(f"{NOTE_OUTPUT_FLOOD}: {n} passed "
                                                                           f"{flood} bytes"))
            for name in ("stdout", "stderr")
        }
        live = _Live(container, kill, notes, tails,
                     DiskWatch(watched, base_bytes + limits.tmpfs_bytes, base_files + MAX_NEW_ENTRIES, kill))
        try:
            # Attach before start so nothing printed early is missed; the log driver caps what the daemon keeps.
            for name in ("stdout", "stderr"):
                stream = container.attach(stdout=name == "stdout", stderr=name == "stderr", stream=True,
                                          logs=True)
                thread = threading.Thread(target=pump, args=(stream, tails[name]), daemon=True)
                thread.start()
                live.pumps.append(thread)
            container.start()
            live.started = time.monotonic()
            live.disk.start()
        except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
            self._end(live)
            raise SandboxError(f"docker run failed: {exc}") from exc
        return live

    def _finish(self, live: _Live, limits: Limits, cleanup: ExitStack) -> RunOutcome:
        container, kill = live.container, live.kill
        timed_out = False
        try:
            try:
                result = container.wait(timeout=max(limits.wall_seconds, 0.1))
            except requests.exceptions.RequestException:  # ReadTimeout / ConnectionError: our wall clock ran out
                timed_out = not kill.fired.is_set()
                kill(f"wall-clock limit of {limits.wall_seconds:g} s reached")
                result = container.wait(timeout=KILL_GRACE_SECONDS)
            wall = time.monotonic() - live.started
            live.disk.stop()
            if not kill.fired.is_set():
                live.disk.check()  # a last look: a fast fill can finish between two polls
            container.reload()
            exit_code = int(result.get("StatusCode", -1))
            oom = bool(container.attrs.get("State", {}).get("OOMKilled", False))
        except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
            raise SandboxError(f"docker run failed: {exc}") from exc
        finally:
            try:
                self._end(live)
            finally:
                cleanup.close()
        # docker-init reports a child killed by signal N as 128+N.
        signal = exit_code - 128 if exit_code > 128 else None
        if oom:
            live.notes.append("memory limit reached (cgroup OOM kill)")
        return RunOutcome(
            exit_code=None if (timed_out or signal) else exit_code,
            signal=signal,
            timed_out=timed_out,
            oom_killed=oom,
            wall_seconds=wall,
            stdout_tail=live.tails["stdout"].text(),
            stderr_tail=live.tails["stderr"].text(),
            notes=live.notes,
        )

    def _end(self, live: _Live) -> None:
        live.disk.stop()
        self._remove(live.container)
        for thread in live.pumps:
            thread.join(timeout=5)

    def _create(self, phase: Phase, argv: list[str], mounts: Mounts, limits: Limits,
                env: dict[str, str] | None, uid: int, gid: int) -> docker.models.containers.Container:
        job = uuid.uuid4().hex[:12]
        build_ro = phase is not Phase.BUILD
        try:
            return self.client.containers.create(
                self.image,
                argv,
                name=f"bang-grader-{phase}-{job}",
                labels={RUN_LABEL: "1", OWNER_LABEL: str(os.getpid()), HOST_LABEL: socket.gethostname(),
                        "org.bang-grader.phase": str(phase)},
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

    def _remove(self, container: docker.models.containers.Container) -> None:
        try:
            container.remove(force=True, v=True)
        except docker.errors.NotFound:
            pass
        except (docker.errors.APIError, requests.exceptions.RequestException):
            # Left for the sweep (sweep_leftovers) rather than hiding the run's real outcome.
            pass


def sweep_leftovers(client: docker.DockerClient | None = None, only_dead_owners: bool = False) -> list[str]:
    """Removes containers we created and lost (grader crash, daemon hiccup); returns their names.

    With `only_dead_owners`, containers whose creating grader process is still alive are left alone, so a
    concurrent batch run is not disturbed."""
    def lost(labels: dict[str, str]) -> bool:
        owner = labels.get(OWNER_LABEL, "")
        return not only_dead_owners or (labels.get(HOST_LABEL) == socket.gethostname() and owner.isdigit()
                                        and not _pid_alive(int(owner)))

    return _remove_where(client or docker.from_env(timeout=60), RUN_LABEL, lost)


def remove_containers_of(owner: int, client: docker.DockerClient | None = None) -> list[str]:
    """Removes the containers the grader process `owner` of this host created (grader.sandbox.reaper, once it
    is dead)."""
    return _remove_where(client or docker.from_env(timeout=60), f"{OWNER_LABEL}={owner}",
                         lambda labels: labels.get(HOST_LABEL) == socket.gethostname() and RUN_LABEL in labels)


def container_summaries(client: docker.DockerClient, label: str) -> list[dict]:
    """The list endpoint's summaries (Id, Names, Labels, Command) of the containers carrying `label`, not
    containers.list(): that inspects each container afterwards, and one that a concurrent grading (or a
    finishing run) removes in between raises NotFound for the whole listing."""
    return client.api.containers(all=True, filters={"label": label})


def summary_name(summary: dict) -> str:
    return str((summary.get("Names") or [summary["Id"]])[0]).lstrip("/")


def _remove_where(client: docker.DockerClient, label: str, chosen: Callable[[dict[str, str]], bool]) -> list[str]:
    removed = []
    for summary in container_summaries(client, label):
        if not chosen(summary.get("Labels") or {}):
            continue
        try:
            client.api.remove_container(summary["Id"], force=True, v=True)
            removed.append(summary_name(summary))
        except docker.errors.NotFound:
            pass
    return removed


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
