"""Session-wide set-up shared by every test folder.

Builds through the process runner use the host's precompiled torch headers (bang_harness.toolchains,
made once per machine into ~/.cache/bang_emu/pch; ProcessRunner makes them on its first build otherwise).
Making them here, once, before any test starts keeps that one-off minute out of whichever test happens to
build first (and out of its time limits); on a machine that has them this is a file lookup.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session", autouse=True)
def host_precompiled_headers() -> None:
    if os.environ.get("BANG_GRADER_NO_PCH"):
        return
    try:
        sys.path.insert(0, str(ROOT / "sandbox"))
        from bang_harness.toolchains import pch_dir
    except ImportError:
        return
    finally:
        sys.path.remove(str(ROOT / "sandbox"))
    if pch_dir() is not None:
        return
    from grader.sandbox.process import ensure_host_pch

    cache = Path(os.environ.get("BANG_EMU_CACHE") or Path.home() / ".cache" / "bang_emu")
    problem = ensure_host_pch(sys.executable, cache, {**os.environ, "PYTHONPATH": str(ROOT / "sandbox")})
    if problem:  # builds still work, only slower: say so once instead of failing anything
        print(f"\nconftest: {problem}", file=sys.stderr)
