"""Shared fixtures for the torch integration of bang_emu.

Everything that imports torch_mlu (which renames PyTorch's PrivateUse1 backend for the whole process)
or runs emulated kernels runs in a child Python process: a kernel bug must not take down pytest.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from bang_emu import torch_mlu_emu
from bang_emu.torch_mlu_emu import build

FIXTURES = Path(__file__).resolve().parent / "fixtures"

RunPython = Callable[..., subprocess.CompletedProcess]


def child_env(python_path: Sequence[Path] = (), shim: bool = True, **extra: str) -> dict[str, str]:
    """Environment of a child interpreter; with `shim`, `import torch_mlu` finds the emulated package."""
    env = dict(os.environ)
    env.pop("BANG_EMU_POISON", None)
    env.pop("BANG_EMU_TRACE", None)
    paths = [*python_path, *([torch_mlu_emu.pyshim_dir()] if shim else [])]
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in paths)
    env.update(extra)
    return env


@pytest.fixture()
def make_env() -> Callable[..., dict[str, str]]:
    """child_env as a fixture (test modules cannot import this conftest reliably)."""
    return child_env


@pytest.fixture(scope="session")
def device_library() -> Path:
    """The emulated mlu device library, built once into the cache (~30 s the first time)."""
    return build.prebuild()


@pytest.fixture()
def run_python(device_library: Path) -> RunPython:
    """Run `code` in a child interpreter that can `import torch_mlu`; returns the CompletedProcess."""

    def run(
        code: str,
        *,
        python_path: Sequence[Path] = (),
        shim: bool = True,
        cwd: Path | None = None,
        timeout: float = 180,
        **env: str,
    ) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-c", code],
            cwd=cwd,
            env=child_env(python_path, shim, **env),
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    return run


def build_extension(source_dir: Path, work_dir: Path, timeout: float = 900) -> Path:
    """Copy a setup.py project to `work_dir` and `python setup.py build_ext --inplace` it there."""
    project = work_dir / source_dir.name
    shutil.copytree(source_dir, project)
    result = subprocess.run(
        [sys.executable, "setup.py", "build_ext", "--inplace"],
        cwd=project,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert result.returncode == 0, f"extension build failed:\n{result.stdout[-4000:]}\n{result.stderr[-6000:]}"
    return project


@pytest.fixture(scope="module")
def sigmoid_extension(device_library: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/emu_torch/fixtures/sigmoid_ext built with torch_mlu.utils.cpp_extension (one build per module)."""
    return build_extension(FIXTURES / "sigmoid_ext", tmp_path_factory.mktemp("sigmoid_ext"))


RunJson = Callable[..., object]


@pytest.fixture()
def run_json(run_python: RunPython) -> RunJson:
    """Like run_python, for code whose last stdout line is a JSON document; asserts a clean exit."""

    def run(code: str, **kwargs: object) -> object:
        result = run_python(code, **kwargs)
        assert result.returncode == 0, f"child failed ({result.returncode}):\n{result.stdout[-3000:]}\n{result.stderr[-5000:]}"
        return json.loads(result.stdout.strip().splitlines()[-1])

    return run
