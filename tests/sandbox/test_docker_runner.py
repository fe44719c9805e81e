"""DockerRunner specifics against the real daemon: the limits it sets are the ones in force inside, OOM is
reported, devices are exactly one card's, images are never pulled, and the label sweep removes leftovers."""

from __future__ import annotations

import dataclasses
import os
import socket

import docker
import pytest

from grader.backends.mlu import mlu_device_nodes
from grader.sandbox.base import Phase, SandboxError
from grader.sandbox.docker_runner import DockerRunner, container_summaries, summary_name, sweep_leftovers
from grader.sandbox.docker_settings import HOST_LABEL, OWNER_LABEL, RUN_LABEL
from grader.sandbox.io_cap import can_cap, mounts_of
from tests.sandbox.conftest import SMALL, run_code

pytestmark = pytest.mark.docker


@pytest.fixture
def docker_runner(emu_image):
    return DockerRunner(emu_image)


def test_limits_are_in_force_inside(docker_runner, mounts):
    out = run_code(docker_runner, mounts, """
import resource, os
def read(p):
    try:
        return open(p).read().strip()
    except OSError:
        return '?'
print('nofile', resource.getrlimit(resource.RLIMIT_NOFILE)[0])
print('fsize', resource.getrlimit(resource.RLIMIT_FSIZE)[0])
print('core', resource.getrlimit(resource.RLIMIT_CORE)[0])
print('pids', read('/sys/fs/cgroup/pids/pids.max'), read('/sys/fs/cgroup/pids.max'))
print('mem', read('/sys/fs/cgroup/memory/memory.limit_in_bytes'), read('/sys/fs/cgroup/memory.max'))
print('swap', read('/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes'))
mounts = {l.split()[1]: l.split()[3] for l in open('/proc/self/mounts')}
print('root', mounts['/'].split(',')[0])
print('tmp', mounts['/tmp'])
print('seccomp', [l for l in open('/proc/self/status') if l.startswith('Seccomp:')][0].split()[1])
""")
    assert out.ok, out
    lines = dict(line.split(" ", 1) for line in out.stdout_tail.strip().splitlines())
    assert lines["nofile"] == str(SMALL.open_files)
    assert lines["fsize"] == str(SMALL.file_size_bytes)
    assert lines["core"] == "0"
    assert str(SMALL.pids) in lines["pids"]
    assert str(SMALL.memory_bytes) in lines["mem"]
    assert lines["swap"] in (str(SMALL.memory_bytes), "?")  # memsw accounting may be off in the host kernel
    assert lines["root"] == "ro"
    assert "noexec" in lines["tmp"] and "nosuid" in lines["tmp"] and f"size={SMALL.tmpfs_bytes >> 10}k" in lines["tmp"]
    assert lines["seccomp"] == "2"  # the pinned profile is in force


def test_memory_hog_is_oom_killed(docker_runner, mounts):
    limits = dataclasses.replace(SMALL, memory_bytes=128 << 20)
    out = run_code(docker_runner, mounts, "x = []\nwhile True:\n    x.append(bytearray(16 << 20))\n", limits)
    assert out.oom_killed and not out.ok
    assert out.signal == 9


def test_failed_exit_code_and_stderr_are_reported(docker_runner, mounts):
    out = run_code(docker_runner, mounts, "import sys\nprint('to stderr', file=sys.stderr)\nsys.exit(3)")
    assert out.exit_code == 3 and out.signal is None and not out.timed_out
    assert out.stderr_tail.strip() == "to stderr"


def test_missing_image_is_refused_not_pulled():
    with pytest.raises(SandboxError, match="grade images build"):
        DockerRunner("bang-grader-emu:doesnotexist0000")


def test_device_nodes_are_exactly_one_cards(tmp_path):
    for name in ("cambricon_dev0", "cambricon_dev1", "cambricon_ctl", "cambricon_ipcm0", "cambricon_ipcm1"):
        (tmp_path / name).touch()
    assert mlu_device_nodes(1, dev=tmp_path) == [str(tmp_path / n) for n in
                                                 ("cambricon_dev1", "cambricon_ctl", "cambricon_ipcm1")]
    (tmp_path / "cambricon_ipcm1").unlink()  # MLU270 has no ipcm node
    assert mlu_device_nodes(1, dev=tmp_path) == [str(tmp_path / "cambricon_dev1"), str(tmp_path / "cambricon_ctl")]


def test_sweep_survives_a_container_removed_between_its_list_and_its_removal(emu_image, monkeypatch):
    """Two gradings at once: one's sweep lists a container the other removes a moment later (found by the
    suite on two workers, where the sweep raised NotFound and the grading became internal_error)."""
    client = docker.from_env(timeout=30)
    labels = {RUN_LABEL: "1", OWNER_LABEL: "999999999", HOST_LABEL: socket.gethostname()}
    gone = client.containers.create(emu_image, ["sleep", "100"], labels=labels, network_mode="none")
    listed = client.api.containers(all=True, filters={"label": RUN_LABEL})
    gone.remove(force=True)
    monkeypatch.setattr(client.api, "containers", lambda **_: listed)
    assert gone.name not in sweep_leftovers(client, only_dead_owners=True)


def test_sweep_removes_labelled_leftovers(emu_image):
    client = docker.from_env(timeout=30)
    labels = {RUN_LABEL: "1", OWNER_LABEL: "999999999", HOST_LABEL: socket.gethostname()}
    dead_owner = client.containers.create(emu_image, ["sleep", "100"], labels=labels, network_mode="none")
    alive_owner = client.containers.create(emu_image, ["sleep", "100"], network_mode="none",
                                           labels={**labels, OWNER_LABEL: str(os.getpid())})
    try:
        removed = sweep_leftovers(client, only_dead_owners=True)
        assert dead_owner.name in removed
        assert client.containers.list(all=True, filters={"id": dead_owner.id}) == []
        assert alive_owner.name not in removed  # a live grader's container is left alone
    finally:
        for container in (dead_owner, alive_owner):
            try:
                container.remove(force=True)
            except docker.errors.NotFound:
                pass


def test_run_phase_build_mount_is_read_only_and_exec(docker_runner, mounts):
    script = mounts.build / "tool.sh"
    script.write_text("#!/bin/sh\necho from-build\n")
    script.chmod(0o755)
    out = run_code(docker_runner, mounts, """
import subprocess
print(subprocess.run(['/build/tool.sh'], capture_output=True, text=True).stdout.strip())
try:
    open('/build/new', 'w')
except OSError as exc:
    print('ro', exc.errno)
""", phase=Phase.RUN)
    assert out.ok, out
    assert "from-build" in out.stdout_tail and "ro 30" in out.stdout_tail  # EROFS


SYSCALL_PROBE = """
import ctypes, os, errno
libc = ctypes.CDLL(None, use_errno=True)
def probe(name, number, *args):
    ctypes.set_errno(0)
    r = libc.syscall(number, *args)
    print(name, 'refused' if r == -1 and ctypes.get_errno() == errno.EPERM else f'allowed:{r}:{ctypes.get_errno()}')
probe('ptrace', 101, 16, os.getppid(), 0, 0)        # PTRACE_ATTACH to the parent
probe('process_vm_readv', 310, os.getppid(), 0, 0, 0, 0, 0)
probe('io_uring_setup', 425, 8, 0)
probe('userfaultfd', 323, 0)
probe('keyctl', 250, 0, 0, 0, 0)
probe('unshare', 272, 0x20000)                      # CLONE_NEWNS
probe('clone_newuser', 56, 0x10000000 | 17, 0, 0, 0, 0)  # clone(CLONE_NEWUSER | SIGCHLD)
probe('perf_event_open', 298, 0, 0, -1, -1, 0)
pid = os.fork()
if pid == 0:
    os._exit(0)
os.waitpid(pid, 0)
print('fork ok')
import threading
t = threading.Thread(target=lambda: None); t.start(); t.join()
print('thread ok')
"""


def test_pinned_seccomp_profile_refuses_what_the_sandbox_never_needs(docker_runner, mounts):
    out = run_code(docker_runner, mounts, SYSCALL_PROBE)
    assert out.ok, out
    lines = dict(line.split(" ", 1) for line in out.stdout_tail.strip().splitlines())
    for name in ("ptrace", "process_vm_readv", "io_uring_setup", "userfaultfd", "keyctl", "unshare",
                 "perf_event_open", "clone_newuser"):
        assert lines[name] == "refused", (name, lines[name])
    assert lines["fork"] == "ok" and lines["thread"] == "ok"


def test_profile_refuses_the_denied_list_and_nothing_a_grading_needs():
    import json

    from grader.sandbox.docker_settings import SECCOMP_PROFILE

    profile = json.loads(SECCOMP_PROFILE.read_text())
    assert profile["defaultAction"] == "SCMP_ACT_ALLOW"
    refused = {n for rule in profile["syscalls"] if rule["action"] == "SCMP_ACT_ERRNO" and not rule.get("args")
               for n in rule["names"]}
    assert {"ptrace", "process_vm_readv", "process_vm_writev", "io_uring_setup", "bpf", "mount",
            "unshare", "setns", "keyctl", "userfaultfd", "perf_event_open", "clone3"} <= refused
    assert not refused & {"mprotect", "mmap", "clone", "futex", "prctl", "fallocate", "memfd_create", "execve"}
    assert not any(rule.get("includes") or rule.get("excludes") for rule in profile["syscalls"])


FALLOCATE = """
import os
made = 0
try:
    for i in range(64):  # 1 GiB in files of 16 MiB (under RLIMIT_FSIZE): the cap is 64 MiB
        fd = os.open(f'/io/outputs/fill_{i}.bin', os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            os.posix_fallocate(fd, 0, 16 << 20)
        finally:
            os.close(fd)
        made += 16
except OSError as exc:
    print('refused after', made, 'MiB', exc.errno)
else:
    print('allocated', made, 'MiB')
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="the /io tmpfs cap needs root; the disk poll alone guards otherwise")
def test_fallocate_cannot_outrun_the_poll(docker_runner, mounts):
    (mounts.io / "job.json").write_text('{"calls": []}')
    (mounts.io / "inputs" / "c0_a.txt").chmod(0o644)
    out = run_code(docker_runner, mounts, FALLOCATE + """
print('job', open('/io/job.json').read())
for name in os.listdir('/io/outputs'):
    os.unlink('/io/outputs/' + name)
open('/io/outputs/c0.json', 'w').write('{"ok": true}')
""")
    assert docker_runner.io_note.startswith("io_capped"), docker_runner.io_note
    assert out.ok, out
    assert "refused after" in out.stdout_tail and " 28" in out.stdout_tail  # ENOSPC at the cap, not the poll
    assert 'job {"calls": []}' in out.stdout_tail  # the host's files were there
    # back on disk, uncapped and unmounted: the outputs the run wrote, the host's inputs untouched
    assert (mounts.io / "outputs" / "c0.json").read_text() == '{"ok": true}'
    assert (mounts.io / "inputs" / "c0_a.txt").read_text() == "host input"
    assert not os.path.ismount(mounts.io)
    used = sum(p.stat().st_blocks * 512 for p in mounts.io.rglob("*") if p.is_file())
    assert used <= SMALL.tmpfs_bytes + (2 << 20)
    assert sorted(p.name for p in mounts.io.parent.iterdir() if p.name.startswith(".io.")) == []


def _has_runtime(name: str) -> bool:
    try:
        return name in (docker.from_env(timeout=10).info().get("Runtimes") or {})
    except Exception:  # noqa: BLE001
        return False


@pytest.mark.skipif(not _has_runtime("runsc"), reason="gVisor (runsc) is not registered with the Docker daemon")
def test_gvisor_runtime_runs_the_sandbox(emu_image, mounts):
    runner = DockerRunner(emu_image, runtime="runsc")
    out = run_code(runner, mounts, """
import os, platform, threading
print('kernel', platform.release())
t = threading.Thread(target=print, args=('thread ok',)); t.start(); t.join()  # runsc --oci-seccomp broke this
print('uid', os.getuid())
open('/io/outputs/x.txt', 'w').write('hi')
try:
    open('/submission/new', 'w')
except OSError as exc:
    print('ro', exc.errno)
""")
    assert out.ok, out
    lines = dict(line.split(" ", 1) for line in out.stdout_tail.strip().splitlines())
    assert lines["kernel"] != platform_release()  # gVisor's own kernel, not the host's
    assert lines["ro"] in ("30", "13")  # EROFS; gVisor says EACCES
    assert lines["thread"] == "ok"
    assert (mounts.io / "outputs" / "x.txt").read_text() == "hi"


def platform_release() -> str:
    import platform

    return platform.release()


def test_unknown_runtime_is_refused(emu_image):
    with pytest.raises(SandboxError, match="no runtime"):
        DockerRunner(emu_image, runtime="no-such-runtime")


@pytest.mark.parametrize("how", ["SIGKILL", "SIGTERM"])
def test_a_killed_grader_leaves_no_container(emu_image, mounts, how):
    """Issue 28: however the grader dies, its containers go with it (the reaper, grader/sandbox/reaper.py, for
    SIGKILL, which no `finally` sees; SIGTERM unwinds through the run's `finally` as Ctrl-C does)."""
    import signal
    import subprocess
    import sys
    import time

    script = f"""
import signal, sys
from pathlib import Path
from grader.cli.app import _raise_keyboard_interrupt
from grader.sandbox.base import Limits, Mounts, Phase
from grader.sandbox.docker_runner import DockerRunner
signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)  # as `grade` does
runner = DockerRunner({emu_image!r})
mounts = Mounts(Path({str(mounts.submission)!r}), Path({str(mounts.build)!r}), Path({str(mounts.io)!r}))
runner.run(Phase.RUN, ["sleep", "600"], mounts, Limits(wall_seconds=600))
"""
    grader = subprocess.Popen([sys.executable, "-c", script])
    client = docker.from_env(timeout=30)

    def ours() -> list[str]:
        return [summary_name(s) for s in container_summaries(client, f"{OWNER_LABEL}={grader.pid}")]

    deadline = time.monotonic() + 120
    while not ours():
        assert grader.poll() is None and time.monotonic() < deadline, "the grader's container never started"
        time.sleep(0.2)
    assert mounts_of(grader.pid) or not can_cap(), "the run's io was not capped: the check below would prove nothing"
    grader.send_signal(getattr(signal, how))
    grader.wait(timeout=60)
    deadline = time.monotonic() + 60  # the reaper imports docker first: seconds on a loaded host
    while ours() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert ours() == [], f"left behind after {how}"
    # Its capped io tmpfs too (the reaper unmounts it): memory a batch of killed workers would otherwise pile up.
    while mounts_of(grader.pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert mounts_of(grader.pid) == [] and not os.path.ismount(mounts.io), f"io still mounted after {how}"
