"""Unpacking an archive without trusting it: the one set of rules for every tar the project unpacks (the batch
intake's student archives, the lab programs exported from a mirror by `git archive`, the calibration's lab
folder inside the sandbox image).

Standard library only, and the same on every Python the project declares (pyproject `requires-python`, from
3.11.0): `TarFile.extractall(filter="data")` only exists from 3.11.4 (Debian bookworm's python3.11 is 3.11.2,
and so is the sandbox image's), so nothing here depends on it. Every member is checked here and every file is
written here; where the standard library has `tarfile.data_filter` it is asked too, as a second opinion.

The rules (stricter than the "data" filter):
* a member's path is relative and stays inside the destination: no absolute path (nor `C:`), no `..`
  (backslashes count as separators);
* regular files and folders only: a symlink, hard link, device or fifo is refused (`UnsafeMember`), or left out
  with `unsupported="skip"`; nothing is ever created but files and folders;
* files get sane modes (0644, or 0755 when the owner could execute it; no setuid/setgid/sticky, never the
  archive's owner), and are opened without following a link;
* caps on the number of members, of files, on folder depth, on each file's bytes and on the bytes written in
  all (counted as they are written, not as the headers claim).
Folders are made as the files in them need them (an archive's empty folders are not made).
"""

from __future__ import annotations

import io
import os
import re
import tarfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import BinaryIO

# The standard library's own "data" filter (3.11.4+, 3.12+), asked as a second opinion where it exists.
_STDLIB_DATA_FILTER: Callable[[tarfile.TarInfo, str], tarfile.TarInfo | None] | None = getattr(
    tarfile, "data_filter", None)
_CHUNK = 1 << 16


class UnsafeArchive(Exception):
    """An archive this module will not unpack (the message names the member and the rule)."""


class UnsafePath(UnsafeArchive):
    """A member whose path is absolute, climbs out with `..`, or nests too deep."""


class UnsafeMember(UnsafeArchive):
    """A link, device, fifo or other member that is not a regular file or a folder."""


class TooLarge(UnsafeArchive):
    """Past one of the caps (members, files, bytes)."""


@dataclass(frozen=True)
class Limits:
    """Caps for an archive (defaults: a trusted export of a public repository's folder)."""

    max_files: int = 100_000
    max_total_bytes: int = 4 << 30
    max_file_bytes: int = 1 << 30
    max_depth: int = 64
    max_members: int = 200_000  # every header (folders, and the links and specials that are skipped)


def member_parts(name: str, max_depth: int | None = None) -> tuple[str, ...]:
    """The path components of an archive member's name, relative and clean (empty for the root itself); raises
    UnsafePath for an absolute path, a `..` or more than `max_depth` components."""
    posix = PurePosixPath(name.replace("\\", "/"))
    if posix.is_absolute() or re.match(r"^[A-Za-z]:", name):
        raise UnsafePath(f"absolute path in archive: {name!r}")
    if ".." in posix.parts:
        raise UnsafePath(f"path traversal in archive: {name!r}")
    parts = tuple(p for p in posix.parts if p not in ("", "."))
    if max_depth is not None and len(parts) > max_depth:
        raise UnsafePath(f"archive nests deeper than {max_depth} folders: {name!r}")
    return parts


def member_kind(member: tarfile.TarInfo) -> str:
    """"file", "dir", or what else it is ("symlink", "hardlink", "device", "fifo", "other")."""
    if member.isfile():
        return "file"
    if member.isdir():
        return "dir"
    if member.issym():
        return "symlink"
    if member.islnk():
        return "hardlink"
    if member.ischr() or member.isblk():
        return "device"
    if member.isfifo():
        return "fifo"
    return "other"


def check_member(member: tarfile.TarInfo, max_depth: int | None = None) -> tuple[str, ...]:
    """The member's path components when it may be unpacked; UnsafePath or UnsafeMember when not."""
    parts = member_parts(member.name, max_depth)
    kind = member_kind(member)
    if kind not in ("file", "dir"):
        target = f" -> {member.linkname!r}" if member.issym() or member.islnk() else ""
        raise UnsafeMember(f"{kind} in archive (only regular files and folders are unpacked): {member.name!r}{target}")
    return parts


class Budget:
    """Counts files and bytes against Limits while files are written (one per archive or folder copied)."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.files = 0
        self.bytes = 0

    def add_file(self, name: str) -> None:
        self.files += 1
        if self.files > self.limits.max_files:
            raise TooLarge(f"more than {self.limits.max_files} files")

    def copy(self, src: BinaryIO, dst: Path, name: str, mode: int = 0o644) -> None:
        """Writes `src` to the new file `dst` (a link there is not followed), stopping at the caps."""
        written = 0
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0)
        with os.fdopen(os.open(dst, flags, mode), "wb") as out:
            while chunk := src.read(_CHUNK):
                written += len(chunk)
                self.bytes += len(chunk)
                if written > self.limits.max_file_bytes:
                    raise TooLarge(f"{name!r} unpacks to more than {self.limits.max_file_bytes} bytes")
                if self.bytes > self.limits.max_total_bytes:
                    raise TooLarge(f"archive unpacks to more than {self.limits.max_total_bytes} bytes")
                out.write(chunk)
        os.chmod(dst, mode)  # whatever the umask or a file already there


def file_mode(member: tarfile.TarInfo) -> int:
    """0755 when the archive lets its owner execute the file, else 0644."""
    return 0o755 if member.mode & 0o100 else 0o644


def _second_opinion(member: tarfile.TarInfo, dest: Path) -> None:
    if _STDLIB_DATA_FILTER is None:
        return
    try:
        _STDLIB_DATA_FILTER(member, str(dest))
    except tarfile.TarError as exc:  # tarfile.FilterError and its kinds
        raise UnsafeArchive(f"refused by tarfile's data filter: {member.name!r}: {exc}") from exc


def extract_tar(source: str | os.PathLike[str] | bytes, dest: Path, limits: Limits = Limits(), *,
                unsupported: str = "refuse", skip: Callable[[tuple[str, ...]], bool] | None = None) -> Path:
    """Unpacks the tar archive `source` (a path, or the archive's bytes; any compression tarfile reads) into
    `dest` (made if missing) under the rules above and returns `dest`. `unsupported`: "refuse" (raise
    UnsafeMember) or "skip" (leave links, devices and fifos out); `skip(parts)` True leaves a member out too.
    Raises UnsafeArchive (UnsafePath, UnsafeMember, TooLarge); a broken archive raises tarfile.TarError."""
    if unsupported not in ("refuse", "skip"):
        raise ValueError(f"unsupported={unsupported!r}: 'refuse' or 'skip'")
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    root = dest.resolve()
    budget = Budget(limits)
    opened = tarfile.open(fileobj=io.BytesIO(source)) if isinstance(source, bytes) else tarfile.open(source)
    with opened as tar:
        for count, member in enumerate(tar, 1):
            if count > limits.max_members:
                raise TooLarge(f"more than {limits.max_members} members in archive")
            parts = member_parts(member.name, limits.max_depth)
            if not parts or (skip is not None and skip(parts)):
                continue
            try:
                check_member(member)
            except UnsafeMember:
                if unsupported == "skip":
                    continue
                raise
            target = root.joinpath(*parts)
            if not target.resolve().is_relative_to(root):  # a link already in `dest` on the way
                raise UnsafePath(f"path leads outside the destination: {member.name!r}")
            _second_opinion(member, root)
            if member.isdir():
                continue  # made when a file needs it
            target.parent.mkdir(parents=True, exist_ok=True)
            budget.add_file(member.name)
            src = tar.extractfile(member)
            if src is None:
                continue
            with src:
                budget.copy(src, target, member.name, file_mode(member))
            try:
                os.utime(target, (member.mtime, member.mtime), follow_symlinks=False)
            except (OSError, OverflowError, ValueError):
                pass  # a time the file system cannot hold: the file is what matters
    return dest
