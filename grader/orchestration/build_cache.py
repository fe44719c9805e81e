"""The build cache shared by `grade submit`, `grade batch` and the tests: one folder per build, named by the
content of what is compiled, so a resubmission that changed only ops.py or grade.toml's [student] table, or
two submissions with the same kernels and binding, build once.

The key covers every input of the build phase: the submission's files except Python, TOML and documentation
(the harness compiles the sources the host's build plan names, whose relative includes may reach other folders,
but never reads Python or grade.toml), the build plan itself (sources, include folders, the extension name: a
-D macro and the library's file name; the host derives it from the layout and grade.toml), the backend, the build phase's
environment, and the toolchain (the image tag, which hashes the harness and emulator sources; without an
image the same hash of the sources plus the host compiler's version). Only a successful build is reused.
Builds of one key are serialised by a lock beside the folder (never inside: the folder is the sandbox's
/build), so parallel batch workers never compile into the same folder at once.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

from grader.cache_home import cache_home

# Files no C++ or BANG source includes in practice: Python, TOML settings (grade.toml), documentation, images,
# notebooks. Everything else counts, so even an odd `#include "table.txt"` keys the build.
NOT_COMPILED_SUFFIXES = {".py", ".pyc", ".pyi", ".toml", ".md", ".rst", ".ipynb", ".pdf", ".png", ".jpg", ".jpeg",
                         ".gif", ".svg"}
RECENTLY_USED_SECONDS = 2 * 3600  # longer than any grading: pruning never removes a build in use
OBJECTS_DIR = "objects"  # binding objects shared between builds (object_cache.py), one folder per key
ENGINES_DIR = "engines"  # the WebAssembly engines made from builds' modules (wasm_engine.py), one folder per key
SYMBOLS_DIR = "symbols"  # the host's reading of built extensions' symbols (build_step.kernel_symbols), likewise


def default_build_cache() -> Path:
    """Where `grade submit` and `grade batch` keep builds by content: $BANG_GRADER_BUILD_CACHE, else
    ~/.cache/bang-grader/builds."""
    if os.environ.get("BANG_GRADER_BUILD_CACHE"):
        return Path(os.environ["BANG_GRADER_BUILD_CACHE"])
    return cache_home() / "builds"


def compiled_content_hash(root: Path) -> str:
    """Hash of the files a build can read: all but NOT_COMPILED_SUFFIXES (symlinks by their target text, never
    followed)."""
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        if "__pycache__" in path.parts or not (path.is_symlink() or path.is_file()):
            continue
        if path.suffix.lower() in NOT_COMPILED_SUFFIXES:
            continue
        digest.update(os.fsencode(path.relative_to(root)) + b"\0")  # names are bytes: any a student's tar holds
        data = os.fsencode(os.readlink(path)) if path.is_symlink() else path.read_bytes()
        digest.update(hashlib.sha256(data).digest())
    return digest.hexdigest()


def build_recipe(toolchain: str, backend: str, env: dict[str, str]) -> str:
    """What besides the sources decides a build: `toolchain` names the compilers and harness exactly."""
    return "\0".join([toolchain, backend, *[f"{k}={v}" for k, v in sorted(env.items())]])


def build_key(root: Path, plan: str, recipe: str) -> str:
    """The cache key of a build (32 hex digits); `plan` is the build plan's text (or the extension name where
    there is none), `recipe` is build_recipe()'s."""
    return hashlib.sha256("\0".join([compiled_content_hash(root), plan, recipe]).encode()).hexdigest()[:32]


def entry(cache: Path, key: str) -> Path:
    """The build folder of `key`, created, and marked as just used (pruning goes by that time)."""
    path = Path(cache) / key
    path.mkdir(parents=True, exist_ok=True)
    os.utime(path)
    return path


@contextlib.contextmanager
def build_lock(build_dir: Path) -> Iterator[None]:
    """Held while a build folder is checked and filled: one build per key at a time on this host."""
    with open(build_dir.parent / f".{build_dir.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def prune_build_cache(cache: Path, keep: int = 64) -> None:
    """Keeps the `keep` most recently used builds (four times as many shared binding object keys, as many
    engines and symbol readings), and every one used in the last two hours (a grading or a batch may be reading it)."""
    _prune(cache, keep, skip={OBJECTS_DIR, ENGINES_DIR, SYMBOLS_DIR})
    _prune(cache / OBJECTS_DIR, 4 * keep, skip=set())
    _prune(cache / ENGINES_DIR, keep, skip=set())
    _prune(cache / SYMBOLS_DIR, keep, skip=set())


def _prune(folder: Path, keep: int, skip: set[str]) -> None:
    try:
        entries = sorted((p for p in folder.iterdir() if p.is_dir() and p.name not in skip),
                         key=lambda p: p.stat().st_mtime, reverse=True)
    except OSError:
        return
    now = time.time()
    for stale in entries[keep:]:
        try:
            if now - stale.stat().st_mtime < RECENTLY_USED_SECONDS:
                continue
        except OSError:
            continue
        shutil.rmtree(stale, ignore_errors=True)
        (folder / f".{stale.name}.lock").unlink(missing_ok=True)
