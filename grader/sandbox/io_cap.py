"""A size-capped filesystem under the writable /io folder of a run, so a fill cannot outrun the disk poll.

The runners poll the writable bind mounts every 0.2 s (grader.sandbox.watch.DiskWatch); `fallocate` (or a
burst of sparse-free writes) takes gigabytes of the host disk between two polls. When the grader runs as root
on Linux and the sandbox sees the host's mounts (bwrap; a local Docker daemon in our mount namespace), the
host folder itself becomes a tmpfs with `size=` for the duration of the run: the kernel refuses the write
with ENOSPC at the cap, whatever the speed. What the host put there (job.json, inputs, the key, a replay's
journals) is copied in first with its owners and modes, and comes back afterwards as the host put it (its own
files, kept aside on disk: never copied back, whatever the run did to their copies); what the run added is
copied back to disk -- regular files, folders and symlinks (kept as symlinks, which the host's readers refuse),
no more bytes than the cap, never following a link -- and the tmpfs is unmounted. Otherwise (not root, no `mount`, a remote daemon)
nothing changes and the poll is the only guard; `capped_io` says which in its note.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from grader.sandbox.lifeline import watch_this_process
from grader.sandbox.watch import tree_usage

COPY_CHUNK = 1 << 20
MAX_COPY_ENTRIES = 50_000
NOTE_CAPPED = "io_capped"


def can_cap() -> bool:
    return sys.platform.startswith("linux") and os.geteuid() == 0 and shutil.which("mount") is not None \
        and shutil.which("umount") is not None


def same_mount_namespace_as(pid_file: Path = Path("/var/run/docker.pid")) -> bool:
    """True when the process in `pid_file` (the local Docker daemon) sees the mounts we make."""
    try:
        pid = int(pid_file.read_text().strip())
        return os.readlink(f"/proc/{pid}/ns/mnt") == os.readlink("/proc/self/ns/mnt")
    except (OSError, ValueError):
        return False


def _move_entries(source: Path, dest: Path) -> None:
    for entry in os.listdir(source):
        os.rename(source / entry, dest / entry)


def _copy_tree(source: Path, dest: Path, budget: int, staged: Path | None = None) -> list[str]:
    """Copies `source` into the existing `dest`: regular files (at most `budget` bytes in all), folders,
    symlinks as symlinks; owners and modes kept; nothing followed. A path the host staged (it is in `staged`, the
    same tree as the host put it) is left out unless it is a folder in both: the host keeps its own. Returns what
    was left out."""
    skipped: list[str] = []
    entries = 0
    stack = [(source, dest, staged)]
    while stack:
        src_dir, dst_dir, staged_dir = stack.pop()
        try:
            names = sorted(os.listdir(src_dir))
        except OSError:
            continue
        for name in names:
            entries += 1
            if entries > MAX_COPY_ENTRIES:
                skipped.append(f"{src_dir}/...: more than {MAX_COPY_ENTRIES} entries")
                return skipped
            src, dst = src_dir / name, dst_dir / name
            try:
                info = os.lstat(src)
                host = _lstat_or_none(staged_dir / name) if staged_dir is not None else None
                if host is not None and not (stat.S_ISDIR(host.st_mode) and stat.S_ISDIR(info.st_mode)):
                    continue  # the host's own file: it comes back from where the host staged it
                if stat.S_ISLNK(info.st_mode):
                    os.symlink(os.readlink(src), dst)
                elif stat.S_ISDIR(info.st_mode):
                    os.mkdir(dst, 0o700)
                    stack.append((src, dst, staged_dir / name if host is not None else None))
                elif stat.S_ISREG(info.st_mode):
                    if info.st_size > budget:
                        skipped.append(f"{name}: {info.st_size} bytes over the copy budget")
                        continue
                    budget -= _copy_file(src, dst, info.st_size)
                else:
                    skipped.append(f"{name}: not a regular file")
                    continue
                os.chown(dst, info.st_uid, info.st_gid, follow_symlinks=False)
                if not stat.S_ISLNK(info.st_mode):
                    os.chmod(dst, stat.S_IMODE(info.st_mode))
            except OSError as exc:
                skipped.append(f"{name}: {exc.strerror}")
    return skipped


def _lstat_or_none(path: Path) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except OSError:
        return None


def _merge_moved(source: Path, dest: Path) -> None:
    """Moves `source`'s entries into `dest`, merging folders both have (the host's staged tree and what the run
    added beside it; _copy_tree never brings back a path the host staged, so nothing else meets)."""
    for entry in os.listdir(source):
        target = dest / entry
        if os.path.isdir(target) and not os.path.islink(target) and os.path.isdir(source / entry):
            _merge_moved(source / entry, target)
            os.rmdir(source / entry)
        else:
            os.rename(source / entry, target)


def _copy_file(src: Path, dst: Path, size: int) -> int:
    fd_in = os.open(src, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        fd_out = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            copied = 0
            while copied < size:
                chunk = os.read(fd_in, min(COPY_CHUNK, size - copied))
                if not chunk:
                    break
                os.write(fd_out, chunk)
                copied += len(chunk)
            return copied
        finally:
            os.close(fd_out)
    finally:
        os.close(fd_in)


MOUNT_SOURCE = "bang-grader-io"


def _mount_source(owner: int) -> str:
    # The owner's pid in the source name: a grader killed inside capped_io (no `finally`) leaves its tmpfs
    # mounted, memory and all, and its reaper finds it by this name (release_mounts_of).
    return f"{MOUNT_SOURCE}-{owner}"


def _unescape_mountinfo(field: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)  # \040 is a space


def mounts_of(owner: int, mountinfo: Path = Path("/proc/self/mountinfo")) -> list[Path]:
    """The io tmpfs mounts grader process `owner` made in this mount namespace."""
    found = []
    try:
        lines = mountinfo.read_text(errors="surrogateescape").splitlines()
    except OSError:
        return []
    for line in lines:
        before, _, after = line.partition(" - ")
        fields, tail = before.split(), after.split()
        if len(fields) > 4 and len(tail) > 1 and tail[0] == "tmpfs" and tail[1] == _mount_source(owner):
            found.append(Path(_unescape_mountinfo(fields[4])))
    return found


def release_mounts_of(owner: int) -> list[Path]:
    """Unmounts what a dead grader process `owner` left mounted (grader.sandbox.reaper); returns the paths."""
    released = []
    for path in reversed(mounts_of(owner)):  # the newest first: a mount may stack on an older one
        if _umount(path):
            released.append(path)
    return released


def _umount(path: Path) -> bool:
    for argv in (["umount", str(path)], ["umount", "-l", str(path)]):
        if subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0:
            return True
    return False


@contextmanager
def capped_io(io: Path, cap_bytes: int, enabled: bool = True) -> Iterator[str]:
    """Runs the body with `io` on a tmpfs of the host's content plus `cap_bytes`; yields a note for the
    outcome ("io_capped: ..." or why the poll alone guards it)."""
    io = Path(io)
    if not enabled:
        yield "io not capped (the sandbox would not see a host mount): the 0.2 s disk poll guards it"
        return
    if not can_cap():
        yield "io not capped (needs root and mount): the 0.2 s disk poll guards it"
        return
    # Exactly the disk poll's budget (what is there + cap_bytes, counted the same way): the kernel refuses
    # the write before the poll would kill the run, so the student sees ENOSPC, not a kill.
    size = max(tree_usage([io], 1 << 62, 1 << 62)[0] + int(cap_bytes), 1 << 20)
    info = os.lstat(io)
    watch_this_process()  # before the mount: a SIGKILL from here on still gets the tmpfs unmounted
    stash = io.with_name(f".{io.name}.host-{uuid.uuid4().hex[:8]}")
    stash.mkdir(mode=0o700)
    _move_entries(io, stash)
    options = f"size={size},mode={stat.S_IMODE(info.st_mode):o},uid={info.st_uid},gid={info.st_gid},nosuid,nodev,noexec"
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", options, _mount_source(os.getpid()), str(io)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if mounted.returncode != 0:
        _move_entries(stash, io)
        stash.rmdir()
        yield f"io not capped (mount failed: {mounted.stderr.strip()[:200]}): the 0.2 s disk poll guards it"
        return
    try:
        _copy_tree(stash, io, 1 << 62)
        yield f"{NOTE_CAPPED}: /io is a tmpfs of {size} bytes"
    finally:
        back = io.with_name(f".{io.name}.out-{uuid.uuid4().hex[:8]}")
        back.mkdir(mode=0o700)
        try:
            _copy_tree(io, back, size, staged=stash)
        finally:
            _umount(io)
            _move_entries(stash, io)
            stash.rmdir()
            _merge_moved(back, io)
            back.rmdir()
