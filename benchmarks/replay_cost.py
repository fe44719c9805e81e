"""What the trusted replay (issue 26) costs: warm `grade submit` and a small `grade batch`, before and after,
interleaved in one run (the machines are noisy: only the ratios mean much).

    .venv/bin/python benchmarks/replay_cost.py [--before REV] [--rounds 3] [--students 6]

"before" is REV (default: the last commit without bang_harness/replay.py) checked out into a temporary git
worktree and run with its own sources (PYTHONPATH), "after" this tree; both use the docker sandbox, each with its
own image (built first if missing, outside the timing) and its own warm build cache. Prints one line per run and
the medians with their ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.worktrees import worktree  # noqa: E402


def before_revision() -> str:
    out = subprocess.run(["git", "log", "--format=%H", "--diff-filter=A", "--", "sandbox/bang_harness/replay.py"],
                         capture_output=True, text=True, cwd=REPO, check=True).stdout.split()
    return f"{out[-1]}^" if out else "HEAD"


def grader(tree: Path, args: list[str], cache: Path) -> tuple[float, dict | None, str]:
    env = {**os.environ, "PYTHONPATH": f"{tree}:{tree / 'sandbox'}", "XDG_CACHE_HOME": str(cache)}
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "grader.cli", *args], capture_output=True, text=True, cwd=tree,
                          env=env, timeout=3600)
    wall = time.monotonic() - started
    try:
        return wall, json.loads(proc.stdout), proc.stderr
    except json.JSONDecodeError:
        return wall, None, proc.stderr[-2000:]


def class_folder(root: Path, students: int) -> Path:
    folder = root / "class"
    for i in range(students):
        shutil.copytree(REPO / "reference_kernels" / "sigmoid" / ("vector" if i % 2 else "pipeline"),
                        folder / f"s{i:02d}")
    return folder


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", default=None, help="revision to compare with (default: before the replay)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--students", type=int, default=6)
    parser.add_argument("--submission", type=Path, default=REPO / "reference_kernels" / "sigmoid" / "vector")
    args = parser.parse_args(argv)
    rev = args.before or before_revision()
    with tempfile.TemporaryDirectory(prefix="bench-replay-") as tmp:
        root = Path(tmp)
        before = root / "before"
        with worktree(rev, before):
            trees = {"before": before, "after": REPO}
            caches = {name: root / f"cache-{name}" for name in trees}
            submission = args.submission.resolve()
            for name, tree in trees.items():  # images and builds first, outside the timing
                wall, data, err = grader(tree, ["submit", str(submission), "--out", str(root / f"warm-{name}"),
                                                "--json", "--sandbox", "docker"], caches[name])
                if data is None:
                    raise SystemExit(f"{name}: grade submit failed:\n{err}")
                print(f"{name}: warm-up {wall:.1f} s, {data['verdict']} {data['score']}", flush=True)
            classes = class_folder(root, args.students)
            times: dict[str, dict[str, list[float]]] = {n: {"submit": [], "batch": []} for n in trees}
            for i in range(args.rounds):
                for name, tree in trees.items():
                    wall, data, err = grader(tree, ["submit", str(submission), "--out", str(root / f"s-{name}-{i}"),
                                                    "--json", "--sandbox", "docker", "--no-setup"], caches[name])
                    times[name]["submit"].append(wall)
                    print(f"round {i} {name:6s} submit {wall:6.1f} s  {data['verdict'] if data else err[-200:]}",
                          flush=True)
                for name, tree in trees.items():
                    out = root / f"b-{name}-{i}"
                    started = time.monotonic()
                    grader(tree, ["batch", str(classes), "-a", "sigmoid", "--out", str(out), "--no-progress",
                                  "--no-similarity", "--seed", "bench"], caches[name])
                    wall = time.monotonic() - started
                    times[name]["batch"].append(wall)
                    print(f"round {i} {name:6s} batch of {args.students} {wall:6.1f} s "
                          f"({60 * args.students / wall:.1f}/min)", flush=True)
            print(f"\nbefore = {rev}, load average {os.getloadavg()[0]:.1f}")
            for what in ("submit", "batch"):
                b, a = statistics.median(times["before"][what]), statistics.median(times["after"][what])
                print(f"{what:7s} before {b:6.1f} s  after {a:6.1f} s  ratio {a / b:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
