"""The WebAssembly engine made once per module on the trusted side and staged into each replay (issue 41,
grader/orchestration/wasm_engine.py): the key it is kept by, and real gradings in the docker sandbox -- the first
grading of a module runs `bang_harness make-engine` once, every replay of it and of the next grading is staged that
engine and makes none, and the grade is the same. Skipped visibly without the emulation image."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from bang_harness.protocol import REPLAY_PROFILE, WASM_ENGINE, WASM_MODULE, WASM_SITES

from grader.orchestration import GradeEnvironment, GradeRequest, grade_submission
from grader.orchestration.build_cache import ENGINES_DIR
from grader.orchestration.environment import resolve_environment
from grader.orchestration.wasm_engine import engine_key, stage_engine
from tests.e2e.conftest import BUILD_CACHE, ROOT, e2e_sandbox, graded


def _build(folder: Path, module: bytes = b"\0asm\1\0\0\0", sites: list[str] | None = None) -> Path:
    (folder / "device").mkdir(parents=True)
    (folder / WASM_MODULE).write_bytes(module)
    (folder / WASM_SITES).write_text(json.dumps(sites or ["k_site"]))
    return folder


def test_the_engine_key_is_the_module_its_sites_and_the_image(tmp_path):
    key = engine_key(_build(tmp_path / "a"), "image-1")
    assert key is not None and key == engine_key(_build(tmp_path / "same"), "image-1")
    assert engine_key(_build(tmp_path / "module", module=b"\0asm\1\0\0\0\1"), "image-1") != key
    assert engine_key(_build(tmp_path / "sites", sites=["other"]), "image-1") != key
    assert engine_key(tmp_path / "a", "image-2") != key


def test_no_module_or_a_linked_one_has_no_key(tmp_path):
    assert engine_key(tmp_path, "image") is None  # no module was built: the replay says why, as before
    folder = _build(tmp_path / "linked")
    elsewhere = tmp_path / "elsewhere.wasm"
    elsewhere.write_bytes(b"\0asm\1\0\0\0")
    (folder / WASM_MODULE).unlink()
    (folder / WASM_MODULE).symlink_to(elsewhere)  # the build sandbox wrote this folder: never followed
    assert engine_key(folder, "image") is None


def test_a_staged_engine_is_the_hosts_and_read_only(tmp_path):
    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / Path(WASM_ENGINE).name).write_bytes(b"engine")
    io = tmp_path / "io"
    io.mkdir()
    stage_engine(None, io)
    assert not (io / WASM_ENGINE).exists()
    stage_engine(kept, io)
    assert (io / WASM_ENGINE).read_bytes() == b"engine"
    assert (io / WASM_ENGINE).stat().st_mode & 0o777 == 0o444


class _Counting:
    """The real runner, counting the engine makers it starts."""

    def __init__(self, inner) -> None:
        self.inner, self.name, self.image = inner, inner.name, getattr(inner, "image", "")
        self.makers = 0

    def run(self, phase, argv, mounts, limits, env=None):
        self.makers += "make-engine" in argv
        return self.inner.run(phase, argv, mounts, limits, env=env)

    def start(self, phase, argv, mounts, limits, env=None):
        return self.inner.start(phase, argv, mounts, limits, env=env)


def _profiles(result) -> list[dict]:
    work = next(Path(line.split(": ", 1)[1]) for line in result.message.splitlines()
                if line.startswith("work folder kept: "))
    try:
        return [json.loads(p.read_text()) for p in sorted(work.rglob(REPLAY_PROFILE))]
    finally:
        shutil.rmtree(work, ignore_errors=True)


def test_a_module_s_engine_is_made_once_and_every_replay_is_staged_it(tmp_path, monkeypatch):
    if e2e_sandbox() != "docker":
        pytest.skip("the emulation image is not built (the wasm toolchain is in it): `grade setup --tests`")
    path = "reference_kernels/sigmoid/vector"
    first = graded(path)  # the session's build, copied into a cache of this test's own (no engine kept yet)
    cache = tmp_path / "cache"
    shutil.copytree(BUILD_CACHE / first.build.cache_key, cache / first.build.cache_key)
    environment = GradeEnvironment(sandbox="docker", build_cache=cache)
    runner = _Counting(resolve_environment(environment)[1])
    monkeypatch.setenv("BANG_GRADER_KEEP_WORK", "1")
    results = []
    for makers in (1, 1):  # so far: the first grading made it, the second found it kept
        result = grade_submission(ROOT / path, GradeRequest(), replace(environment, runner=runner))
        assert result.build.cached and runner.makers == makers
        profiles = _profiles(result)
        assert len(profiles) >= 2 and all(p["engine"] == "staged" and p["engine_cpu_s"] == 0 for p in profiles)
        results.append(result)
    kept = list((cache / ENGINES_DIR).iterdir())
    assert [k.name for k in kept if not k.name.startswith(".")] == [
        engine_key(cache / first.build.cache_key, _recipe(environment))]
    assert all(k.is_dir() and (k / Path(WASM_ENGINE).name).is_file() for k in kept if not k.name.startswith("."))
    for result in results:
        assert (result.score, result.verdict) == (first.score, first.verdict) and result.score > 0
        assert "replayed natively" not in result.message
        assert [(s.name, s.verdict) for s in result.stages] == [(s.name, s.verdict) for s in first.stages]


def _recipe(environment: GradeEnvironment) -> str:
    from grader.orchestration.build_step import BuildStep

    backend, runner = resolve_environment(environment)
    return BuildStep(runner, backend, ROOT, None, "", 0.0, None, lambda *_: None,
                     str(getattr(runner, "image", "") or "")).recipe

