"""Run sandboxes in a slot container (DESIGN "a zygote per worker slot"; issue 41): the host's side.

A slot is one long-lived container of the emulation image whose first process, the zygote (bang_harness.zygote),
imported torch once; each of a grading's run-phase sandboxes -- the rounds' keeper, the trusted replay's keeper (or
one replay): bang_harness.protocol.SLOT_COMMANDS -- is a job the zygote
confines in namespaces of its own (bang_harness.slot) instead of a container of its own, so a grading no longer pays
a container start per sandbox, nor the rounds a torch import. The supervision is the one every runner has (grader.sandbox.supervise): the io cap, the writable folders,
the output tails, the disk watch, the wall limit. Only the substrate differs (`_SlotJob`).

Where it runs: only where the host can lay a grading's folders into the slot -- root, and a Docker daemon that
shares our mount namespace (the io cap's condition) -- for the run phase of the emulator backend, unless
BANG_GRADER_SLOTS=0. Anything else, and any failure of the slot itself (its start, the zygote's answer), runs a
plain container (DockerRunner), never blamed on the student. A slot holds one job at a time and is kept per
process and per (image, limits): a batch worker or a server slot grades one submission after another in it (the
rounds in one slot, the replay, whose limits differ, in another, at the same time); at most FREE_PER_KEY idle
slots of a kind are kept, the rest removed as they come back.

The host lays job k's folders under the slot's folder (bound on /slot, a shared mount on the host, slave in the
container): `mount --bind` of the grading's io, submission and build on <slot>/k/{io,submission,build}, and
FIFOs <slot>/k/{stdout,stderr} it reads; it asks the zygote through <slot>/control and reads the job's end from
<slot>/k/status.json (C's exit status: the kernel's word, not the job's). A kill is asked of the zygote; a
zygote that has not ended the job within KILL_GRACE_SECONDS gets its container killed, and the slot is replaced.
The reaper (grader.sandbox.reaper) unmounts a dead grader's binds (release_slot_mounts_of).
"""

from __future__ import annotations

import atexit
import dataclasses
import errno
import json
import os
import select
import shutil
import stat
import subprocess
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import docker
import docker.errors
import requests
from bang_harness.protocol import (
    SLOT_ARGV_PREFIX,
    SLOT_CONTROL,
    SLOT_DIR,
    SLOT_READY,
    SLOT_STARTED,
    SLOT_STATUS,
)
from docker.types import LogConfig, Mount, Ulimit

from grader.sandbox.base import Limits, Mounts, Phase, RunOutcome, SandboxError, Started
from grader.sandbox.docker_settings import CGROUP_PARENT_ENV, SECCOMP_PROFILE, container_labels, pids_limit
from grader.sandbox.io_cap import _unescape_mountinfo, can_cap, same_mount_namespace_as
from grader.sandbox.layout import sandbox_env
from grader.sandbox.lifeline import watch_this_process
from grader.sandbox.supervise import Ending, supervise

SLOTS_ENV = "BANG_GRADER_SLOTS"
SLOT_PROFILE = SECCOMP_PROFILE.with_name("slot-profile.json")
PROFILE_IN_SLOT = "/opt/bang-grader/run-profile.json"
READY_SECONDS = 120.0  # the zygote's imports (torch) on a loaded machine
CONFINE_SECONDS = 30.0  # a job confined takes ~20 ms; a zygote silent this long is replaced
KILL_GRACE_SECONDS = 5.0
POLL_SECONDS = 0.02
SLOT_ROOT_PREFIX = "bang-grader-slots-"
FREE_PER_KEY = 1  # idle slots kept per (image, limits): a process grades one submission at a time
CGROUP = Path("/sys/fs/cgroup")


def slots_wanted() -> bool:
    """Unless BANG_GRADER_SLOTS=0 (plain containers, as before stop 54)."""
    return os.environ.get(SLOTS_ENV, "1") != "0"


def slots_possible() -> bool:
    """Root (the binds), mount and umount, and a local daemon that sees our mounts."""
    return os.geteuid() == 0 and can_cap() and same_mount_namespace_as()


def _run(argv: list[str]) -> None:
    done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        raise SandboxError(f"{' '.join(argv)}: {done.stderr.strip()}")


def _slot_root(owner: int) -> Path:
    return Path(tempfile.gettempdir()) / f"{SLOT_ROOT_PREFIX}{owner}"


def release_slot_mounts_of(owner: int) -> list[Path]:
    """Unmounts (lazily) what grader process `owner` mounted for its slots (the reaper, once it is dead)."""
    return _release_under(_slot_root(owner))


def _release_under(folder: Path) -> list[Path]:
    """Every mount at or under `folder` unmounted lazily, the deepest first, then the folder removed; returns the
    mount points released (read from this process's mountinfo)."""
    root = str(folder)
    try:
        lines = Path("/proc/self/mountinfo").read_text(errors="surrogateescape").splitlines()
    except OSError:
        lines = []
    points = [Path(_unescape_mountinfo(fields[4])) for fields in map(str.split, lines) if len(fields) > 4]
    released = []
    for point in sorted((p for p in points if str(p) == root or str(p).startswith(root + "/")),
                        key=lambda p: len(p.parts), reverse=True):
        if subprocess.run(["umount", "-l", str(point)], stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL).returncode == 0:
            released.append(point)
    shutil.rmtree(folder, ignore_errors=True)
    return released


def docker_masks(client: docker.DockerClient, image: str) -> tuple[list[str], list[str]]:
    """What Docker hides of /proc and /sys in a plain container here (created, never started, inspected): the
    slot runs without them (a fresh /proc per job needs that) and lays them over each job's own /proc."""
    container = client.api.create_container(image, command=["true"], host_config=client.api.create_host_config(),
                                            labels=container_labels("masks"))
    try:
        host = client.api.inspect_container(container["Id"])["HostConfig"]
        return list(host.get("MaskedPaths") or []), list(host.get("ReadonlyPaths") or [])
    finally:
        client.api.remove_container(container["Id"], force=True)


class Slot:
    """One slot container and its host folder; one job at a time."""

    def __init__(self, client: docker.DockerClient, image: str, limits: Limits,
                 masks: tuple[list[str], list[str]]) -> None:
        self.client, self.image, self.limits, self.masks = client, image, limits, masks
        self.folder = _slot_root(os.getpid()) / uuid.uuid4().hex[:12]
        self.folder.mkdir(parents=True)
        self.jobs = 0
        self.dead = False
        self.container_id: str | None = None
        self.init_pid: int | None = None  # on the host's pid namespace (a local daemon: slots_possible)
        self.control: int | None = None
        try:
            # a shared mount of its own: the binds made under it later propagate into the container (rslave)
            _run(["mount", "--bind", str(self.folder), str(self.folder)])
            _run(["mount", "--make-private", str(self.folder)])
            _run(["mount", "--make-shared", str(self.folder)])
            os.mkfifo(self.folder / SLOT_CONTROL, 0o600)
            os.chown(self.folder / SLOT_CONTROL, *_sandbox_ids())
            os.chown(self.folder, *_sandbox_ids())
            self._start_container()
            self._wait_ready()
            self.control = os.open(self.folder / SLOT_CONTROL, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except BaseException:
            self.close()
            raise

    def _start_container(self) -> None:
        limits = self.limits
        uid, gid = _sandbox_ids()
        host_config = self.client.api.create_host_config(
            network_mode="none", read_only=True, cap_drop=["ALL"],
            security_opt=["no-new-privileges", "seccomp=" + SLOT_PROFILE.read_text()],
            tmpfs={p: "rw,nosuid,nodev,size=1m,mode=755" for p in ("/io", "/submission", "/build")} |
            {"/tmp": f"rw,nosuid,nodev,noexec,size={limits.tmpfs_bytes},mode=1777"},
            mounts=[Mount(SLOT_DIR, str(self.folder), type="bind", propagation="rslave"),
                    Mount(PROFILE_IN_SLOT, str(SECCOMP_PROFILE), type="bind", read_only=True)],
            pids_limit=pids_limit(limits.pids, None), mem_limit=int(limits.memory_bytes),
            memswap_limit=int(limits.memory_bytes), nano_cpus=int(limits.cpus * 1e9), shm_size=64 << 20,
            ipc_mode="private", init=True,
            ulimits=[Ulimit(name="core", soft=0, hard=0),
                     Ulimit(name="nofile", soft=limits.open_files, hard=limits.open_files),
                     Ulimit(name="fsize", soft=limits.file_size_bytes, hard=limits.file_size_bytes)],
            log_config=LogConfig(type="json-file", config={"max-size": "1m", "max-file": "1"}),
            **({"cgroup_parent": parent} if (parent := os.environ.get(CGROUP_PARENT_ENV)) else {}))
        host_config["MaskedPaths"] = []  # the zygote's own view; each job gets Docker's masks back (docker_masks)
        host_config["ReadonlyPaths"] = []
        try:
            created = self.client.api.create_container(
                self.image, command=[*SLOT_ARGV_PREFIX, "zygote", "--profile", PROFILE_IN_SLOT],
                name=f"bang-grader-slot-{uuid.uuid4().hex[:12]}", user=f"{uid}:{gid}", working_dir="/tmp",
                environment=sandbox_env(Phase.RUN), host_config=host_config,
                labels=container_labels("slot"))
            self.container_id = created["Id"]
            self.client.api.start(self.container_id)
            self.init_pid = int(self.client.api.inspect_container(self.container_id)["State"]["Pid"]) or None
        except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
            raise SandboxError(f"could not start a slot container: {exc}") from exc

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + READY_SECONDS
        while not (self.folder / SLOT_READY).exists():
            if time.monotonic() > deadline or not self.running():
                raise SandboxError(f"the slot's zygote did not start: {self.logs()[-2000:]}")
            time.sleep(0.05)

    def running(self) -> bool:
        """The container's first process (docker-init) still there, read from the host's /proc: asked every poll
        of a job, so never a request to the daemon."""
        if self.container_id is None or self.dead or self.init_pid is None:
            return False
        try:
            state = Path(f"/proc/{self.init_pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return False
        return state not in ("Z", "X")

    def oom_kills(self) -> int:
        """How many processes the kernel's OOM killer has taken in the slot's memory cgroup (v1 memory.oom_control,
        v2 memory.events); 0 when it cannot be read."""
        if self.container_id is None:
            return 0
        parent = os.environ.get(CGROUP_PARENT_ENV, "/docker").strip("/") or "docker"
        for path, prefix in ((CGROUP / "memory" / parent / self.container_id / "memory.oom_control", "oom_kill "),
                             (CGROUP / parent / self.container_id / "memory.events", "oom_kill ")):
            try:
                for line in path.read_text().splitlines():
                    if line.startswith(prefix):
                        return int(line.split()[1])
            except (OSError, ValueError):
                continue
        return 0

    def logs(self) -> str:
        try:
            return self.client.api.logs(self.container_id, stdout=True, stderr=True).decode("utf-8", "replace")
        except (docker.errors.DockerException, requests.exceptions.RequestException, TypeError):
            return ""

    def ask(self, request: dict[str, Any]) -> None:
        if self.control is None:
            raise SandboxError("the slot is closed")
        try:
            os.write(self.control, json.dumps(request).encode("utf-8") + b"\n")
        except OSError as exc:
            raise SandboxError(f"the slot's zygote does not listen: {exc}") from exc

    def close(self) -> None:
        """The container removed, every mount under the folder released, the folder removed."""
        self.dead = True
        if self.control is not None:
            os.close(self.control)
            self.control = None
        if self.container_id is not None:
            try:
                self.client.api.remove_container(self.container_id, force=True)
            except (docker.errors.DockerException, requests.exceptions.RequestException):
                pass  # the reaper and the sweep at the next start remove it
            self.container_id = None
        _release_under(self.folder)


def _sandbox_ids() -> tuple[int, int]:
    from grader.sandbox.layout import sandbox_user

    return sandbox_user()


class _FifoStream:
    """A job's stdout or stderr FIFO as supervise's pump reads it: data as it comes, the end once the zygote's
    writer (C's, then the job's processes') is closed after it was opened, or once the job has ended."""

    def __init__(self, path: Path, ended: threading.Event) -> None:
        self.fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        self.ended = ended
        self.opened = False

    def read1(self, size: int) -> bytes:
        while True:
            try:
                chunk = os.read(self.fd, size)
            except BlockingIOError:  # a writer holds it open, nothing to read yet
                self.opened = True
                select.select([self.fd], [], [], 0.2)
                continue
            except OSError as exc:
                if exc.errno == errno.EBADF:
                    return b""
                raise
            if chunk:
                self.opened = True
                return chunk
            if self.opened or self.ended.is_set():
                return b""
            time.sleep(POLL_SECONDS)  # no writer yet: the zygote has not started the job

    def close(self) -> None:
        try:
            os.close(self.fd)
        except OSError:
            pass


class _SlotJob:
    """One run sandbox as a job of a slot, as the supervision drives it (grader.sandbox.supervise.Sandboxed)."""

    def __init__(self, slot: Slot, mounts: Mounts, argv: list[str], env: dict[str, str], limits: Limits) -> None:
        self.slot, self.mounts, self.argv, self.env, self.limits = slot, mounts, argv, env, limits
        slot.jobs += 1
        self.k = slot.jobs
        self.folder = slot.folder / str(self.k)
        self.ended = threading.Event()
        self.status: dict[str, Any] | None = None
        self.streams: list[_FifoStream] = []
        self.kill_asked: float | None = None
        self.container_killed = False
        self.oom_before = slot.oom_kills()

    def start(self) -> dict[str, Any]:
        self.folder.mkdir()
        uid, gid = _sandbox_ids()
        for name, source in (("io", self.mounts.io), ("submission", self.mounts.submission),
                             ("build", self.mounts.build)):
            (self.folder / name).mkdir()
            _run(["mount", "--rbind", str(source), str(self.folder / name)])
        for name in ("stdout", "stderr"):
            os.mkfifo(self.folder / name, 0o600)
            os.chown(self.folder / name, uid, gid)
        os.chown(self.folder, uid, gid)
        self.streams = [_FifoStream(self.folder / name, self.ended) for name in ("stdout", "stderr")]
        masked, read_only = self.slot.masks
        self.slot.ask({"op": "run", "job": self.k, "argv": self.argv, "env": sandbox_env(Phase.RUN, self.env),
                       "tmp_bytes": self.limits.tmpfs_bytes, "masks": [masked, read_only]})
        started = self._confined()
        if started is not True:
            # the job never ran: the slot's failure, not the student's -- the caller runs a plain container
            if not self.wait(KILL_GRACE_SECONDS):
                self._kill_container()
            raise SandboxError(f"the slot could not confine the job: {started}")
        return {"stdout": self.streams[0], "stderr": self.streams[1]}

    def _confined(self) -> bool | str:
        """True once the zygote says the job's pid 1 is confined, else why not (CONFINE_SECONDS at most)."""
        path = self.folder / SLOT_STARTED
        deadline = time.monotonic() + CONFINE_SECONDS
        while True:
            try:
                info = os.lstat(path)
                if not stat.S_ISREG(info.st_mode) or info.st_size > 16384:
                    return f"{path} is not the zygote's"
                said = json.loads(path.read_text())
                if not isinstance(said, dict) or said.get("job") != self.k:
                    return f"{path} is not job {self.k}'s"
                return True if said.get("confined") is True else str(said.get("why"))[:2000]
            except FileNotFoundError:
                pass
            except (OSError, ValueError) as exc:
                return f"{path} unreadable: {exc}"
            if time.monotonic() > deadline or not self.slot.running():
                self.slot.dead = True
                return f"no answer from the slot's zygote: {self.slot.logs()[-1000:]}"
            time.sleep(POLL_SECONDS / 4)

    def _status(self) -> dict[str, Any] | None:
        path = self.folder / SLOT_STATUS
        try:
            info = os.lstat(path)
            if not stat.S_ISREG(info.st_mode) or info.st_size > 4096:
                return {"code": None}
            found = json.loads(path.read_text())
            return found if isinstance(found, dict) and found.get("job") == self.k else {"code": None}
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            return {"code": None}

    def wait(self, seconds: float | None) -> bool:
        deadline = time.monotonic() + (KILL_GRACE_SECONDS if seconds is None else seconds)
        while True:
            self.status = self._status()
            if self.status is not None:
                self.ended.set()
                return True
            if not self.slot.running():
                self.status = {"code": None, "slot_gone": True}
                self.ended.set()
                return True
            if self.kill_asked is not None and time.monotonic() - self.kill_asked > KILL_GRACE_SECONDS:
                self._kill_container()
            if time.monotonic() > deadline:
                if seconds is None:  # asked to wait until it is gone after a kill: the zygote did not end it
                    self._kill_container()
                    continue
                return False
            time.sleep(POLL_SECONDS)

    def _kill_container(self) -> None:
        self.container_killed = True
        self.slot.dead = True
        try:
            self.slot.client.api.kill(self.slot.container_id)
        except (docker.errors.DockerException, requests.exceptions.RequestException):
            pass

    def stop(self) -> None:
        if self.kill_asked is None:
            self.kill_asked = time.monotonic()
            try:
                self.slot.ask({"op": "kill", "job": self.k})
            except SandboxError:
                self._kill_container()

    def ending(self, stopped: bool) -> Ending:
        """C's exit status (the job's, or 128 + the signal that ended its pid 1); none when the slot went away
        (a kill we asked for reads as SIGKILL). An OOM kill is the slot's cgroup counting one during the job."""
        code = (self.status or {}).get("code")
        oom = self.slot.oom_kills() > self.oom_before
        if not isinstance(code, int):
            return Ending(code=None, signal=9 if stopped or oom else None, oom_killed=oom)
        if code >= 128:
            return Ending(code=None, signal=code - 128, oom_killed=oom)
        return Ending(code=code, signal=None, oom_killed=oom)

    def close(self) -> None:
        self.ended.set()
        for stream in self.streams:
            stream.close()
        _release_under(self.folder)
        if self.container_killed or not self.slot.running():
            _POOL.discard(self.slot)


@dataclasses.dataclass
class _Pool:
    """The slots of this process, by (image, limits): a slot is lent to one grading at a time."""

    free: dict[tuple, list[Slot]]
    lock: threading.Lock
    exit_hook: bool = False

    def take(self, client: docker.DockerClient, image: str, limits: Limits) -> Slot:
        key = _slot_key(image, limits)
        with self.lock:
            while self.free.get(key):
                slot = self.free[key].pop()
                if slot.running():
                    return slot
                slot.close()
        watch_this_process()
        if not self.exit_hook:
            atexit.register(self.close_all)
            self.exit_hook = True
        return Slot(client, image, limits, _masks(client, image))

    def give_back(self, slot: Slot) -> None:
        if slot.dead or not slot.running():
            slot.close()
            return
        with self.lock:
            idle = self.free.setdefault(_slot_key(slot.image, slot.limits), [])
            if len(idle) < FREE_PER_KEY:
                idle.append(slot)
                return
        slot.close()  # a second one of a kind (two sandboxes of a kind at once): not kept idle

    def discard(self, slot: Slot) -> None:
        slot.close()

    def close_all(self) -> None:
        """Every idle slot removed, all at once (a worker's end waits for it)."""
        with self.lock:
            slots = [s for group in self.free.values() for s in group]
            self.free.clear()
        closing = [threading.Thread(target=slot.close, daemon=True) for slot in slots]
        for thread in closing:
            thread.start()
        for thread in closing:
            thread.join(timeout=60)


def _slot_key(image: str, limits: Limits) -> tuple:
    """What a slot container is made with: its image and the limits it holds (not a job's wall limit)."""
    return image, dataclasses.replace(limits, wall_seconds=0.0, log_bytes=0)


_POOL = _Pool({}, threading.Lock())
_MASKS: dict[str, tuple[list[str], list[str]]] = {}


def _masks(client: docker.DockerClient, image: str) -> tuple[list[str], list[str]]:
    if image not in _MASKS:
        _MASKS[image] = docker_masks(client, image)
    return _MASKS[image]


def close_slots() -> None:
    """Every slot of this process removed (a batch's or a worker's end; the reaper covers a kill)."""
    _POOL.close_all()


def start_in_slot(client: docker.DockerClient, image: str, mounts: Mounts, argv: list[str], limits: Limits,
                  env: dict[str, str] | None, cap_io: bool) -> tuple[Started, str]:
    """The run sandbox as a job of one of this process's slots (taken for the job, given back after it); raises
    SandboxError when no slot can be had (the caller starts a plain container)."""
    slot = _POOL.take(client, image, limits)
    try:
        started, note = supervise(Phase.RUN, mounts, limits,
                                  lambda _uid, _gid: _SlotJob(slot, mounts, argv, dict(env or {}), limits),
                                  cap_io=cap_io)
    except BaseException:
        _POOL.give_back(slot)
        raise
    return _GivenBack(started, slot), note


class _GivenBack(Started):
    """A slot job's handle (a Started: waits, stops): the slot goes back to the pool once the job's outcome is in."""

    def __init__(self, inner: Started, slot: Slot) -> None:  # noqa: D107 - no thread of its own: inner's
        self._inner, self._slot, self._returned = inner, slot, False

    def _return(self) -> None:
        if not self._returned:
            self._returned = True
            _POOL.give_back(self._slot)

    def wait(self, timeout: float | None = None) -> RunOutcome | None:
        outcome = self._inner.wait(timeout)
        if outcome is not None:
            self._return()
        return outcome

    def stop(self, reason: str) -> RunOutcome:
        outcome = self._inner.stop(reason)
        self._return()
        return outcome
