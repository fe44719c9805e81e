"""A job confined inside a slot container (bang_harness/slot.py; DESIGN "a zygote per worker slot"), both ways:
what a job must not reach (the zygote, an earlier job's files, processes and SysV objects, the slot's folder, its
own mounts, the namespace calls) and what an honest job must keep (torch with threads, fork, a subprocess, its own
/io, its submission and build). In a real container of the emulation image, started as a slot would be: the run
sandbox's flags with the slot profile (sandbox/images/seccomp/slot-profile.json). Each test reads what
tests/sandbox/slot_probe.py, the zygote, printed."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from docker.types import Mount, Ulimit

from grader.sandbox.layout import SANDBOX_GID, SANDBOX_UID

REPO = Path(__file__).resolve().parents[2]
SECCOMP = REPO / "sandbox" / "images" / "seccomp"
PROBE = Path(__file__).with_name("slot_probe.py")
LOCKED = {"EPERM", "EINVAL"}  # what the kernel answers a change of a locked mount (by call and flag)


def _slot_run(image: str, tmp_path: Path, *args: str) -> dict:
    import docker

    client = docker.from_env(timeout=120)
    slot = tmp_path / "slot"
    slot.mkdir()
    os.chown(slot, SANDBOX_UID, SANDBOX_GID)
    security = ["no-new-privileges", "seccomp=" + (SECCOMP / "slot-profile.json").read_text()]
    container = client.containers.run(
        image, ["python3", "/probe/slot_probe.py", "/probe/profile.json", *args],
        user=f"{SANDBOX_UID}:{SANDBOX_GID}", network_mode="none", read_only=True, cap_drop=["ALL"],
        security_opt=security, init=True, pids_limit=256, mem_limit=2 << 30, detach=True,
        tmpfs={p: "rw,size=16m" for p in ("/tmp", "/io", "/submission", "/build")},
        mounts=[Mount("/slot", str(slot), type="bind"),
                Mount("/probe/slot_probe.py", str(PROBE), type="bind", read_only=True),
                Mount("/probe/profile.json", str(SECCOMP / "profile.json"), type="bind", read_only=True)],
        ulimits=[Ulimit(name="core", soft=0, hard=0)],
        environment={"PYTHONPATH": "/opt/bang-grader/sandbox", "PYTHONDONTWRITEBYTECODE": "1", "HOME": "/tmp"})
    try:
        status = container.wait(timeout=300)
        out = container.logs(stdout=True, stderr=False).decode()
        err = container.logs(stdout=False, stderr=True).decode()
    finally:
        container.remove(force=True)
    assert status["StatusCode"] == 0, err[-4000:]
    return json.loads(out.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def stacked(emu_image: str, tmp_path_factory: pytest.TempPathFactory) -> dict:
    return _slot_run(emu_image, tmp_path_factory.mktemp("stacked"))


@pytest.fixture(scope="module")
def unstacked(emu_image: str, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The jobs without the run profile stacked: what stays refused is the namespaces' and the locks' doing."""
    return _slot_run(emu_image, tmp_path_factory.mktemp("unstacked"), "--no-stack")


def test_the_slot_profile_is_the_run_profile_less_the_calls_a_zygote_needs() -> None:
    sys.path.insert(0, str(SECCOMP))
    try:
        import make_profile
    finally:
        sys.path.remove(str(SECCOMP))
    run = json.loads((SECCOMP / "profile.json").read_text())
    slot = json.loads((SECCOMP / "slot-profile.json").read_text())
    assert run == make_profile.make_profile() and slot == make_profile.make_profile(make_profile.SLOT_ALLOWED)
    run_denied, slot_denied = set(run["syscalls"][0]["names"]), set(slot["syscalls"][0]["names"])
    assert run_denied - slot_denied == {"unshare", "mount"}
    assert {"umount2", "setns", "pivot_root", "ptrace", "process_vm_readv", "mount_setattr"} <= slot_denied
    assert [r for r in slot["syscalls"] if r["names"] == ["clone"]] == []  # clone's namespace flags: allowed
    assert len([r for r in run["syscalls"] if r["names"] == ["clone"]]) == 7


def test_an_honest_job_keeps_torch_threads_fork_subprocess_and_its_own_folders(stacked: dict) -> None:
    assert stacked["jobs"]["job_honest"] == 0
    honest = stacked["honest"]
    assert honest["product_finite"] and honest["thread"] == [0.5] and honest["fork"] == 7
    assert honest["subprocess"] == "hi\n"
    assert honest["io"] == ["written"] and honest["submission"] == ["mine2.mlu"] and honest["build"] == ["ext2.so"]
    assert stacked["jobs"]["job_after"] == 0 and stacked["after"]["torch"] == 2.0


def test_nothing_of_an_earlier_job_is_left_to_the_next(stacked: dict) -> None:
    honest = stacked["honest"]  # job 2 runs after job 1 left files, a detached process and a SysV segment
    assert honest["tmp"] == [] and honest["shm"] == [] and honest["slot"] == [] and not honest["shm_segment"]
    assert all(left == [] for left in stacked["left"].values()), stacked["left"]  # no process outlives its job
    assert stacked["after"]["io"] == [] and stacked["after"]["tmp"] == []


@pytest.mark.parametrize("name", ["stacked", "unstacked"])
def test_a_job_holds_no_capability_and_cannot_reach_the_zygote(name: str, request: pytest.FixtureRequest) -> None:
    escapes = request.getfixturevalue(name)["escapes"]
    assert escapes["pid"] == 1  # pid 1 of a pid namespace of its own
    assert escapes["caps"] == ["0000000000000000"] * 5 and escapes["no_new_privs"] == "1"
    assert escapes["ptrace zygote"] == "EPERM"
    # non-dumpable, memory owned by the container's user namespace: the ptrace rules, not seccomp
    for what in ("mem", "environ", "root", "cwd", "fd"):
        assert escapes[f"zygote {what}"] == "EACCES", (what, escapes)
    assert escapes["write /submission"] == "EROFS" and escapes["write /build"] == "EROFS"
    for call in ("umount /io", "umount /slot", "umount /tmp", "remount /submission rw", "setns"):
        assert escapes[call] in LOCKED, (call, escapes)


def test_the_stacked_run_profile_refuses_the_namespace_calls(stacked: dict) -> None:
    escapes = stacked["escapes"]
    assert escapes["seccomp_filters"] == "2"
    assert escapes["unshare"] == "EPERM" and escapes["mount tmpfs"] == "EPERM"
    assert escapes["nested"] == {"unshare": "EPERM"}


def test_without_the_profile_a_namespace_of_its_own_still_cannot_undo_a_locked_mount(unstacked: dict) -> None:
    nested = unstacked["escapes"]["nested"]
    assert nested["unshare"] == "ok" and nested["mount tmpfs"] == "ok"  # it holds CAP_SYS_ADMIN there
    assert nested["remount /submission rw"] in LOCKED  # MNT_LOCK_READONLY
    assert all(nested[k] in LOCKED for k in ("umount /io", "umount /slot", "umount /tmp")), nested


def test_a_fork_bomb_ends_with_its_job_and_the_slot_serves_the_next(stacked: dict) -> None:
    assert stacked["jobs"]["job_bomb"] == 3 and stacked["bomb"]["made"] > 50  # stopped by the pids limit
    assert stacked["left"]["job_bomb"] == []  # every one of its processes died with its pid 1
    assert stacked["jobs"]["job_after"] == 0


@pytest.mark.parametrize("name", ["stacked", "unstacked"])
def test_a_job_killing_all_it_can_kills_only_itself(name: str, request: pytest.FixtureRequest) -> None:
    """Its parent, pid 1 (itself: the kernel spares a namespace's init from its own), the zygote's pid (another
    process's number in the job's namespace, or none), kill(-1) and killpg(0): the job ends by its own group's
    SIGKILL or survives it (here the job is pid 1, which the kernel spares), the zygote serves the next job."""
    seen = request.getfixturevalue(name)
    assert seen["jobs"]["job_kills"] in (0, 128 + 9), seen["jobs"]
    assert seen["left"]["job_kills"] == [] and seen["jobs"]["job_after"] == 0

