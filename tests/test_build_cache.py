"""grader.orchestration.build_cache: keyed by what is compiled only, one build per key at a time, pruning that
spares recent builds; and a real grading that reuses the build of a copy which changed only ops.py."""

from __future__ import annotations

import os
import re
import shutil
import threading
import time
from pathlib import Path

import pytest

from grader.orchestration.build_cache import (
    ENGINES_DIR,
    OBJECTS_DIR,
    SYMBOLS_DIR,
    build_key,
    build_lock,
    build_recipe,
    entry,
    prune_build_cache,
)

ROOT = Path(__file__).resolve().parents[1]
VECTOR = ROOT / "reference_kernels" / "sigmoid" / "vector"


def _key(root: Path, plan: str = "my_ops_ext", env: dict[str, str] | None = None, toolchain: str = "t1") -> str:
    return build_key(root, plan, build_recipe(toolchain, "emu", env if env is not None else {"BANG_EMU_DEVICE": "mlu370-x8"}))


@pytest.fixture
def submission(tmp_path: Path) -> Path:
    copy = tmp_path / "sub"
    shutil.copytree(VECTOR, copy)
    return copy


def test_python_toml_and_documentation_are_not_part_of_the_key(submission: Path) -> None:
    before = _key(submission)
    (submission / "ops.py").write_text((submission / "ops.py").read_text() + "\n# edited\n")
    (submission / "helpers.py").write_text("X = 1\n")
    (submission / "grade.toml").write_text('[student]\nid = "someone-else"\n')
    (submission / "README.md").write_text("# my notes\n")
    (submission / "expected.toml").write_text("verdict = 'passed'\n")  # the test fixtures' own
    assert _key(submission) == before


@pytest.mark.parametrize("change", ["mlu", "cpp", "header_elsewhere", "plan", "env", "toolchain"])
def test_every_input_of_the_build_is_part_of_the_key(submission: Path, change: str) -> None:
    before = _key(submission)
    if change == "mlu":
        (mlu,) = (submission / "mlu").glob("*.mlu")
        mlu.write_text(mlu.read_text() + "\n")
    elif change == "cpp":
        (cpp,) = (submission / "cpp").glob("*.cpp")
        cpp.write_text(cpp.read_text() + "\n")
    elif change == "header_elsewhere":  # reachable by a relative #include from cpp/
        (submission / "include").mkdir()
        (submission / "include" / "common.h").write_text("#define X 1\n")
    after = {"plan": lambda: _key(submission, plan="other_ext"),
             "env": lambda: _key(submission, env={"BANG_EMU_DEVICE": "mlu270"}),
             "toolchain": lambda: _key(submission, toolchain="t2")}.get(change, lambda: _key(submission))()
    assert after != before


def test_one_build_per_key_at_a_time(tmp_path: Path) -> None:
    folder = entry(tmp_path / "cache", "k" * 32)
    events: list[str] = []

    def second() -> None:
        with build_lock(folder):
            events.append("second")

    with build_lock(folder):
        other = threading.Thread(target=second)
        other.start()
        time.sleep(0.3)
        events.append("first done")
    other.join(10)
    assert events == ["first done", "second"]
    assert not list(folder.iterdir()), "the lock lives beside the build folder, never in the sandbox's /build"


def test_pruning_spares_the_most_recent_and_builds_in_use(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    for i in range(4):
        (cache / f"old{i}").mkdir(parents=True)
        os.utime(cache / f"old{i}", (1000 + i, 1000 + i))
    entry(cache, "in_use")  # touched now: a grading may be reading it
    for kept in (ENGINES_DIR, SYMBOLS_DIR):  # kept engines (wasm_engine.py) and symbol readings (build_step) are
        for i in range(4):  # pruned by their own use, never as one build folder
            (cache / kept / f"e{i}").mkdir(parents=True)
            os.utime(cache / kept / f"e{i}", (1000 + i, 1000 + i))
        os.utime(cache / kept, (999, 999))
    prune_build_cache(cache, keep=2)
    assert sorted(p.name for p in cache.iterdir() if p.is_dir()) == sorted([ENGINES_DIR, SYMBOLS_DIR, "in_use", "old3"])
    assert sorted(p.name for p in (cache / ENGINES_DIR).iterdir()) == ["e2", "e3"]
    assert sorted(p.name for p in (cache / SYMBOLS_DIR).iterdir()) == ["e2", "e3"]


@pytest.mark.slow
def test_a_copy_that_changed_only_ops_py_reuses_the_build(submission: Path, tmp_path: Path) -> None:
    from grader.orchestration import GradeEnvironment, GradeRequest, grade_submission
    from grader.results import Verdict

    cache = tmp_path / "cache"  # its own: the session's may already hold this build
    request = GradeRequest(stages=("vector",))
    environment = GradeEnvironment(sandbox="none", build_cache=cache)
    first = grade_submission(submission, request, environment)
    (submission / "ops.py").write_text((submission / "ops.py").read_text() + "\n# resubmitted\n")
    second = grade_submission(submission, request, environment)
    assert first.build is not None and not first.build.cached, first.message
    assert second.build is not None and second.build.cached and second.build.cache_key == first.build.cache_key
    assert first.verdict == second.verdict == Verdict.PASSED, second.message
    # one build; beside it the kept engine of its kernels (wasm_engine.py) and any shared binding objects
    builds = [p for p in cache.iterdir() if p.is_dir() and p.name not in (OBJECTS_DIR, ENGINES_DIR, SYMBOLS_DIR)]
    assert len(builds) == 1


@pytest.mark.parametrize("says", ["a compile error", "Killed"])
def test_a_compile_error_is_kept_but_not_a_compiler_the_machine_stopped(tmp_path: Path, says: str) -> None:
    """"Killed" is what g++ prints when the OOM killer stops cc1plus; here it is the log's text."""
    from grader.orchestration import GradeEnvironment, GradeRequest, grade_submission
    from grader.results import Verdict

    sub = tmp_path / "sub"
    shutil.copytree(VECTOR, sub)
    # The binding fails at once (its body is never parsed): what is tested is which failures are kept.
    text = {"a compile error": "an error of the student's", "Killed": "cc1plus: Killed (program cc1plus)"}[says]
    binding = sub / "cpp" / "sigmoid_binding.cpp"
    binding.write_text(f'#error "{text}"\n#if 0\n{binding.read_text()}\n#endif\n')
    request = GradeRequest(stages=("vector",))
    environment = GradeEnvironment(sandbox="none", build_cache=tmp_path / "cache")
    first = grade_submission(sub, request, environment)
    second = grade_submission(sub, request, environment)
    assert first.verdict == second.verdict == Verdict.COMPILE_ERROR, second.message
    assert first.build is not None and second.build is not None and not first.build.cached
    assert second.build.cached == (says != "Killed")
    # the same output, but for the steps' seconds where the build ran again
    def untimed(text: str) -> str:
        return re.sub(r"  \(\d+\.\d s\)$", "", text, flags=re.M)

    assert untimed(second.build.compiler_output) == untimed(first.build.compiler_output)
    if second.build.cached:  # the stored log itself
        assert second.build.compiler_output == first.build.compiler_output


def test_a_build_is_limited_in_cpu_seconds_per_compiler_not_in_the_hosts_wall_time(tmp_path: Path, monkeypatch) -> None:
    """The binding's g++ needs more than one CPU-second: with a 1 s limit it is stopped by RLIMIT_CPU (the wall
    limit is made far longer here, so only the CPU limit can stop it) and the verdict says so."""
    from bang_harness.plan import BuildPlan

    from grader.orchestration import GradeEnvironment, build_step
    from grader.orchestration.build_step import BuildStep
    from grader.orchestration.environment import resolve_backend
    from grader.results import Verdict
    from grader.sandbox.process import ProcessRunner

    sub = tmp_path / "sub"
    shutil.copytree(VECTOR, sub)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.setattr(build_step, "BUILD_WALL_FACTOR", 200)
    step = BuildStep(ProcessRunner(), resolve_backend(GradeEnvironment()), sub,
                     BuildPlan.handout(sub, "my_ops_ext"),
                     "my_ops_ext", timeout_seconds=1, cache=None, progress=lambda *_: None)
    started = time.monotonic()
    built = step.build(step.folder(work), work)
    assert built.failure == (Verdict.TIMEOUT, "a compiler used more than 1 CPU-seconds on one file")
    assert "CPU time limit exceeded" in built.info.compiler_output
    assert time.monotonic() - started < 150
