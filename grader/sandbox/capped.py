"""Size-capped readers for files a sandboxed process wrote (its outputs are untrusted data, never code).

Every read refuses symlinks (in the file name and, given a trusted `root`, in every folder between),
FIFOs, devices and anything but a regular file, and reads at most `max_bytes`: a submission can plant
`/io/outputs/c0.npy -> /etc/shadow`, a FIFO that blocks the grader, or a 100 GB sparse file.
"""

from __future__ import annotations

import io
import json
import os
import stat
from pathlib import Path
from typing import Any

import numpy as np

JSON_MAX_BYTES = 1 << 20


class UntrustedFileError(ValueError):
    """The file is missing, not a regular file, a symlink, too large, or not what it claims to be."""


def _open_dir_nofollow(root: Path, rel_parts: tuple[str, ...]) -> int:
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in rel_parts:
            if part in ("", ".", ".."):
                raise UntrustedFileError(f"refusing path component {part!r}")
            next_fd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            os.close(fd)
            fd = next_fd
    except OSError as exc:
        os.close(fd)
        raise UntrustedFileError(f"{'/'.join(rel_parts)}: not a plain folder under {root} ({exc.strerror})") from exc
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_bytes_capped(path: Path | str, max_bytes: int, root: Path | str | None = None) -> bytes:
    """The file's bytes, at most `max_bytes`; with `root`, `path` must lie under it with no symlink on the way."""
    path = Path(path)
    if root is not None:
        root = Path(root)
        try:
            rel = path.relative_to(root) if path.is_absolute() else path
        except ValueError as exc:
            raise UntrustedFileError(f"{path} is not under {root}") from exc
        dir_fd = _open_dir_nofollow(root, rel.parts[:-1])
        name = rel.parts[-1]
    else:
        dir_fd = None
        name = str(path)
    try:
        # O_NONBLOCK: opening a planted FIFO must not hang the grader.
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError as exc:
        raise UntrustedFileError(f"{path}: cannot open without following links ({exc.strerror})") from exc
    finally:
        if dir_fd is not None:
            os.close(dir_fd)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UntrustedFileError(f"{path}: not a regular file")
        if info.st_size > max_bytes:
            raise UntrustedFileError(f"{path}: {info.st_size} bytes, more than the cap of {max_bytes}")
        chunks = []
        remaining = max_bytes + 1
        while remaining > 0:
            chunk = os.read(fd, min(remaining, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            remaining -= len(chunk)
        data = b"".join(chunks)
        if len(data) > max_bytes:
            raise UntrustedFileError(f"{path}: grew beyond the cap of {max_bytes} bytes while read")
        return data
    finally:
        os.close(fd)


def read_json_capped(path: Path | str, max_bytes: int = JSON_MAX_BYTES, root: Path | str | None = None) -> Any:
    data = read_bytes_capped(path, max_bytes, root)
    try:
        return json.loads(data.decode("utf-8"), parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise UntrustedFileError(f"{path}: not valid JSON ({type(exc).__name__}: {str(exc)[:200]})") from exc


def _reject_constant(name: str) -> Any:
    raise ValueError(f"non-standard JSON constant {name}")


def load_npy_capped(path: Path | str, max_bytes: int, root: Path | str | None = None) -> np.ndarray:
    """A plain numeric/bool array from an .npy file; never unpickles (object arrays are refused)."""
    data = read_bytes_capped(path, max_bytes, root)
    try:
        array = np.load(io.BytesIO(data), allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise UntrustedFileError(f"{path}: not a valid .npy file ({str(exc)[:200]})") from exc
    if not isinstance(array, np.ndarray) or array.dtype.kind not in "biufc":
        raise UntrustedFileError(f"{path}: not a numeric array")
    return array
