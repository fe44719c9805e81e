"""Fixtures for the emulator tests: build real .mlu programs with cncc-emu once per session."""

from __future__ import annotations

from pathlib import Path

import pytest
from emu_helpers import cncc


@pytest.fixture(scope="session")
def build(tmp_path_factory):
    """build(source, *flags) -> executable, compiled once per session."""
    out_dir = tmp_path_factory.mktemp("emu-bin")
    cache: dict[tuple, Path] = {}

    def _build(source: Path, *flags: str) -> Path:
        key = (str(source), flags)
        if key not in cache:
            exe = out_dir / f"{source.stem}-{len(cache)}"
            proc = cncc("--bang-arch=compute_30", "-O2", *flags, source, "-o", exe)
            assert proc.returncode == 0, proc.stderr
            cache[key] = exe
        return cache[key]

    return _build
