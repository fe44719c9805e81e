"""ProcessRunner: real child processes, real limits, real process groups."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest

from grader.sandbox.base import Limits, Mounts, Phase
from grader.sandbox.process import ProcessRunner


@pytest.fixture
def mounts(tmp_path: Path) -> Mounts:
    for name in ("submission", "build", "io"):
        (tmp_path / name).mkdir()
    return Mounts(tmp_path / "submission", tmp_path / "build", tmp_path / "io")


def run(mounts: Mounts, code: str, **limits: object):
    return ProcessRunner().run(Phase.RUN, ["python3", "-c", code], mounts, Limits(**limits))


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A killed child of init may linger as a zombie for a moment: that is dead too.
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split(")")[-1].split()[0] != "Z"


def test_exit_code_output_and_the_mapped_sandbox_paths(mounts, monkeypatch):
    monkeypatch.setenv("GRADER_SECRET_TOKEN", "do-not-leak")
    outcome = run(mounts, "import os, sys\n"
                          "print(sys.executable)\n"
                          "print(os.environ['BANG_GRADER_SUBMISSION'], os.environ['BANG_GRADER_IO'])\n"
                          "print('GRADER_SECRET_TOKEN' in os.environ)\n"
                          "print('to stderr', file=sys.stderr)\n"
                          "raise SystemExit(7)")
    assert outcome.exit_code == 7 and outcome.signal is None and not outcome.timed_out and not outcome.ok
    lines = outcome.stdout_tail.splitlines()
    assert lines[0] == sys.executable  # `python3` means the grader's own interpreter
    assert lines[1] == f"{mounts.submission} {mounts.io}"
    assert lines[2] == "False"
    assert outcome.stderr_tail.strip() == "to stderr"


def test_the_wall_clock_limit_kills_the_whole_process_group(mounts, tmp_path):
    pid_file = tmp_path / "io" / "background.pid"
    code = (f"import subprocess, time\n"
            f"p = subprocess.Popen(['sleep', '300'])\n"
            f"open({str(pid_file)!r}, 'w').write(str(p.pid))\n"
            f"time.sleep(300)")
    started = time.monotonic()
    outcome = run(mounts, code, wall_seconds=2)
    assert outcome.timed_out and outcome.signal == signal.SIGKILL and outcome.exit_code is None
    assert time.monotonic() - started < 10
    assert not pid_alive(int(pid_file.read_text()))


def test_processes_left_behind_by_a_finished_child_are_killed(mounts, tmp_path):
    pid_file = tmp_path / "io" / "orphan.pid"
    code = (f"import subprocess\n"
            f"p = subprocess.Popen(['sleep', '300'], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
            f"open({str(pid_file)!r}, 'w').write(str(p.pid))")
    outcome = run(mounts, code, wall_seconds=30)
    assert outcome.ok
    assert not pid_alive(int(pid_file.read_text()))


def test_output_is_capped_keeping_the_tail(mounts):
    outcome = run(mounts, "import sys\nsys.stdout.write('x' * 5_000_000)\nsys.stdout.write('END')",
                  log_bytes=1000)
    assert outcome.ok and len(outcome.stdout_tail) == 1000 and outcome.stdout_tail.endswith("END")
    assert any("dropped" in note for note in outcome.notes)


def test_a_signal_is_reported(mounts):
    outcome = run(mounts, "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)")
    assert outcome.signal == signal.SIGSEGV and outcome.exit_code is None and not outcome.timed_out


def test_resource_limits_apply_in_the_child(mounts):
    code = ("import resource, errno\n"
            "try:\n"
            "    open('big', 'wb').write(b'0' * (2 << 20))\n"
            "except OSError as e:\n"
            "    print('fsize', errno.errorcode[e.errno])\n"
            "try:\n"
            "    block = bytearray(512 << 20)\n"
            "except MemoryError:\n"
            "    print('memory refused')\n"
            "print('nofile', resource.getrlimit(resource.RLIMIT_NOFILE))\n"
            "print('core', resource.getrlimit(resource.RLIMIT_CORE))")
    outcome = run(mounts, code, file_size_bytes=1 << 20, memory_bytes=256 << 20, open_files=64)
    assert outcome.ok, outcome.stderr_tail
    assert "fsize EFBIG" in outcome.stdout_tail
    assert "memory refused" in outcome.stdout_tail
    assert "nofile (64, 64)" in outcome.stdout_tail and "core (0, 0)" in outcome.stdout_tail


def test_a_missing_program_is_an_outcome_not_an_exception(mounts):
    outcome = ProcessRunner().run(Phase.BUILD, ["/nonexistent/tool"], mounts, Limits())
    assert outcome.exit_code is None and not outcome.ok and "cannot start" in outcome.stderr_tail
