"""DockerRunner specifics against the real daemon: the limits it sets are the ones in force inside, OOM is
reported, devices are exactly one card's, images are never pulled, and the label sweep removes leftovers."""

from __future__ import annotations

import dataclasses
import os
import socket

import docker
import pytest

from grader.sandbox.base import Phase
from grader.sandbox.docker_runner import (
    HOST_LABEL,
    OWNER_LABEL,
    RUN_LABEL,
    DockerRunner,
    SandboxError,
    mlu_device_nodes,
    sweep_leftovers,
)
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
    assert lines["seccomp"] == "2"  # docker's default profile kept


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
