"""Where the grader keeps what it can make again (builds, drawn arrays, compiled report templates, image build
locks): $XDG_CACHE_HOME/bang-grader, else ~/.cache/bang-grader. Nothing here is ever mounted into a sandbox whole:
a sandbox sees at most one build's folder (build_cache.py)."""

from __future__ import annotations

import os
from pathlib import Path


def cache_home() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "bang-grader"
