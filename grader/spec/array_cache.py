"""The public cases' inputs and float64 references kept on disk between processes (issue 41): the public seeds
are fixed, so every `grade submit` would otherwise draw and compute the same arrays again.

Only cases drawn from the fixed public seed plan come here (ConcreteCase.on_disk, SeedPlan.fixed): never a replay
twin (its seed derives from the per-process secret salt, orchestration/replay.py TWIN_SALT, and must never touch
disk), nor a secret-mode case, nor another public master's (a seed sweep's masters would each fill the cache).
The folder is $BANG_GRADER_ARRAY_CACHE ("off": none), else ~/.cache/bang-grader/arrays: beside the build cache,
not in it (a build folder is a sandbox's /build; no sandbox mounts this one).

An entry is one file named by a hash of everything that determines its arrays (the caller's key: seed, dtype,
shapes, distributions, reference; and VERSION: the drawing and reference code's own text, numpy's version, the
machine), written whole under a temporary name and renamed into place. Loading checks the header's key and every
array's size and CRC-32 (a corrupt, truncated or foreign entry is removed and recomputed, never trusted), then
maps the file read-only: the arrays are read-only views of the page cache, no fresh pages to fault in. The checksum
guards against damage (a torn or truncated file, a bad disk), at half SHA-256's cost (~0.06 s for sigmoid's
~120 MB); any checksum kept in the file itself is no defence against whoever can write the folder, who could
as well edit the grader: the folder is the grading user's own and no sandbox mounts it. The folder is capped at
MAX_BYTES, least recently used entries out first.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import mmap
import os
import platform
import tempfile
import time
import zlib
from pathlib import Path

import numpy as np

from grader.cache_home import cache_home

MAGIC = b"BGARRAY1"
ALIGN = 4096  # the header is padded to a page: every array starts page-aligned in the mapping
MAX_BYTES = 2 << 30  # a grading of either assignment keeps ~200 MB (sigmoid's 4M-element perf inputs)
_SOURCES = ("cases.py", "references.py", "array_cache.py")


def _version() -> str:
    digest = hashlib.sha256()
    for name in _SOURCES:  # any change of how arrays are drawn or computed (or stored) is another key
        digest.update((Path(__file__).parent / name).read_bytes())
    digest.update(f"{np.__version__}\0{platform.machine()}".encode())
    return digest.hexdigest()


VERSION = _version()


def default_array_cache() -> Path | None:
    """$BANG_GRADER_ARRAY_CACHE ("off": none), else ~/.cache/bang-grader/arrays."""
    chosen = os.environ.get("BANG_GRADER_ARRAY_CACHE")
    if chosen == "off":
        return None
    if chosen:
        return Path(chosen)
    return cache_home() / "arrays"


def entry_name(key: tuple) -> str:
    return hashlib.sha256(f"{VERSION}\0{key!r}".encode()).hexdigest()[:40] + ".arrays"


def load(folder: Path, key: tuple) -> dict[str, np.ndarray] | None:
    """The arrays stored under `key`, read-only, or None (absent, or not intact: then removed)."""
    path = folder / entry_name(key)
    try:
        with open(path, "rb") as file:
            size = os.fstat(file.fileno()).st_size
            mapped = mmap.mmap(file.fileno(), 0, flags=mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0),
                               prot=mmap.PROT_READ) if size else None
    except OSError:  # absent (or unreadable: then computed, and stored over it if it can be)
        return None
    arrays = None
    if mapped is not None:
        try:
            arrays = _read(mapped, size, key)
        except (ValueError, KeyError, TypeError, UnicodeDecodeError):  # json.JSONDecodeError is a ValueError
            arrays = None
    if arrays is None:
        if mapped is not None:
            with contextlib.suppress(BufferError):  # a view a failed read left: closed when collected
                mapped.close()
        path.unlink(missing_ok=True)
        return None
    with contextlib.suppress(OSError):
        os.utime(path)  # recently used: eviction goes by this time
    return arrays


def _read(mapped: mmap.mmap, size: int, key: tuple) -> dict[str, np.ndarray] | None:
    if size < ALIGN or mapped[:len(MAGIC)] != MAGIC:
        return None
    length = int.from_bytes(mapped[len(MAGIC):len(MAGIC) + 8], "little")
    if length > ALIGN - len(MAGIC) - 8:
        return None
    header = json.loads(bytes(mapped[len(MAGIC) + 8:len(MAGIC) + 8 + length]))
    if header.get("key") != repr(key) or header.get("version") != VERSION:
        return None  # a hash collision of names, or a foreign file: not this entry
    arrays = {}
    view = memoryview(mapped)
    for name, (dtype, shape, offset, nbytes, crc) in header["arrays"].items():
        dt, count = np.dtype(dtype), int(np.prod(shape, dtype=np.int64))
        if offset < ALIGN or nbytes != count * dt.itemsize or offset + nbytes > size:
            return None
        if zlib.crc32(view[offset:offset + nbytes]) != crc:
            return None
        arrays[name] = np.frombuffer(mapped, dtype=dt, count=count, offset=offset).reshape(shape)
    return arrays


def store(folder: Path, key: tuple, arrays: dict[str, np.ndarray]) -> None:
    """`arrays` written under `key` (atomically: whole or not at all), then the folder trimmed to MAX_BYTES.
    Never raises: a cache that cannot be written is only slower."""
    arrays = {name: np.ascontiguousarray(array) for name, array in arrays.items()}
    entries, offset, end = {}, ALIGN, ALIGN
    for name, array in arrays.items():
        entries[name] = (array.dtype.str, list(array.shape), offset, array.nbytes,
                         zlib.crc32(memoryview(array).cast("B")))
        end = offset + array.nbytes  # the file ends with the last array: any truncation cuts checked bytes
        offset += -(-array.nbytes // 64) * 64
    header = json.dumps({"key": repr(key), "version": VERSION, "arrays": entries}).encode()
    if len(header) > ALIGN - len(MAGIC) - 8:
        return
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, temporary = tempfile.mkstemp(dir=folder, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as file:
                file.write((MAGIC + len(header).to_bytes(8, "little") + header).ljust(ALIGN, b"\0"))
                for name, array in arrays.items():
                    file.seek(entries[name][2])
                    file.write(memoryview(array).cast("B"))
                file.truncate(end)
            os.replace(temporary, folder / entry_name(key))
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
        trim(folder, MAX_BYTES)
    except OSError:
        return


def trim(folder: Path, max_bytes: int) -> None:
    """Least recently used entries removed until the folder's entries hold at most `max_bytes` (and temporary
    files a killed writer left, after an hour)."""
    now = time.time()
    for path in folder.glob(".tmp-*"):
        with contextlib.suppress(OSError):
            if now - path.stat().st_mtime > 3600:
                path.unlink()
    found = []
    for path in folder.glob("*.arrays"):
        with contextlib.suppress(OSError):
            stat = path.stat()
            found.append((stat.st_mtime, stat.st_size, path))
    total = sum(size for _, size, _ in found)
    for _, size, path in sorted(found, key=lambda f: f[0]):
        if total <= max_bytes:
            break
        path.unlink(missing_ok=True)
        total -= size
