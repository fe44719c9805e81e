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


def _open_checked(path: Path, max_bytes: int, root: Path | str | None) -> int:
    """An fd of a regular file of at most `max_bytes`, opened without following links (see the module doc)."""
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
    except BaseException:
        os.close(fd)
        raise
    return fd


class CappedReader(io.RawIOBase):
    """A raw reader that refuses to hand out more than `max_bytes` (the file may grow while it is read)."""

    def __init__(self, fd: int, max_bytes: int, path: Path) -> None:
        super().__init__()
        self._fd = fd
        self._left = max_bytes
        self._path = path

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer)
        if self._left <= 0:
            if os.read(self._fd, 1):
                raise UntrustedFileError(f"{self._path}: grew beyond its cap while read")
            return 0
        data = os.read(self._fd, min(len(view), self._left))
        view[:len(data)] = data
        self._left -= len(data)
        return len(data)

    def close(self) -> None:
        if not self.closed:
            os.close(self._fd)
        super().close()


def open_capped(path: Path | str, max_bytes: int, root: Path | str | None = None) -> io.BufferedReader:
    """A buffered binary stream of an untrusted file (same refusals as read_bytes_capped), for line streaming."""
    path = Path(path)
    return io.BufferedReader(CappedReader(_open_checked(path, max_bytes, root), max_bytes, path), 1 << 16)


def read_bytes_capped(path: Path | str, max_bytes: int, root: Path | str | None = None) -> bytes:
    """The file's bytes, at most `max_bytes`; with `root`, `path` must lie under it with no symlink on the way."""
    path = Path(path)
    fd = _open_checked(path, max_bytes, root)
    try:
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


def copy_capped(path: Path | str, target: Path, max_bytes: int, root: Path | str | None = None) -> int:
    """Copies an untrusted file (the same refusals as read_bytes_capped) into the file `target`, in the kernel
    (no copy through this process's memory: a run's journal may be a GiB); its size."""
    path = Path(path)
    fd = _open_checked(path, max_bytes, root)
    try:
        with target.open("wb") as out:
            copied = 0
            while copied <= max_bytes:
                sent = os.sendfile(out.fileno(), fd, None, min(max_bytes + 1 - copied, 1 << 30))
                if not sent:
                    return copied
                copied += sent
        raise UntrustedFileError(f"{path}: grew beyond the cap of {max_bytes} bytes while read")
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
    return _parse_npy(path, data, None, None)


def load_npy_expected(path: Path | str, shape: tuple[int, ...], dtype: np.dtype | str | None = None,
                      root: Path | str | None = None) -> np.ndarray:
    """The array in an .npy file that must hold `shape` (and `dtype`, when given); the header is parsed and
    checked before anything is allocated, so a header claiming a huge shape costs nothing."""
    dtype = np.dtype(dtype) if dtype is not None else None
    itemsize = max(dtype.itemsize if dtype is not None else 16, 1)
    cap = int(np.prod(shape, dtype=np.int64)) * itemsize + NPY_HEADER_MAX_BYTES
    data = read_bytes_capped(path, cap, root)
    return _parse_npy(path, data, tuple(int(d) for d in shape), dtype)


NPY_HEADER_MAX_BYTES = 4096 + 64


def _parse_npy(path: Path | str, data: bytes, shape: tuple[int, ...] | None, dtype: np.dtype | None) -> np.ndarray:
    stream = io.BytesIO(data)
    try:
        version = np.lib.format.read_magic(stream)
        if version == (1, 0):
            got_shape, fortran, got_dtype = np.lib.format.read_array_header_1_0(stream, max_header_size=NPY_HEADER_MAX_BYTES)
        elif version in ((2, 0), (3, 0)):
            got_shape, fortran, got_dtype = np.lib.format.read_array_header_2_0(stream, max_header_size=NPY_HEADER_MAX_BYTES)
        else:
            raise ValueError(f"unsupported .npy version {version}")
    except (ValueError, OSError, EOFError, SyntaxError, TypeError) as exc:
        raise UntrustedFileError(f"{path}: not a valid .npy file ({str(exc)[:200]})") from exc
    if got_dtype.hasobject or got_dtype.kind not in "biufc" or got_dtype.fields is not None:
        raise UntrustedFileError(f"{path}: not a numeric array (dtype {got_dtype})")
    if not all(isinstance(d, int) and d >= 0 for d in got_shape):
        raise UntrustedFileError(f"{path}: malformed shape {got_shape!r}")
    if shape is not None and tuple(got_shape) != shape:
        raise UntrustedFileError(f"output shape {list(got_shape)} but expected {list(shape)}")
    if dtype is not None and got_dtype != dtype:
        raise UntrustedFileError(f"output dtype {got_dtype} but expected {dtype}")
    # Sizes checked with Python ints before numpy allocates anything (a header can claim 2**62 elements).
    count = 1
    for d in got_shape:
        count *= d
    payload = memoryview(data)[stream.tell():]
    if count * got_dtype.itemsize != len(payload):
        raise UntrustedFileError(f"{path}: the header promises {count * got_dtype.itemsize} bytes of data, "
                                 f"the file holds {len(payload)}")
    array = np.frombuffer(payload, dtype=got_dtype, count=count)
    array = array.reshape(got_shape, order="F" if fortran else "C")
    return np.array(array, copy=True)  # writable, and independent of the file's bytes
