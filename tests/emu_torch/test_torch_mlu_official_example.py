"""Cambricon's official torch_mlu `examples/mlu_extension`, built with its own setup.py and tested with its
own test, unchanged, against the emulated torch_mlu. The example is read from a fetched mirror of
Cambricon/torch_mlu (never copied into this repository); without the mirror the test is skipped."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from bang_emu import safe_tar

pytestmark = pytest.mark.slow

MIRROR = Path(os.environ.get("TORCH_MLU_MIRROR", "/work/.mirror/Cambricon+torch_mlu/repo"))
EXAMPLE = "examples/mlu_extension"


def export_example(destination: Path) -> Path:
    """`git archive` the example out of the bare mirror into `destination`."""
    archive = destination / "example.tar"
    with archive.open("wb") as out:
        subprocess.run(
            ["git", "--git-dir", str(MIRROR), "archive", "HEAD", EXAMPLE],
            stdout=out,
            stderr=subprocess.DEVNULL,  # the mirror lacks unrelated large files; git names them
            check=True,
            timeout=60,
        )
    safe_tar.extract_tar(archive, destination)
    return destination / EXAMPLE


def build_in_place(example: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "setup.py", "build_ext", "--inplace"],
        cwd=example,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )


@pytest.mark.skipif(not MIRROR.is_dir(), reason=f"no Cambricon/torch_mlu mirror at {MIRROR} (fetch it to run this)")
def test_official_mlu_extension_example_builds_and_passes_its_test(device_library, make_env, tmp_path):
    example = export_example(tmp_path)
    env = make_env()
    build = build_in_place(example, env)
    assert build.returncode == 0, f"{build.stdout[-3000:]}\n{build.stderr[-5000:]}"
    assert list((example / "mlu_custom_ext").glob("_C*.so")), "no mlu_custom_ext/_C*.so was built"

    # The example is meant to be installed; PYTHONPATH stands in for `python setup.py install`.
    env["PYTHONPATH"] = os.pathsep.join([str(example), env["PYTHONPATH"]])
    test = subprocess.run(
        [sys.executable, "tests/test_sigmoid.py", "-v"],
        cwd=example,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert test.returncode == 0, f"{test.stdout[-3000:]}\n{test.stderr[-5000:]}"
    assert "test_forward_with_shapes" in test.stderr and "... ok" in test.stderr and "\nOK" in test.stderr
