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
import contextlib
import dataclasses
import errno
import json
import os
import re
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
    SLOT_UNPARKED,
)
from docker.types import LogConfig, Mount, Ulimit

from grader.sandbox.base import Limits, Mounts, Phase, RunOutcome, SandboxError, Started
from grader.sandbox.docker_settings import (
    ADOPTED_BY,
    CGROUP_PARENT_ENV,
    PARKED_NAME,
    SECCOMP_PROFILE,
    SLOT_NAME,
    container_labels,
    pids_limit,
)
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
# Parked slots (issue 41: a warm `grade submit` waited ~1.5 s for its slot's start and torch import): a process that
# asked for it (park_at_exit) leaves its idle slots, at its exit, to the next grader process on this host for
# PARK_ENV's seconds (0: never park, never adopt). See park_at_exit.
PARK_ENV = "BANG_GRADER_PARK_SECONDS"
PARK_SECONDS = 300.0
PARKED_ROOT = "bang-grader-slots-parked"
SLOT_STORE = "bang-grader-slot-store"
PARKED_PER_KEY = 1
ADOPT_SECONDS = 2.0  # the zygote's answer to "unpark": it listens, or the slot is removed and a new one made
ADOPT_MARGIN_SECONDS = 15.0  # a parked slot this close to ending itself is removed, not adopted
_SLOT_ID = re.compile(r"[0-9a-f]{12}")  # Slot.id: a slot's folder and container name


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


def park_seconds() -> float:
    """How long a parked slot waits for a process to adopt it (PARK_ENV; 0: slots are neither parked nor adopted)."""
    try:
        return max(0.0, float(os.environ.get(PARK_ENV, PARK_SECONDS)))
    except ValueError:
        return 0.0


def _parked_root() -> Path | None:
    """The folder parked slots wait in (each slot's folder, moved there, beside its record): this user's own,
    private; None when the name is held by anything else (then nothing is parked or adopted)."""
    return _own_folder(PARKED_ROOT)


def _slot_store() -> Path | None:
    """Where each slot's files are (SLOT_STORE/<id>): its folder is a bind of them, a mount that can be moved from
    one process's folder to the parked one and on to an adopter's (a mount whose own directory was removed cannot
    be moved: the store stays put while the slot lives)."""
    return _own_folder(SLOT_STORE)


def _own_folder(name: str) -> Path | None:
    """A folder of the temp dir that this user owns and no one else may enter, made if missing; None when the
    name is held by anything else."""
    root = Path(tempfile.gettempdir()) / name
    try:
        root.mkdir(mode=0o700, exist_ok=True)
        info = os.lstat(root)
    except OSError:
        return None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o077:
        return None
    return root


def _park_key(image: str, limits: Limits) -> str:
    """What a parked slot must match to be adopted: its image, its limits (_slot_key) and its cgroup parent."""
    _, held = _slot_key(image, limits)
    return json.dumps([image, dataclasses.asdict(held), os.environ.get(CGROUP_PARENT_ENV, "")], sort_keys=True)


def release_slot_mounts_of(owner: int) -> list[Path]:
    """Unmounts (lazily) what grader process `owner` mounted for its slots (the reaper, once it is dead), and
    removes the files of the slots it held then (a slot it parked is not under its folder any more)."""
    root = _slot_root(owner)
    released = _release_under(root)
    store = _slot_store()
    for point in released:
        if store is not None and point.parent == root and _SLOT_ID.fullmatch(point.name):
            shutil.rmtree(store / point.name, ignore_errors=True)
    return released


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
        self.id = uuid.uuid4().hex[:12]
        store = _slot_store()
        if store is None:
            raise SandboxError(f"{Path(tempfile.gettempdir()) / SLOT_STORE} is not this user's own private folder")
        self.store = store / self.id
        self.folder = _slot_root(os.getpid()) / self.id
        self.store.mkdir()
        self.folder.mkdir(parents=True)
        self.jobs = 0
        self.dead = False
        self.container_id: str | None = None
        self.init_pid: int | None = None  # on the host's pid namespace (a local daemon: slots_possible)
        self.control: int | None = None
        try:
            # a shared mount of its own: the binds made under it later propagate into the container (rslave)
            _run(["mount", "--bind", str(self.store), str(self.folder)])
            _run(["mount", "--make-private", str(self.folder)])
            _run(["mount", "--make-shared", str(self.folder)])
            os.mkfifo(self.folder / SLOT_CONTROL, 0o600)
            os.chown(self.folder / SLOT_CONTROL, *_sandbox_ids())
            os.chown(self.folder, *_sandbox_ids())  # the store's folder, through the bind
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
                name=f"{SLOT_NAME}{self.id}", user=f"{uid}:{gid}", working_dir="/tmp",
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

    def park(self, root: Path, seconds: float) -> bool:
        """Left for the next grader process (an idle slot, at this one's exit): its folder moved under `root` (out
        of this process's, which its reaper releases), its container renamed parked (no process's, for the reaper
        and the sweep), its zygote told to end after `seconds` idle, and its record written beside it, last: only
        a slot parked whole is adopted. False when it could not be (the caller closes it)."""
        if self.dead or self.control is None or not self.running():
            return False
        parked = root / self.id
        try:
            parked.mkdir()
            _run(["mount", "--move", str(self.folder), str(parked)])
        except (OSError, SandboxError):
            with contextlib.suppress(OSError):
                parked.rmdir()
            return False
        with contextlib.suppress(OSError):
            self.folder.rmdir()  # the mount point left behind, empty
        self.folder = parked  # closed from here on, it is released there
        try:
            # told first, renamed next: a parker killed in between leaves a slot that ends itself, or its reaper's
            self.ask({"op": "park", "seconds": seconds})
            self.client.api.rename(self.container_id, f"{PARKED_NAME}{self.id}")
            record = {"id": self.id, "key": _park_key(self.image, self.limits), "container": self.container_id,
                      "jobs": self.jobs, "masks": list(self.masks), "parked_at": time.time(), "seconds": seconds}
            partial = root / f".{self.id}.json"
            fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            with os.fdopen(fd, "w") as out:
                json.dump(record, out)
            os.replace(partial, root / f"{self.id}.json")
        except (OSError, SandboxError, docker.errors.DockerException, requests.exceptions.RequestException):
            return False
        os.close(self.control)
        self.control = None
        return True

    @classmethod
    def adopt(cls, client: docker.DockerClient, image: str, limits: Limits, record: dict, root: Path) -> Slot:
        """A parked slot (its record claimed by this process) made this process's: its folder moved under ours,
        its container renamed ours, its zygote's answer to "unpark" awaited. Raises SandboxError, the slot removed,
        when any of that fails."""
        store = _slot_store()
        if not _well_formed(record) or store is None:
            raise SandboxError(f"a parked slot's record names no slot: {str(record.get('id'))[:40]!r}")
        slot = cls.__new__(cls)
        slot.client, slot.image, slot.limits = client, image, limits
        slot.id = str(record["id"])
        slot.masks = (list(record["masks"][0]), list(record["masks"][1]))
        slot.jobs = int(record["jobs"])  # job numbers go on: a folder of an earlier job is never met again
        slot.dead, slot.control, slot.init_pid = False, None, None
        slot.container_id = str(record["container"])
        slot.folder = root / slot.id
        slot.store = store / slot.id
        try:
            watch_this_process()  # before it is ours: our reaper removes it if we die holding it
            folder = _slot_root(os.getpid()) / slot.id
            folder.mkdir(parents=True)
            _run(["mount", "--move", str(slot.folder), str(folder)])
            (root / slot.id).rmdir()
            slot.folder = folder
            state = client.api.inspect_container(slot.container_id)
            if (state.get("Name", "").lstrip("/") != f"{PARKED_NAME}{slot.id}" or state["Config"]["Image"] != image
                    or not state["State"]["Running"]):
                raise SandboxError(f"parked slot {slot.id} is not the container its record names, or has ended")
            slot.init_pid = int(state["State"]["Pid"]) or None
            client.api.rename(slot.container_id, f"{SLOT_NAME}{slot.id}{ADOPTED_BY}{os.getpid()}")
            # the folder has held jobs since this host made the FIFO: opened only as the FIFO it was
            slot.control = os.open(slot.folder / SLOT_CONTROL,
                                   os.O_WRONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
            if not stat.S_ISFIFO(os.fstat(slot.control).st_mode):
                raise SandboxError(f"parked slot {slot.id}'s control is not its FIFO")
            token = uuid.uuid4().hex
            slot.ask({"op": "unpark", "token": token})
            deadline = time.monotonic() + ADOPT_SECONDS
            while _small_text(slot.folder / SLOT_UNPARKED) != token:
                if time.monotonic() > deadline or not slot.running():
                    raise SandboxError(f"parked slot {slot.id}'s zygote did not answer")
                time.sleep(POLL_SECONDS / 4)
        except (OSError, KeyError, TypeError, ValueError, SandboxError, docker.errors.DockerException,
                requests.exceptions.RequestException) as exc:
            slot.close()
            raise SandboxError(f"could not adopt parked slot {slot.id}: {exc}") from exc
        return slot

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
        shutil.rmtree(self.store, ignore_errors=True)


def _small_text(path: Path, cap: int = 256) -> str | None:
    """A short regular file's text (the zygote's answer), None when it is not there or is anything else."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return os.read(fd, cap).decode("utf-8", "replace")
    finally:
        os.close(fd)


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
    parking: bool = False  # park_at_exit: idle slots are parked at the exit, not removed

    def take(self, client: docker.DockerClient, image: str, limits: Limits) -> Slot:
        key = _slot_key(image, limits)
        with self.lock:
            while self.free.get(key):
                slot = self.free[key].pop()
                if slot.running():
                    return slot
                slot.close()
        if not self.exit_hook:
            atexit.register(self.close_all)
            self.exit_hook = True
        adopted = _adopt_parked(client, image, limits)
        if adopted is not None:
            return adopted
        watch_this_process()
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
        """Every idle slot removed, all at once (a worker's end waits for it); parked instead, as far as
        PARKED_PER_KEY allows, when this process parks at its exit."""
        with self.lock:
            slots = [s for group in self.free.values() for s in group]
            self.free.clear()
        seconds, root = park_seconds(), _parked_root() if self.parking else None
        if self.parking and seconds > 0 and root is not None:
            slots = [slot for slot in slots if not (_parked_count(root, slot) < PARKED_PER_KEY
                                                    and slot.park(root, seconds))]
        closing = [threading.Thread(target=slot.close, daemon=True) for slot in slots]
        for thread in closing:
            thread.start()
        for thread in closing:
            thread.join(timeout=60)


def park_at_exit() -> None:
    """This process (a one-shot `grade submit`) parks its idle slots at its exit for the next grader process on this
    host, which adopts one instead of starting a container and importing torch (~1.5 s of a warm submit). A parked
    slot is nobody's: the reaper and the sweep leave it while it runs, its zygote ends it after PARK_ENV's seconds
    idle, and an adopter makes it its own (then its reaper's) before the first job. Jobs in it are confined as in any
    slot (each in namespaces of its own): what one grading leaves in a slot, the next never sees."""
    _POOL.parking = True


def parks_at_exit() -> bool:
    """Whether this process parks its slots at its exit (park_at_exit, and PARK_ENV not 0): then even its one-shot
    grading runs in slots, which the next process adopts."""
    return _POOL.parking and park_seconds() > 0


def _parked_records(root: Path) -> list[tuple[Path, dict]]:
    """The parked slots' records under root, the newest first (records this process cannot read are passed over)."""
    found = []
    for path in root.glob("*.json"):
        if path.name.startswith("."):
            continue  # a record being written
        try:
            info = os.lstat(path)
            if stat.S_ISREG(info.st_mode) and info.st_uid == os.geteuid() and info.st_size < 65536:
                record = json.loads(path.read_text())
                if _well_formed(record):
                    found.append((path, record))
        except (OSError, ValueError):
            continue
    return sorted(found, key=lambda pair: float(pair[1]["parked_at"]), reverse=True)


def _well_formed(record: object) -> bool:
    """A parked slot's record as Slot.park writes it (anything else is passed over, never adopted)."""
    if not isinstance(record, dict):
        return False
    masks = record.get("masks")
    return (isinstance(record.get("id"), str) and bool(_SLOT_ID.fullmatch(record["id"]))
            and isinstance(record.get("key"), str) and isinstance(record.get("container"), str)
            and isinstance(record.get("jobs"), int) and isinstance(masks, list) and len(masks) == 2
            and all(isinstance(m, list) and all(isinstance(p, str) for p in m) for m in masks)
            and all(isinstance(record.get(n), int | float) for n in ("parked_at", "seconds")))


def _parked_count(root: Path, slot: Slot) -> int:
    key = _park_key(slot.image, slot.limits)
    return sum(1 for _, record in _parked_records(root) if record.get("key") == key)


def _adopt_parked(client: docker.DockerClient, image: str, limits: Limits) -> Slot | None:
    """A parked slot of this image and these limits made ours, or None (none parked, or none that answers).
    Records claimed along the way whose slots have ended, or will within ADOPT_MARGIN_SECONDS, are removed."""
    root = _parked_root() if park_seconds() > 0 else None
    if root is None:
        return None
    key = _park_key(image, limits)
    for path, record in _parked_records(root):
        ending = float(record["parked_at"]) + float(record["seconds"])
        if record.get("key") != key and time.time() < ending:
            continue
        claimed = path.with_name(f"{path.name}.{os.getpid()}")
        try:
            os.rename(path, claimed)  # one claimant only: another process's rename finds nothing
            claimed.unlink()
        except OSError:
            continue
        if record.get("key") == key and time.time() < ending - ADOPT_MARGIN_SECONDS:
            try:
                return Slot.adopt(client, image, limits, record, root)
            except SandboxError:
                continue
        _remove_parked(client, record, root)
    return None


def _remove_parked(client: docker.DockerClient, record: dict, root: Path) -> None:
    """A parked slot that will not be adopted: its container removed, its folder released."""
    with contextlib.suppress(docker.errors.DockerException, requests.exceptions.RequestException, KeyError):
        client.api.remove_container(str(record["container"]), force=True)
    if _SLOT_ID.fullmatch(str(record.get("id"))):
        _release_under(root / str(record["id"]))
        store = _slot_store()
        if store is not None:
            shutil.rmtree(store / str(record["id"]), ignore_errors=True)


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
