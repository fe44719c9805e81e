"""A revision checked out beside this tree, for the benchmarks that measure before and after a change in one run
(grading_cpu, judging_cost, replay_cost, server_poll_cost, verdict_compare)."""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


@contextmanager
def worktree(rev: str, path: Path) -> Iterator[Path]:
    """`rev` checked out (detached) at `path`, a git worktree of this repository, removed afterwards."""
    subprocess.run(["git", "worktree", "add", "--detach", str(path), rev], cwd=REPO, check=True, capture_output=True)
    try:
        yield path
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(path)], cwd=REPO, capture_output=True)


@contextmanager
def compared_trees(rev: str | None, prefix: str) -> Iterator[dict[str, Path]]:
    """{"before": `rev` in a temporary worktree, "after": this tree}; {"after": this tree} alone without `rev`."""
    if rev is None:
        yield {"after": REPO}
        return
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp, worktree(rev, Path(tmp) / "tree") as before:
        yield {"before": before, "after": REPO}
