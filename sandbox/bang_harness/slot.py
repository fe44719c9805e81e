"""One grading confined inside a long-lived slot container (DESIGN "a zygote per worker slot"; issue 41).

A slot container is started like a run sandbox (read-only root, the sandbox uid, no capabilities,
no-new-privileges, no network, one grading's limits) but under the *slot profile*: the run profile without its
refusals of the namespace and mount calls. Its first process, the zygote, imports torch once and grades one job
after another. `run_confined` is what it does per job, in a child it forks; after `enter_job` the job's
processes

- live in their own user, mount, pid, ipc, uts and network namespaces: no pid, SysV object, abstract socket or
  hostname of the zygote or of an earlier job is theirs to name;
- see the job's own folders only, at the run sandbox's paths (/io read-write; /submission and /build read-only),
  an empty tmpfs over the slot's folder (every job's folders live under it), and fresh tmpfs on /tmp and
  /dev/shm; every one of these mounts is locked (a second user namespace: the kernel refuses to unmount or
  change a mount inherited from a more privileged mount namespace -- MNT_LOCKED);
- hold no capability in any namespace, carry no_new_privs, and carry the run profile itself stacked on the slot
  profile (seccomp filters stack and none can be removed): from there their syscall surface is the run
  sandbox's, which refuses unshare, mount, setns, ptrace and the rest.

The enforcers are the kernel's: namespaces, MNT_LOCKED, seccomp (libseccomp builds the stacked filter from the
same profile.json the run sandbox is started with), the ptrace access rules (the zygote is non-dumpable and its
memory belongs to the container's user namespace, in which a job holds no capability). Nothing here is believed
to see a job's stores.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import signal
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

# sched.h
CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
# sys/mount.h
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MS_NOATIME, MS_NODIRATIME, MS_RELATIME = 1024, 2048, 1 << 21
ST_NOATIME, ST_NODIRATIME, ST_RELATIME = 1024, 2048, 4096
# sys/prctl.h, linux/capability.h
PR_GET_DUMPABLE, PR_SET_DUMPABLE, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS, PR_CAP_AMBIENT = 3, 4, 24, 38, 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
LINUX_CAPABILITY_VERSION_3 = 0x20080522
CAP_LAST_CAP_FILE = "/proc/sys/kernel/cap_last_cap"
# seccomp.h (libseccomp)
SCMP_ACT_ALLOW = 0x7FFF0000
SCMP_ACT_ERRNO = 0x00050000
SCMP_CMP = {"SCMP_CMP_NE": 1, "SCMP_CMP_LT": 2, "SCMP_CMP_LE": 3, "SCMP_CMP_EQ": 4, "SCMP_CMP_GE": 5,
            "SCMP_CMP_GT": 6, "SCMP_CMP_MASKED_EQ": 7}

TMPFS_OPTIONS = b"mode=1777,size=%d"
CONFINED = b"confined"
JOB_NAMESPACES = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWNET


class SlotError(RuntimeError):
    """The slot could not confine a job: the host grades it in a plain container instead (never the student's
    fault)."""


@dataclass(frozen=True)
class JobMounts:
    """Where one job's folders are in the slot container, and where the job sees them."""

    io: Path  # bound read-write on /io
    submission: Path  # read-only on /submission
    build: Path  # read-only on /build
    slot: Path  # the slot's folder: an empty tmpfs is laid over it
    tmp_bytes: int = 256 << 20  # each of /tmp and /dev/shm


class _ScmpArgCmp(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int), ("datum_a", ctypes.c_uint64),
                ("datum_b", ctypes.c_uint64)]


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> int:
    if result < 0:
        errno = ctypes.get_errno()
        raise SlotError(f"{what}: {os.strerror(errno)} (errno {errno})")
    return result


def _unshare(flags: int) -> None:
    _check(_libc.unshare(ctypes.c_int(flags)), f"unshare({flags:#x})")


def _encoded(text: str | None) -> bytes | None:
    return None if text is None else text.encode()


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: bytes | None = None) -> None:
    _check(_libc.mount(_encoded(source), target.encode(), _encoded(fstype), ctypes.c_ulong(flags), data),
           f"mount {source} on {target} ({fstype}, {flags:#x})")


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _write_self(*files: tuple[str, str]) -> None:
    """Writes /proc/self files. A non-dumpable process's are root's, so it is dumpable while it writes them,
    then as before (no process of a job exists yet to attach in between)."""
    was = _check(_libc.prctl(PR_GET_DUMPABLE, 0, 0, 0, 0), "PR_GET_DUMPABLE")
    _check(_libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0), "PR_SET_DUMPABLE")
    try:
        for path, text in files:
            _write(path, text)
    finally:
        _check(_libc.prctl(PR_SET_DUMPABLE, was, 0, 0, 0), "PR_SET_DUMPABLE")


def _map_self(uid: int, gid: int) -> None:
    """The new user namespace maps this process's own uid and gid to themselves (nothing else is mapped)."""
    _write_self(("/proc/self/setgroups", "deny"), ("/proc/self/uid_map", f"{uid} {uid} 1\n"),
                ("/proc/self/gid_map", f"{gid} {gid} 1\n"))


def _locked_flags(path: Path) -> int:
    """The flags of the mount `path` is on that a remount in a user namespace must keep (they are locked)."""
    f = os.statvfs(path).f_flag
    flags = f & (MS_NOSUID | MS_NODEV | MS_NOEXEC)
    flags |= MS_NOATIME if f & ST_NOATIME else 0
    flags |= MS_NODIRATIME if f & ST_NODIRATIME else 0
    flags |= MS_RELATIME if f & ST_RELATIME else 0
    return flags


def _bind(source: Path, target: str, read_only: bool) -> None:
    _mount(str(source), target, None, MS_BIND | MS_REC)
    if read_only:
        _mount(None, target, None, MS_BIND | MS_REMOUNT | MS_RDONLY | _locked_flags(source))


def _tmpfs(target: str, size: int) -> None:
    _mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV, TMPFS_OPTIONS % size)


def drop_capabilities() -> None:
    """Every capability this process holds in its user namespace goes: bounding set, ambient set, then the
    effective, permitted and inheritable sets (capset with all zeros)."""
    last = int(Path(CAP_LAST_CAP_FILE).read_text())
    for cap in range(last + 1):
        _check(_libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0), f"drop capability {cap} from the bounding set")
    _check(_libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), "clear the ambient capabilities")
    header = _CapHeader(LINUX_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    _check(_libc.capset(ctypes.byref(header), data), "capset")


def stack_profile(profile: dict) -> None:
    """Installs `profile` (a Docker seccomp profile: profile.json, allow by default and refuse a list) as one more
    seccomp filter on this process and every process it makes. libseccomp builds the filter; a syscall of
    another architecture than this one is killed (libseccomp's bad-arch action)."""
    if profile.get("defaultAction") != "SCMP_ACT_ALLOW":
        raise SlotError("the run profile is expected to allow by default")
    name = ctypes.util.find_library("seccomp") or "libseccomp.so.2"
    lib = ctypes.CDLL(name, use_errno=True)
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_rule_add_array.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint,
                                           ctypes.POINTER(_ScmpArgCmp)]
    lib.seccomp_load.argtypes = [ctypes.c_void_p]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    ctx = lib.seccomp_init(SCMP_ACT_ALLOW)
    if not ctx:
        raise SlotError("seccomp_init failed")
    try:
        for rule in profile["syscalls"]:
            if rule["action"] != "SCMP_ACT_ERRNO":
                raise SlotError(f"unexpected action {rule['action']} in the run profile")
            action = SCMP_ACT_ERRNO | (int(rule.get("errnoRet", 1)) & 0xFFFF)
            args = rule.get("args") or []
            cmps = (_ScmpArgCmp * max(1, len(args)))()
            for i, arg in enumerate(args):
                cmps[i] = _ScmpArgCmp(arg["index"], SCMP_CMP[arg["op"]], arg["value"], arg.get("valueTwo", 0))
            for name_ in rule["names"]:
                nr = lib.seccomp_syscall_resolve_name(name_.encode())
                if nr < 0:  # not a syscall of this architecture (e.g. a 32-bit-only one)
                    continue
                result = lib.seccomp_rule_add_array(ctypes.c_void_p(ctx), action, nr, len(args), cmps)
                if result < 0:
                    raise SlotError(f"seccomp rule for {name_}: {os.strerror(-result)}")
        result = lib.seccomp_load(ctypes.c_void_p(ctx))
        if result < 0:
            raise SlotError(f"seccomp_load: {os.strerror(-result)}")
    finally:
        lib.seccomp_release(ctypes.c_void_p(ctx))


def _close_fds(keep: Iterable[int]) -> None:
    kept = sorted({fd for fd in keep if fd > 2})
    low = 3
    for fd in [*kept, 1 << 20]:
        if fd > low:
            os.closerange(low, fd)
        low = fd + 1


def enter_job(mounts: JobMounts) -> None:
    """Step 1 (in the zygote's forked child C, which runs only trusted code): new user, mount, pid, ipc, uts and
    network namespaces; the job's folders bound on the run sandbox's paths; tmpfs over the slot's folder, /tmp and
    /dev/shm. C's own pid is outside the new pid namespace: the next process it forks is that namespace's pid 1."""
    uid, gid = os.getuid(), os.getgid()
    _unshare(JOB_NAMESPACES)
    _map_self(uid, gid)
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    _bind(mounts.io, "/io", read_only=False)
    _bind(mounts.submission, "/submission", read_only=True)
    _bind(mounts.build, "/build", read_only=True)
    _tmpfs(str(mounts.slot), 1 << 20)
    os.chmod(mounts.slot, 0o555)
    _tmpfs("/tmp", mounts.tmp_bytes)
    _tmpfs("/dev/shm", mounts.tmp_bytes)


@dataclass(frozen=True)
class ProcMasks:
    """What Docker hides of /proc and /sys in a plain container (its MaskedPaths and ReadonlyPaths, read by the
    host from the daemon): a job's fresh /proc gets the same, locked with the rest."""

    masked: tuple[str, ...] = ()
    read_only: tuple[str, ...] = ()


def _mask(masks: ProcMasks) -> None:
    for path in masks.masked:
        if os.path.isdir(path):
            _mount("tmpfs", path, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, b"size=0")
        elif os.path.exists(path):
            _mount("/dev/null", path, None, MS_BIND)
    for path in masks.read_only:
        if os.path.exists(path):
            _mount(path, path, None, MS_BIND | MS_REC)
            _mount(None, path, None, MS_BIND | MS_REMOUNT | MS_RDONLY | _locked_flags(Path(path)))


def lock_job(profile: dict, masks: ProcMasks | None = None) -> bool:
    """Step 2 (in the new pid namespace's pid 1, before anything of the student's exists): with `masks`, a fresh
    /proc of the job's own pid namespace with Docker's masks laid over it (SlotError when the container cannot
    give one: a slot container is started without Docker's own masks for that); without, the container's /proc
    stays (returns whether a fresh one was mounted). Then a second user and mount namespace -- every mount of step
    1 and the masks become locked -- no capability, no_new_privs, the run profile stacked."""
    mounted = False
    try:
        _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
        mounted = True
    except SlotError:  # Docker's masked /proc paths make a new proc "too revealing" (EPERM)
        if masks is not None:
            raise
    if masks is not None:
        _mask(masks)
    uid, gid = os.getuid(), os.getgid()
    _unshare(CLONE_NEWUSER | CLONE_NEWNS)
    _map_self(uid, gid)
    drop_capabilities()
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    stack_profile(profile)
    return mounted


@dataclass
class ConfinedJob:
    """A job started by `start_confined`: C's pid (the zygote's child) and the job's pid 1 as the zygote's pid
    namespace numbers it (None until C has said it, or when C failed before)."""

    c_pid: int
    first_pid: int | None
    confined: bool = False  # pid 1 said it is locked, before the job ran
    why: str | None = None  # else why not (the job never ran)
    status: int | None = None  # C's exit status (os.waitstatus_to_exitcode) once reaped

    def poll(self) -> int | None:
        if self.status is None:
            pid, status = os.waitpid(self.c_pid, os.WNOHANG)
            if pid:
                self.status = os.waitstatus_to_exitcode(status)
        return self.status

    def wait(self) -> int:
        if self.status is None:
            self.status = os.waitstatus_to_exitcode(os.waitpid(self.c_pid, 0)[1])
        return self.status

    def kill(self) -> None:
        """Every process of the job: its pid 1 killed, the kernel kills the rest of its pid namespace."""
        if self.status is None and self.first_pid is not None:
            try:
                os.kill(self.first_pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def start_confined(mounts: JobMounts, profile: dict, job: Callable[[], int], keep_fds: Iterable[int] = (),
                   stdio: tuple[int, int] | None = None, masks: ProcMasks | None = None) -> ConfinedJob:
    """Forks C, which confines itself (`enter_job`) and forks the job's pid 1, which locks itself (`lock_job`) and
    runs `job`. `stdio`: the job's stdout and stderr (descriptors of the caller's, closed here afterwards). C's exit
    status is the job's (0-255; 128 + n for signal n); a confinement step that fails ends C with 125 before `job`
    runs. Every process of the job dies with its pid 1 (the kernel kills a pid namespace whose first process
    ends)."""
    keep = list(keep_fds)
    told_read, told_write = os.pipe()
    locked_read, locked_write = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    child = os.fork()
    if child == 0:  # C
        code = 125
        try:
            make_undumpable()  # as the zygote: a job's processes (same uid) must not attach to C or read its memory
            if stdio is not None:
                os.dup2(stdio[0], 1)
                os.dup2(stdio[1], 2)
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            os.close(null)
            _close_fds([*keep, told_write, locked_write])
            _write_self(("/proc/self/oom_score_adj", "1000"))  # the OOM killer takes the job's before the zygote
            enter_job(mounts)
            first = os.fork()
            if first == 0:  # pid 1 of the job's pid namespace
                os.close(told_write)
                try:
                    # a session and process group of the job's own: killpg(0) from a job process would
                    # otherwise reach the zygote's group, which the kernel resolves across pid namespaces
                    os.setsid()
                    lock_job(profile, masks)
                except BaseException as exc:  # noqa: BLE001 - reported, then the job never runs
                    os.write(locked_write, f"slot: {exc}".encode()[:4000])
                    os._exit(125)
                os.write(locked_write, CONFINED)  # the zygote's word that the job runs confined
                os.close(locked_write)
                try:
                    code = int(job())
                except SystemExit as exc:
                    code = exc.code if isinstance(exc.code, int) else 1
                except BaseException:  # noqa: BLE001 - the job's own failure
                    import traceback

                    traceback.print_exc()
                    code = 1
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code & 0xFF)
            os.close(locked_write)
            os.write(told_write, str(first).encode())
            os.close(told_write)
            _, status = os.waitpid(first, 0)
            code = os.waitstatus_to_exitcode(status)
            code = code & 0xFF if code >= 0 else 128 - code
        except BaseException as exc:  # noqa: BLE001 - a confinement step failed: C's status says so
            try:
                os.write(locked_write, f"slot: {exc}".encode()[:4000])
            except OSError:
                pass
            code = 125
        os._exit(code)
    os.close(told_write)
    os.close(locked_write)
    if stdio is not None:
        os.close(stdio[0])
        os.close(stdio[1])
    told = os.read(told_read, 32)  # C's word, or EOF when C failed before its fork
    os.close(told_read)
    said = b""
    while chunk := os.read(locked_read, 4096):  # pid 1's word once locked, or why not; EOF after either
        said += chunk
    os.close(locked_read)
    return ConfinedJob(child, int(told) if told.strip().isdigit() else None,
                       confined=said == CONFINED, why=None if said == CONFINED else
                       (said.decode("utf-8", "replace") or "the job ended before it was confined"))


def run_confined(mounts: JobMounts, profile: dict, job: Callable[[], int], keep_fds: Iterable[int] = (),
                 masks: ProcMasks | None = None) -> int:
    """`start_confined` and wait: the job's exit status as C gives it."""
    return start_confined(mounts, profile, job, keep_fds, masks=masks).wait()


def make_undumpable() -> None:
    """The zygote: no process without CAP_SYS_PTRACE in the container's user namespace may read or write its
    memory, open its /proc entries guarded by ptrace rules (mem, environ, root, fd) or attach to it."""
    _check(_libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0), "PR_SET_DUMPABLE")


def read_profile(path: Path) -> dict:
    return json.loads(path.read_text())


