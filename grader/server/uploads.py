"""The upload format between `grade submit --server` and the server: a gzipped tar of the submission folder,
packed and checked with the batch intake's caps (grader.batch.intake.IntakeLimits).

The client refuses what the server would refuse (links, oversize), so a student hears it before uploading;
the server checks again, since a client is anybody with a token. A refused upload is an UploadError and
never a submission: it does not count as an attempt.
"""

from __future__ import annotations

import io
import os
import shutil
import tarfile
import tempfile
from pathlib import Path

from bang_emu import safe_tar

from grader.batch.intake import (
    IGNORED_NAMES,
    IGNORED_SUFFIXES,
    IntakeError,
    IntakeLimits,
    content_hash,
    unpack_archive,
)
from grader.i18n import _

# An upload holds one student's sources: far below a class's caps.
UPLOAD_LIMITS = IntakeLimits(max_files=500, max_total_bytes=8 << 20, max_file_bytes=4 << 20, max_depth=8)
MAX_UPLOAD_BYTES = 4 << 20  # the compressed upload


class UploadError(Exception):
    """Why an upload is refused, worded for the student; `too_large` for the size caps (HTTP 413)."""

    def __init__(self, message: str, too_large: bool = False) -> None:
        super().__init__(message)
        self.too_large = too_large


def size_text(size: int) -> str:
    """A byte count as a student reads it: 4.2 MB, 310 KB, 12 bytes."""
    if size >= 1 << 20:
        return _("{n:.1f} MB").format(n=size / (1 << 20))
    if size >= 1 << 10:
        return _("{n:.0f} KB").format(n=size / (1 << 10))
    return _("{n} bytes").format(n=size)


def largest_files(folder: Path, count: int = 3) -> str:
    """The `count` largest files of `folder` with their sizes (links and ignored leftovers left out), for a
    refusal that says what to remove."""
    sizes = []
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=False):
        dirnames[:] = [d for d in dirnames if d not in IGNORED_NAMES]
        for name in filenames:
            path = Path(dirpath) / name
            if name in IGNORED_NAMES or name.endswith(IGNORED_SUFFIXES) or path.is_symlink() or not path.is_file():
                continue
            sizes.append((path.stat().st_size, path.relative_to(folder).as_posix()))
    return ", ".join(f"{rel} ({size_text(size)})" for size, rel in sorted(sizes, reverse=True)[:count])


def pack_folder(folder: Path, limits: IntakeLimits = UPLOAD_LIMITS) -> bytes:
    """The submission folder as a .tar.gz (editor and build leftovers left out). Raises UploadError for a
    link or a folder past the caps (naming its largest files)."""
    buf = io.BytesIO()
    files = total = 0
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for dirpath, dirnames, filenames in os.walk(folder, followlinks=False):
            dirnames[:] = sorted(d for d in dirnames if d not in IGNORED_NAMES)
            for name in sorted(filenames + [d for d in dirnames if Path(dirpath, d).is_symlink()]):
                path = Path(dirpath) / name
                rel = path.relative_to(folder).as_posix()
                if name in IGNORED_NAMES or name.endswith(IGNORED_SUFFIXES):
                    continue
                if path.is_symlink() or not path.is_file():
                    raise UploadError(_("{path} is a link or not a regular file: upload only regular files")
                                      .format(path=rel))
                files += 1
                total += path.stat().st_size
                if files > limits.max_files or total > limits.max_total_bytes:
                    raise UploadError(_("the folder is larger than the server accepts ({files} files, {mb} MB); "
                                        "its largest files: {largest}").format(
                                            files=limits.max_files, mb=limits.max_total_bytes >> 20,
                                            largest=largest_files(folder)), True)
                tf.add(path, arcname=rel, recursive=False)
    data = buf.getvalue()
    if len(data) > MAX_UPLOAD_BYTES:
        raise UploadError(_("the packed folder is {size}; the server accepts at most {limit}; its largest files: "
                            "{largest}").format(size=size_text(len(data)), limit=size_text(MAX_UPLOAD_BYTES),
                                                largest=largest_files(folder)), True)
    return data


def too_large(size: int | None) -> UploadError:
    """The refusal of an upload past MAX_UPLOAD_BYTES: its true `size`, or None when reading stopped at the cap
    (then "more than" the cap)."""
    if size is None:
        return UploadError(_("the upload is more than {limit}; the server accepts at most {limit}").format(
            limit=size_text(MAX_UPLOAD_BYTES)), True)
    shown, limit = size_text(size), size_text(MAX_UPLOAD_BYTES)
    if shown == limit:  # just past the cap: the bytes tell them apart
        shown, limit = _("{n} bytes").format(n=size), _("{n} bytes").format(n=MAX_UPLOAD_BYTES)
    return UploadError(_("the upload is {size}; the server accepts at most {limit}").format(size=shown, limit=limit),
                       True)


def check_members(data: bytes) -> None:
    """Refuses links, devices, absolute paths and `..` outright (the intake would skip a link silently;
    an upload that holds one was not packed by our client, so it is an error the student sees)."""
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as tf:
            for member in tf:
                try:
                    safe_tar.check_member(member)  # the intake's rules (bang_emu/safe_tar.py), refused outright
                except safe_tar.UnsafePath as exc:
                    raise UploadError(_("the archive has a path outside its folder: {name}")
                                      .format(name=member.name)) from exc
                except safe_tar.UnsafeMember as exc:
                    raise UploadError(_("the archive holds a link or special file: {name}")
                                      .format(name=member.name)) from exc
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise UploadError(_("not a readable .tar.gz archive: {error}").format(error=exc)) from exc


def unpack_upload(data: bytes, dest: Path, limits: IntakeLimits = UPLOAD_LIMITS) -> Path:
    """Checks and unpacks an upload into `dest` (made); returns the submission's root folder."""
    if len(data) > MAX_UPLOAD_BYTES:
        raise too_large(len(data))
    check_members(data)
    dest.mkdir(parents=True, exist_ok=True)
    archive = dest / "upload.tar.gz"
    archive.write_bytes(data)
    try:
        return unpack_archive(archive, dest / "unpacked", limits)
    except IntakeError as exc:
        raise UploadError(str(exc)) from exc
    finally:
        archive.unlink(missing_ok=True)


def inspect_upload(data: bytes) -> str:
    """Checks an upload as the server takes it in: its content hash (the batch's), or UploadError."""
    scratch = Path(tempfile.mkdtemp(prefix="upload-check-"))
    try:
        root = unpack_upload(data, scratch)
        try:
            return content_hash(root, UPLOAD_LIMITS)
        except IntakeError as exc:
            raise UploadError(str(exc)) from exc
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
