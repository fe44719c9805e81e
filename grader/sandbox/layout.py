"""The sandbox-side layout every isolating runner reproduces: who runs, which env, which host folders
are writable, and what a run may add to them."""

from __future__ import annotations

import os
from pathlib import Path

from grader.sandbox.base import SANDBOX_BUILD, SANDBOX_IO, SANDBOX_SUBMISSION, Limits, Mounts, Phase

SANDBOX_UID = 10001  # same uid:gid as the user baked into the emulation image (sandbox/images/emu/base.toml)
SANDBOX_GID = 10001
# Entries a run may add to its writable mounts (the byte budget is Limits.tmpfs_bytes).
MAX_NEW_ENTRIES = 20_000


def sandbox_user() -> tuple[int, int]:
    """The dedicated uid when the grader is root; otherwise the invoking (already unprivileged) user."""
    if os.geteuid() == 0:
        return SANDBOX_UID, SANDBOX_GID
    return os.getuid(), os.getgid()


def sandbox_env(phase: Phase, extra: dict[str, str] | None = None) -> dict[str, str]:
    """Nothing from the host's environment leaks in: only these plus what the caller passes explicitly."""
    env = {
        "HOME": "/tmp",
        "TMPDIR": "/tmp",
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        # No cwd (/tmp, writable by student code) on sys.path: a module planted there must never be what a
        # later import of the harness's long-lived processes finds (bang_harness.session).
        "PYTHONSAFEPATH": "1",
        "PYTHONUNBUFFERED": "1",
        "MALLOC_ARENA_MAX": "2",  # keeps glibc from reserving 64 MiB of address space per thread
        "BANG_GRADER_PHASE": str(phase),
        "BANG_GRADER_SUBMISSION": SANDBOX_SUBMISSION,
        "BANG_GRADER_BUILD": SANDBOX_BUILD,
        "BANG_GRADER_IO": SANDBOX_IO,
    }
    env.update(extra or {})
    return env


def writable_dirs(phase: Phase, mounts: Mounts) -> list[Path]:
    return [mounts.io, mounts.build] if phase is Phase.BUILD else [mounts.io]


def check_mounts(mounts: Mounts) -> None:
    for name in ("submission", "build", "io"):
        path = getattr(mounts, name)
        if not Path(path).is_absolute() or not Path(path).is_dir() or Path(path).is_symlink():
            raise ValueError(f"mount {name}={path} must be an existing absolute folder, not a symlink")


def prepare_writable(phase: Phase, mounts: Mounts, uid: int, gid: int) -> None:
    """Lets the sandbox user write the top of each writable mount (and /io/outputs), nothing the host put
    inside: the host's inputs stay owned by the host user and read-only to the sandbox."""
    targets = writable_dirs(phase, mounts)
    outputs = mounts.io / "outputs"
    if outputs.is_dir() and not outputs.is_symlink():
        targets.append(outputs)
    for path in targets:
        give_to_sandbox(path, uid, gid)


def give_to_sandbox(path: Path, uid: int, gid: int) -> None:
    """One folder the host made (a round's outputs/, say) becomes the sandbox user's to write."""
    if os.geteuid() == 0:
        os.chown(path, uid, gid, follow_symlinks=False)
        os.chmod(path, 0o755)
    # else: the sandbox runs as the invoking user, who already owns these folders.


def limits_summary(limits: Limits) -> str:
    return (f"wall {limits.wall_seconds:g}s, memory {limits.memory_bytes >> 20} MiB, pids {limits.pids}, "
            f"cpus {limits.cpus:g}, file size {limits.file_size_bytes >> 20} MiB, nofile {limits.open_files}")
