"""Attacks at the runner level, against both isolating runners (docker and bwrap), with real processes.

Each test runs hostile Python in the sandbox and checks the runner's own observation and the host side:
the limit held, the grader process is unharmed, and nothing of the run is left behind (conftest)."""

from __future__ import annotations

import dataclasses
import os
import time

import pytest

from grader.sandbox.base import Phase
from grader.sandbox.watch import NOTE_DISK_QUOTA, NOTE_OUTPUT_FLOOD
from tests.sandbox.conftest import SMALL, run_code

pytestmark = pytest.mark.docker


def test_harmless_run_sees_the_layout(runner, mounts):
    out = run_code(runner, mounts, """
import os
print(os.getuid() != 0, open('/submission/ops.py').read().startswith('def sigmoid'))
open('/io/outputs/ok.txt', 'w').write('written')
print(sorted(os.listdir('/io/inputs')))
""")
    assert out.ok, out
    assert out.stdout_tail.split("\n")[0] == "True True"
    assert "['c0_a.txt']" in out.stdout_tail
    assert (mounts.io / "outputs" / "ok.txt").read_text() == "written"


def test_fork_bomb_is_contained(runner, mounts):
    limits = dataclasses.replace(SMALL, wall_seconds=8, pids=32)
    started = time.monotonic()
    out = run_code(runner, mounts, """
import os
while True:
    try:
        os.fork()
    except OSError:
        pass
""", limits)
    assert not out.ok
    assert out.timed_out or out.signal or out.exit_code
    assert time.monotonic() - started < 30  # killed at the wall clock, host still responsive


def test_tmpfs_fill_stops_at_its_size(runner, mounts):
    out = run_code(runner, mounts, """
import errno
written = 0
try:
    with open('/tmp/fill', 'wb') as f:
        while True:
            f.write(b'x' * (1 << 20)); f.flush(); written += 1 << 20
except OSError as exc:
    print('stopped', errno.errorcode[exc.errno], written)
""")
    assert out.ok, out
    reason, written = out.stdout_tail.split()[1:3]
    assert reason in ("ENOSPC", "EFBIG")
    assert int(written) <= SMALL.tmpfs_bytes


def test_big_file_stops_at_the_file_size_limit(runner, mounts):
    out = run_code(runner, mounts, """
try:
    with open('/io/outputs/huge.npy', 'wb') as f:
        f.seek(10 << 30); f.write(b'x')
    print('wrote')
except OSError as exc:
    print('refused', exc.errno)
""")
    assert "refused 27" in out.stdout_tail  # EFBIG: RLIMIT_FSIZE (Python ignores SIGXFSZ)
    assert not (mounts.io / "outputs" / "huge.npy").exists() or \
        (mounts.io / "outputs" / "huge.npy").stat().st_size <= SMALL.file_size_bytes


def test_disk_fill_of_the_io_mount_is_stopped(runner, mounts):
    limits = dataclasses.replace(SMALL, wall_seconds=30)
    out = run_code(runner, mounts, """
import os
i = 0
while True:
    try:
        with open(f'/io/outputs/f{i}', 'wb') as f:
            f.write(os.urandom(1 << 20) * 8)
    except OSError:
        pass
    i += 1
""", limits)
    assert any(n.startswith(NOTE_DISK_QUOTA) for n in out.notes), out
    assert not out.timed_out
    used = sum(p.stat().st_blocks * 512 for p in (mounts.io / "outputs").iterdir())
    # the watchdog polls; what slips through between two polls is bounded by the disk speed
    assert used < limits.tmpfs_bytes + (1 << 30)


def test_endless_output_is_cut_and_killed(runner, mounts):
    limits = dataclasses.replace(SMALL, wall_seconds=60)
    started = time.monotonic()
    out = run_code(runner, mounts, "import sys\nwhile True:\n    sys.stdout.write('spam ' * 20000 + '\\n')\n",
                   limits)
    assert any(n.startswith(NOTE_OUTPUT_FLOOD) for n in out.notes), out
    assert not out.ok and not out.timed_out
    assert len(out.stdout_tail.encode()) <= SMALL.log_bytes
    assert time.monotonic() - started < 30


@pytest.mark.parametrize("code", ["import time\ntime.sleep(1e9)", "while True:\n    pass"],
                         ids=["sleep", "busy"])
def test_timeout_kills(runner, mounts, code):
    limits = dataclasses.replace(SMALL, wall_seconds=3)
    out = run_code(runner, mounts, code, limits)
    assert out.timed_out and not out.ok
    assert 2.5 <= out.wall_seconds < 10


def test_no_network(runner, mounts):
    out = run_code(runner, mounts, """
import socket
for host in ('1.1.1.1', '172.17.0.1', '10.0.2.2'):
    try:
        socket.create_connection((host, 80), timeout=2)
        print('connected', host)
    except OSError as exc:
        print('blocked', host, exc.errno)
print(sorted(i[1] for i in socket.if_nameindex()))
""")
    assert out.ok, out
    assert "connected" not in out.stdout_tail
    assert out.stdout_tail.count("blocked") == 3
    assert "['lo']" in out.stdout_tail


def test_host_files_and_processes_are_invisible(runner, mounts, tmp_path, monkeypatch):
    monkeypatch.setenv("BANG_GRADER_TEST_HOST_SECRET", "s3cr3t-in-env")
    secret = tmp_path / "other_student_secret.txt"
    secret.write_text("hidden test data")
    out = run_code(runner, mounts, f"""
import os
seen = []
for path in ({str(secret)!r}, '/work/main/assignments', '/root', '/etc/shadow', '/var/run/docker.sock',
             '/submission/../io/../build'):
    try:
        with open(path) as f:
            seen.append(('read', path, f.read(20)))
    except OSError as exc:
        seen.append(('no', path, exc.errno))
print(seen)
for pid in os.listdir('/proc'):
    if pid.isdigit():
        try:
            print(open(f'/proc/{{pid}}/environ', 'rb').read().replace(b'\\0', b' ').decode())
        except OSError:
            pass
print(os.environ)
pids = [int(p) for p in os.listdir('/proc') if p.isdigit()]
print('pids', len(pids), max(pids))
""")
    assert out.ok, out
    assert "hidden test data" not in out.stdout_tail
    assert "s3cr3t-in-env" not in out.stdout_tail
    assert "('read'" not in out.stdout_tail
    count = int(out.stdout_tail.split("pids ")[1].split()[0])
    assert count < 10  # its own pid namespace: only the sandbox's processes


def test_read_only_places_refuse_writes(runner, mounts):
    out = run_code(runner, mounts, """
results = []
for path in ('/submission/ops.py', '/build/x.so', '/usr/evil', '/io/inputs/c0_a.txt', '/etc/passwd'):
    try:
        open(path, 'a').write('x')
        results.append('WROTE ' + path)
    except OSError as exc:
        results.append('refused')
print(results)
""")
    assert out.ok, out
    assert "WROTE" not in out.stdout_tail
    assert (mounts.submission / "ops.py").read_text().startswith("def sigmoid")


def test_build_phase_may_write_build(runner, mounts):
    out = run_code(runner, mounts, "open('/build/ext.so', 'w').write('lib')", phase=Phase.BUILD)
    assert out.ok, out
    assert (mounts.build / "ext.so").read_text() == "lib"


def test_killing_the_parent_does_not_reach_the_grader(runner, mounts):
    out = run_code(runner, mounts, """
import os, signal
for target in (os.getppid(), 1, -1):
    try:
        os.kill(target, signal.SIGKILL)
    except OSError as exc:
        print('kill', target, exc.errno)
os.killpg(0, signal.SIGKILL)
""")
    assert not out.ok  # the sandbox killed itself; the grader (this process) lives on
    assert os.getpid() > 0


def test_no_privileges(runner, mounts):
    out = run_code(runner, mounts, """
status = dict(l.split(':\\t', 1) for l in open('/proc/self/status').read().splitlines() if ':\\t' in l)
print(status['CapEff'].strip(), status['NoNewPrivs'].strip(), status['Uid'].split()[0])
import os
try:
    os.setuid(0); print('setuid worked')
except OSError:
    print('setuid refused')
""")
    assert out.ok, out
    cap, nnp, uid = out.stdout_tail.split("\n")[0].split()
    assert cap == "0000000000000000" and nnp == "1" and uid != "0"
    assert "setuid refused" in out.stdout_tail


def test_symlinks_planted_for_copy_out_are_refused(runner, mounts):
    from grader.sandbox.capped import UntrustedFileError, load_npy_capped, read_json_capped

    out = run_code(runner, mounts, """
import os
os.symlink('/etc/passwd', '/io/outputs/c0.json')
os.symlink('/etc', '/io/outputs/etc')
os.mkfifo('/io/outputs/c1.json')
""")
    assert out.ok, out
    for name in ("c0.json", "c1.json", "etc/passwd"):
        with pytest.raises(UntrustedFileError):
            read_json_capped(mounts.io / "outputs" / name, root=mounts.io)
    with pytest.raises(UntrustedFileError):
        load_npy_capped(mounts.io / "outputs" / "c0.json", 1 << 20, root=mounts.io)
