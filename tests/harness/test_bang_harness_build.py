"""`python -m bang_harness build`: failures end in build.json ok=false with the compiler's own words."""

from __future__ import annotations

from pathlib import Path

import pytest
from bang_harness.build import BuildLog
from bang_harness.submission import SubmissionConfig, SubmissionError
from harness_workspace import Workspace, write_tree

from grader.sandbox.base import Phase


def build(tmp_path: Path, files: dict[str, str], backend: str) -> tuple[Workspace, object]:
    space = Workspace(tmp_path, write_tree(tmp_path / "submission", files))
    outcome = space.harness("build", "--backend", backend, phase=Phase.BUILD, wall_seconds=120)
    return space, outcome


def test_a_cpp_compile_error_fails_the_build_with_the_compiler_message(tmp_path):
    # The C++ side is compiled by g++ on both backends, so this runs without cncc or the emulator.
    space, outcome = build(tmp_path, {"cpp/binding.cpp": "int broken( {\n", "ops.py": ""}, "mlu")
    assert outcome.exit_code == 1
    summary = space.build_json()
    assert summary["ok"] is False and summary["seconds"] >= 0
    assert summary["toolchain"]
    assert "binding.cpp:1" in summary["log_tail"] and "error" in summary["log_tail"]
    assert "failed to compile" in summary["log_tail"]
    assert "binding.cpp:1" in (space.build / "build.log").read_text()
    assert not (space.build / "ext" / "my_ops_ext.so").exists()
    assert summary["error_kind"] == "compile_error"


def test_error_text_in_the_sources_cannot_claim_a_harness_fault(tmp_path):
    """`#error internal error in the build harness` is compiler output: build.json still says compile_error."""
    files = {"cpp/binding.cpp": "#error internal error in the build harness\n", "ops.py": ""}
    space, outcome = build(tmp_path, files, "mlu")
    summary = space.build_json()
    assert outcome.exit_code == 1 and "internal error in the build harness" in summary["log_tail"]
    assert summary["error_kind"] == "compile_error"


def test_a_fault_before_compiling_is_marked_as_the_harness(tmp_path):
    from bang_harness.build import run_build
    from bang_harness.paths import HarnessPaths

    space = Workspace(tmp_path, write_tree(tmp_path / "submission", {"cpp/b.cpp": "", "ops.py": ""}))
    # No such toolchain: the harness fails before any student source reaches a compiler.
    assert run_build("no_such_backend", HarnessPaths(space.submission, space.build, space.io)) == 1
    summary = space.build_json()
    assert summary["error_kind"] == "harness_error" and "internal error in the build harness" in summary["log_tail"]


def test_a_submission_without_a_binding_is_refused(tmp_path):
    space, outcome = build(tmp_path, {"mlu/k.mlu": "", "ops.py": ""}, "mlu")
    assert outcome.exit_code == 1
    assert "no .cpp binding" in space.build_json()["log_tail"]


def test_a_bad_grade_toml_is_reported_in_the_build_log(tmp_path):
    space, outcome = build(tmp_path, {"cpp/b.cpp": "", "grade.toml": 'extension = "my-ext; rm -rf /"\n'}, "mlu")
    assert outcome.exit_code == 1
    assert "must be a Python identifier" in space.build_json()["log_tail"]


def test_grade_toml_names_the_module_and_extension(tmp_path):
    assert SubmissionConfig.load(tmp_path) == SubmissionConfig("ops", "my_ops_ext")
    (tmp_path / "grade.toml").write_text('module = "kernels"\n[student]\nid = "s1"\nextension = "lab5"\n')
    assert SubmissionConfig.load(tmp_path) == SubmissionConfig("kernels", "lab5")
    (tmp_path / "grade.toml").write_text("module = [\n")
    with pytest.raises(SubmissionError, match="not valid TOML"):
        SubmissionConfig.load(tmp_path)


def test_the_build_log_keeps_its_head_under_the_cap():
    log = BuildLog(cap=100)
    log.add("first error here")
    log.add("x" * 500)
    text = log.text()
    assert text.startswith("first error here") and "capped at 100 bytes" in text
    assert len(text) < 200


def _step_under_hogs(monkeypatch: pytest.MonkeyPatch, command: list[str]) -> object:
    """run_step with a 2 s stall window (30 CPU seconds allowed) beside a normal-priority busy process on CPU 0 (where the step runs)."""
    import subprocess
    import sys

    from bang_harness import toolchains

    monkeypatch.setenv(toolchains.COMPILER_CPU_ENV, "30")
    monkeypatch.setattr(toolchains, "STALL_SECONDS", 2.0)
    hog = ("import os, time\nos.sched_setaffinity(0, {0})\nprint('busy', flush=True)\n"
           "end = time.monotonic() + 12\nwhile time.monotonic() < end: pass\n")
    hogs = [subprocess.Popen([sys.executable, "-c", hog], stdout=subprocess.PIPE)]
    assert hogs[0].stdout is not None and hogs[0].stdout.readline() == b"busy\n"  # on CPU 0 before the step starts
    try:
        return toolchains.run_step(command)
    finally:
        for process in hogs:
            process.kill()
            process.wait()


def test_a_compile_starved_of_cpu_is_not_taken_for_one_that_waits(monkeypatch):
    """Issue 27's sweep: under load at `nice`, honest binding compiles got < 5 % of a CPU for 60 s and were stopped
    as "made no progress" (a timeout for every seed). A step that wants the CPU (here SCHED_IDLE beside a busy
    process on the same CPU: it runs almost never) is computing, not waiting on a pipe: its time on the run queue
    counts."""
    import sys

    from bang_harness import toolchains

    # run_step starts a session: with autogroup scheduling its weight is the autogroup's, lowered here too
    starved = ("import os, time\nos.sched_setaffinity(0, {0})\nos.nice(19)\n"
               "os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))\n"
               "try:\n    open('/proc/self/autogroup', 'w').write('19')\nexcept OSError:\n    pass\n"
               "end = time.monotonic() + 7\nwhile time.monotonic() < end: pass\n")
    step = _step_under_hogs(monkeypatch, [sys.executable, "-c", starved])
    assert toolchains.STALL_SIGN not in step.output and step.returncode == 0, step.output


def test_a_step_that_waits_is_still_stopped(monkeypatch):
    """The defence the window is for (`#include "/proc/self/fd/1"`): a step that sleeps neither runs nor waits to."""
    from bang_harness import toolchains

    step = _step_under_hogs(monkeypatch, ["sleep", "30"])
    assert toolchains.STALL_SIGN in step.output and step.seconds < 15, step.output


def test_a_group_that_wants_the_cpu_is_runnable_and_one_that_sleeps_is_not():
    """The stall rule's second sign: schedstat adds a wait only when the waiter gets the CPU, so a compile starved
    for a whole window (a weight-3 SCHED_IDLE task beside busy ones, on a newer scheduler) shows no progress yet;
    its state (R) says it wants the CPU. CI's stop 49 run stopped such a step as "made no progress"."""
    import subprocess
    import sys
    import time

    from bang_harness import toolchains

    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
    sleeper = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        time.sleep(0.5)
        assert toolchains._group_progress(busy.pid)[1] is True
        assert toolchains._group_progress(sleeper.pid)[1] is False
    finally:
        for process in (busy, sleeper):
            process.kill()
            process.wait()
