"""A submission's files as the report sees them: paths as the student knows them (not the sandbox's), and a
file's lines read as text only, size-capped and only inside the submission folder (a student's symlink must not
make the report show a grader file). Shared by the compiler output view and the source excerpts."""

from __future__ import annotations

from pathlib import Path

# Paths as the sandbox saw them; the student knows their files relative to the submission root.
_SANDBOX_PREFIXES = ("/submission/", "/build/src/", "/build/")
_MAX_FILE_BYTES = 1 << 20


def submission_relative(path: str, root: str | None = None) -> str:
    """A path as the student knows it: /submission/mlu/k.mlu, or <root>/mlu/k.mlu when the submission ran
    unsandboxed from its own folder, -> mlu/k.mlu."""
    if root:
        prefix = root.rstrip("/") + "/"
        if path.startswith(prefix):
            return path[len(prefix) :]
    for prefix in _SANDBOX_PREFIXES:
        if path.startswith(prefix):
            return path[len(prefix) :]
    return path.removeprefix("./")


def read_submission_file(root: Path, relative: str) -> list[str] | None:
    """The file's lines, or None when it is missing, too large or not inside root."""
    try:
        base = root.resolve(strict=True)
        path = (base / relative).resolve(strict=True)
        path.relative_to(base)
        if not path.is_file() or path.stat().st_size > _MAX_FILE_BYTES:
            return None
        return path.read_text(encoding="utf-8", errors="replace").splitlines()
    except (OSError, ValueError):
        return None
