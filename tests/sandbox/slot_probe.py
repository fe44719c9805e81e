"""Runs in a slot container as its zygote (tests/sandbox/test_slot.py): torch imported once, non-dumpable, then
jobs confined one after another by bang_harness.slot.run_confined. Job 1 leaves what a job could leave (files in
/io, /tmp and /dev/shm, a detached process, a SysV segment); job 2 is an honest job (torch with threads, a
subprocess, fork); job 3 tries every way out and records what it got; job 4 is a fork bomb; job 5 SIGKILLs its parent,
pid 1, the zygote's pid, every process it may (-1) and its own process group; job 6 checks the slot still serves. Prints one JSON object: each job's exit code and what the jobs and the zygote saw.

argv: PROFILE [--no-stack]  (--no-stack: the jobs get an allow-all filter instead of the run profile, so what is
left refused is the namespaces' and MNT_LOCKED's doing, not seccomp's)."""

from __future__ import annotations

import ctypes
import errno
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import torch
from bang_harness import slot

libc = ctypes.CDLL(None, use_errno=True)
SLOT = Path("/slot")
MS_REMOUNT, MS_BIND = 32, 4096
NEWUSER_NEWNS = 0x10000000 | 0x00020000
ZYGOTE = os.getpid()


def err(fn, *args) -> str:  # noqa: ANN001, ANN002
    return "ok" if fn(*args) >= 0 else errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))


def os_err(thunk) -> str:  # noqa: ANN001
    try:
        thunk()
        return "ok"
    except OSError as exc:
        return errno.errorcode.get(exc.errno, str(exc.errno))


def mounts_escape() -> dict[str, str]:
    return {"umount /io": err(libc.umount2, b"/io", 0), "umount /slot": err(libc.umount2, bytes(str(SLOT), "ascii"), 0),
            "umount /tmp": err(libc.umount2, b"/tmp", 0),
            "remount /submission rw": err(libc.mount, None, b"/submission", None, ctypes.c_ulong(MS_REMOUNT | MS_BIND), None)}


def report(name: str, data: dict) -> None:
    Path(f"/io/{name}.json").write_text(json.dumps(data))


def job_leaves() -> int:
    Path("/io/out").write_text("one")
    Path("/tmp/left").write_text("x")
    Path("/dev/shm/left").write_text("x")
    libc.shmget(0x1234, 4096, 0o1000 | 0o666)  # IPC_CREAT
    if os.fork() == 0:
        os.setsid()
        os.execvp("sleep", ["sleep", "300"])
    return 0


def job_honest() -> int:
    torch.set_num_threads(2)
    a = torch.randn(256, 256)
    product = float((a @ a.T).trace())
    done = []
    worker = threading.Thread(target=lambda: done.append(float(torch.sigmoid(torch.zeros(1))[0])))
    worker.start()
    worker.join()
    child = os.fork()
    if child == 0:
        os._exit(7)
    _, status = os.waitpid(child, 0)
    echo = subprocess.run(["sh", "-c", "echo hi"], capture_output=True, text=True).stdout
    Path("/io/written").write_text("ok")
    report("honest", {"product_finite": product == product, "thread": done, "fork": os.waitstatus_to_exitcode(status),
                      "subprocess": echo, "io": sorted(os.listdir("/io")), "tmp": os.listdir("/tmp"),
                      "shm": os.listdir("/dev/shm"), "slot": os.listdir(SLOT),
                      "shm_segment": libc.shmget(0x1234, 0, 0) >= 0,
                      "submission": sorted(os.listdir("/submission")), "build": sorted(os.listdir("/build"))})
    return 0


def job_escapes() -> int:
    # In a user and mount namespace of its own (allowed only without the stacked profile) a job holds every
    # capability there: the mounts it inherited are locked all the same.
    read, write = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(read)
        nested = {"unshare": err(libc.unshare, NEWUSER_NEWNS)}
        if nested["unshare"] == "ok":  # the control: a mount of its own works there (it holds CAP_SYS_ADMIN)
            nested["mount tmpfs"] = err(libc.mount, b"tmpfs", b"/tmp", b"tmpfs", ctypes.c_ulong(0), None)
            nested.update(mounts_escape())
        os.write(write, json.dumps(nested).encode())
        os._exit(0)
    os.close(write)
    os.waitpid(child, 0)
    nested = json.loads(os.read(read, 65536) or b"{}")
    status = {k: v.strip() for k, v in (line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())}
    got = {"pid": os.getpid(), "caps": [status[k] for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")],
           "no_new_privs": status["NoNewPrivs"], "seccomp_filters": status.get("Seccomp_filters"),
           "write /submission": os_err(lambda: Path("/submission/x").write_text("x")),
           "write /build": os_err(lambda: Path("/build/x").write_text("x")),
           **mounts_escape(),
           "unshare": err(libc.unshare, NEWUSER_NEWNS),
           "mount tmpfs": err(libc.mount, b"tmpfs", b"/tmp", b"tmpfs", ctypes.c_ulong(0), None),
           "setns": err(libc.setns, os.open("/proc/self/ns/mnt", os.O_RDONLY), 0),
           "ptrace zygote": err(libc.ptrace, 16, ZYGOTE, 0, 0), "nested": nested}
    for what in ("mem", "environ", "root", "cwd", "fd"):
        path = f"/proc/{ZYGOTE}/{what}"
        got[f"zygote {what}"] = os_err(lambda p=path, w=what: os.listdir(p) if w in ("root", "cwd", "fd")
                                       else open(p, "rb").read(1))  # noqa: SIM115
    report("escapes", got)
    return 0


def job_bomb() -> int:
    made = 0
    while made < 100_000:
        try:
            if os.fork() == 0:
                import time

                time.sleep(300)
                os._exit(0)
            made += 1
        except OSError:
            break
    report("bomb", {"made": made})
    return 3


def job_kills() -> int:
    """What kill_parent does in the corpus: every signal a job can send at its own group and at everything."""
    import signal

    for target in (os.getppid(), 1, ZYGOTE):
        try:
            os.kill(target, signal.SIGKILL)
        except OSError:
            pass
    try:
        os.kill(-1, signal.SIGKILL)
    except OSError:
        pass
    os.killpg(0, signal.SIGKILL)
    return 0


def job_after() -> int:
    report("after", {"io": sorted(os.listdir("/io")), "tmp": os.listdir("/tmp"), "torch": float(torch.ones(2).sum())})
    return 0


def container_pids() -> list[int]:
    return sorted(int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != ZYGOTE and
                  Path(f"/proc/{p}/cmdline").read_bytes()[:4] != b"/sbi")  # docker's init


def main() -> int:
    profile = slot.read_profile(Path(sys.argv[1]))
    if "--no-stack" in sys.argv:
        profile = {"defaultAction": "SCMP_ACT_ALLOW", "syscalls": []}
    slot.make_undumpable()
    out: dict = {"jobs": {}, "left": {}}
    for n, job in enumerate((job_leaves, job_honest, job_escapes, job_bomb, job_kills, job_after), start=1):
        base = SLOT / str(n)
        for folder in ("io", "submission", "build"):
            (base / folder).mkdir(parents=True)
        (base / "submission" / f"mine{n}.mlu").write_text("//")
        (base / "build" / f"ext{n}.so").write_text("")
        mounts = slot.JobMounts(io=base / "io", submission=base / "submission", build=base / "build", slot=SLOT)
        out["jobs"][job.__name__] = slot.run_confined(mounts, profile, job)
        out["left"][job.__name__] = container_pids()
        for name in ("honest", "escapes", "bomb", "after"):
            found = base / "io" / f"{name}.json"
            if found.exists():
                out[name] = json.loads(found.read_text())
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
