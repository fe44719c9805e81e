"""The build's stall rule (bang_harness.toolchains): a step that waits is stopped, a step that wants the CPU is
not, however little of it a loaded host gives."""
from __future__ import annotations

import subprocess
import sys
import time

from bang_harness import toolchains


def _activity_seen(command: list[str], polls: int = 10) -> tuple[float, bool]:
    proc = subprocess.Popen(command, start_new_session=True)
    try:
        busy = False
        for _ in range(polls):
            time.sleep(0.1)
            cpu, now_busy = toolchains._group_activity(proc.pid)
            busy = busy or now_busy
        return cpu, busy
    finally:
        proc.kill()
        proc.wait()


def test_a_computing_process_is_seen_busy_and_a_waiting_one_is_not() -> None:
    _, busy = _activity_seen([sys.executable, "-c", "while True: pass"])
    assert busy
    cpu, busy = _activity_seen(["sleep", "30"])
    assert not busy and cpu < 0.05


def test_a_waiting_step_is_stopped_as_stalled(monkeypatch) -> None:
    monkeypatch.setenv(toolchains.COMPILER_CPU_ENV, "1")  # window = the 2 s poll
    started = time.monotonic()
    outcome = toolchains.run_step(["sleep", "30"])
    assert toolchains.STALL_SIGN in outcome.output
    assert time.monotonic() - started < 15


def test_a_step_that_computes_runs_to_its_end(monkeypatch) -> None:
    monkeypatch.setenv(toolchains.COMPILER_CPU_ENV, "20")
    outcome = toolchains.run_step([sys.executable, "-c", "import time\nt = time.time()\nwhile time.time() - t < 3: pass"])
    assert outcome.returncode == 0 and toolchains.STALL_SIGN not in outcome.output
