"""Session-wide set-up shared by every test folder.

Builds through the process runner use the host's precompiled torch headers (bang_harness.toolchains,
made once per machine into ~/.cache/bang_emu/pch; ProcessRunner makes them on its first build otherwise).
Making them here, once, before any test starts keeps that one-off minute out of whichever test happens to
build first (and out of its time limits); on a machine that has them this is a file lookup.

Builds are shared by every test of a session: one content-keyed build cache (grader.orchestration.build_cache)
in a fresh folder, named by $BANG_GRADER_BUILD_CACHE so that `grade submit` and `grade batch` subprocesses use it
too. Tests that grade through grade_submission() pass GradeEnvironment(build_cache=default_build_cache());
the same reference kernel (or fixture with the same mlu/ and cpp/, like most of the adversarial corpus) is
compiled once per session. A folder set in $BANG_GRADER_BUILD_CACHE beforehand is used as is and kept.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

import grader  # noqa: F401 -- before numpy: it gives the host one BLAS thread, as in every front door (grader/__init__.py)

ROOT = Path(__file__).resolve().parents[1]
# Set on import (the root conftest is imported before any other test module or conftest), so module-level
# helpers and the `grade` subprocesses of every test see the session's build cache.
_OWN_BUILD_CACHE: Path | None = None
if not os.environ.get("BANG_GRADER_BUILD_CACHE"):
    _OWN_BUILD_CACHE = Path(tempfile.mkdtemp(prefix="bang-grader-test-builds-"))
    os.environ["BANG_GRADER_BUILD_CACHE"] = str(_OWN_BUILD_CACHE)


# No test's `grade submit` parks its slots for the next one (slot_runner.park_at_exit): tests count their own
# containers, and a slot adopted across tests would blur whose is whose. tests/sandbox/test_parked_slots.py parks.
os.environ.setdefault("BANG_GRADER_PARK_SECONDS", "0")


def pytest_unconfigure(config: pytest.Config) -> None:
    if _OWN_BUILD_CACHE is not None:
        os.environ.pop("BANG_GRADER_BUILD_CACHE", None)
        shutil.rmtree(_OWN_BUILD_CACHE, ignore_errors=True)


@pytest.fixture(scope="session", autouse=True)
def host_precompiled_headers() -> None:
    if os.environ.get("BANG_GRADER_NO_PCH"):
        return
    try:
        sys.path.insert(0, str(ROOT / "sandbox"))
        from bang_harness.toolchains import BINDING_COMPILERS, pch_dir
    except ImportError:
        return
    finally:
        sys.path.remove(str(ROOT / "sandbox"))
    if all(pch_dir(c) is not None for c in BINDING_COMPILERS if shutil.which(c.command)):
        return
    from grader.sandbox.process import ensure_host_pch

    cache = Path(os.environ.get("BANG_EMU_CACHE") or Path.home() / ".cache" / "bang_emu")
    problem = ensure_host_pch(sys.executable, cache, {**os.environ, "PYTHONPATH": str(ROOT / "sandbox")})
    if problem:  # builds still work, only slower: say so once instead of failing anything
        print(f"\nconftest: {problem}", file=sys.stderr)
