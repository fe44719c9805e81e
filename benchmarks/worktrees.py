"""A revision checked out beside this tree, for the benchmarks that measure before and after a change in one run
(grading_cpu, judging_cost, replay_cost, server_poll_cost, server_scan_cost, verdict_compare)."""

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


def measured_sides(before: str | None, script: Path, measure_args: list[str], rounds: int, prefix: str,
                   timeout: float = 3600) -> dict[str, list[dict]]:
    """`script --measure *measure_args` run `rounds` times in each tree, interleaved: this tree ("after") and,
    with `before`, that revision in a temporary worktree ("before", `script` copied into it: this file, on its
    code). Each run is a child process whose PYTHONPATH and working directory are its tree's, and prints its
    figures as one JSON line last; returns them per side."""
    import json
    import os
    import shutil
    import sys

    with compared_trees(before, prefix) as trees:
        if "before" in trees:
            shutil.copy(script, trees["before"] / "benchmarks" / script.name)
        rows: dict[str, list[dict]] = {name: [] for name in trees}
        for _round in range(rounds):
            for name, tree in trees.items():
                env = {**os.environ, "PYTHONPATH": f"{tree}:{tree / 'sandbox'}"}
                done = subprocess.run([sys.executable, str(tree / "benchmarks" / script.name), "--measure",
                                       *measure_args], cwd=tree, env=env, capture_output=True, text=True,
                                      timeout=timeout)
                if done.returncode != 0:
                    raise SystemExit(f"{tree}: {done.stderr[-3000:]}")
                rows[name].append(json.loads(done.stdout.strip().splitlines()[-1]))
    return rows
