"""CPU seconds and wall time of `grade submit`, before and after a change, interleaved in one run (issue 41).

    .venv/bin/python benchmarks/grading_cpu.py --before REV [--submission reference_kernels/example]
        [--rounds 3] [--cold 1]

REV is checked out into a temporary git worktree and run with its own sources and its own image (built first if
missing, outside the timing), "after" is this tree; each keeps its own build cache. Every submit's containers go
under a cgroup of their own (BANG_GRADER_DOCKER_CGROUP_PARENT: REV must have it, 35ef04e on), so their CPU
seconds are the grading's alone even with other work on the machine, which only inflates the wall times (the load
average is printed). `--cold N` first grades N times with an empty build cache each (the build included).
`--batch N` instead runs `grade batch` on N distinct sigmoid students (batch_throughput.py's class: every kernel
differs by a comment), cold (empty build cache) then warm (the same cache, a fresh batch folder), per tree:
submissions per minute and CPU seconds per graded submission. `--warm-runs K` runs K warm batches per tree after
both cold ones, interleaved in alternating order (the VM drifts within minutes), and reports their medians.
`--after-env KEY=VALUE` (repeatable) runs "after" with that environment, `--before-env` "before"; with `--before HEAD`
the two sides are one tree with and without it (e.g. BANG_GRADER_SLOTS=1: the run sandboxes in slot containers).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.cpu_ledger import cgroup_cpu_seconds, remove_cgroup  # noqa: E402
from benchmarks.worktrees import worktree  # noqa: E402
from grader.sandbox.docker_settings import CGROUP_PARENT_ENV  # noqa: E402


def children_cpu() -> tuple[float, float]:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime, usage.ru_stime


EXTRA_ENV: dict[str, dict[str, str]] = {"before": {}, "after": {}}  # --before-env, --after-env


def _side(tree: Path) -> str:
    return "after" if tree == REPO else "before"


def submit(tree: Path, submission: Path, out: Path, cache: Path, setup: bool = False) -> dict:
    parent = f"/bang-bench-submit-{uuid.uuid4().hex[:8]}"
    # The public cases' arrays (spec/array_cache.py) kept beside the build cache, as warm or cold as it is
    env = {**os.environ, **EXTRA_ENV[_side(tree)], "PYTHONPATH": f"{tree}:{tree / 'sandbox'}", "BANG_GRADER_BUILD_CACHE": str(cache),
           "BANG_GRADER_ARRAY_CACHE": f"{cache}-arrays", CGROUP_PARENT_ENV: parent}
    argv = [sys.executable, "-m", "grader.cli", "submit", str(submission), "--out", str(out), "--json",
            "--sandbox", "docker", *([] if setup else ["--no-setup"])]
    load, (user, system), started = os.getloadavg()[0], children_cpu(), time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=tree, env=env, timeout=3600)
    wall = time.monotonic() - started
    user, system = (after - before for after, before in zip(children_cpu(), (user, system), strict=True))
    host = user + system
    containers = cgroup_cpu_seconds(parent) or 0.0
    remove_cgroup(parent)
    try:
        data = json.loads(proc.stdout)
    except json.JSONDecodeError:
        raise SystemExit(f"{tree}: grade submit failed ({proc.returncode}):\n{proc.stderr[-3000:]}") from None
    return {"wall_s": wall, "containers_cpu_s": containers, "host_cpu_s": host, "cpu_s": containers + host,
            "host_user_s": user, "host_sys_s": system, "load": load, "verdict": data["verdict"],
            "score": data["score"]}


def batch(tree: Path, students: Path, out: Path, cache: Path, graded: int) -> dict:
    parent = f"/bang-bench-batch-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, **EXTRA_ENV[_side(tree)], "PYTHONPATH": f"{tree}:{tree / 'sandbox'}", "BANG_GRADER_BUILD_CACHE": str(cache),
           "BANG_GRADER_ARRAY_CACHE": f"{cache}-arrays", CGROUP_PARENT_ENV: parent}
    argv = [sys.executable, "-m", "grader.cli", "batch", str(students), "-a", "sigmoid", "--out", str(out),
            "--no-progress", "--no-similarity", "--seed", "bench", "--sandbox", "docker"]
    load, host, started = os.getloadavg()[0], sum(children_cpu()), time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=tree, env=env, timeout=7200)
    wall, host = time.monotonic() - started, sum(children_cpu()) - host
    containers = cgroup_cpu_seconds(parent) or 0.0
    remove_cgroup(parent)
    results = list((out / "results").glob("*.json"))
    if proc.returncode not in (0, 1) or len(results) != graded:
        raise SystemExit(f"{tree}: grade batch failed ({proc.returncode}, {len(results)} results):\n"
                         f"{proc.stderr[-3000:]}")
    verdicts: dict[str, int] = {}
    for result in results:
        verdict = json.loads(result.read_text())["verdict"]
        verdicts[verdict] = verdicts.get(verdict, 0) + 1
    return {"wall_s": wall, "containers_cpu_s": containers, "host_cpu_s": host, "cpu_s": containers + host,
            "load": load, "per_minute": 60 * graded / wall, "cpu_s_per_submission": (containers + host) / graded,
            "verdict": json.dumps(verdicts, sort_keys=True), "score": ""}


def run_batches(trees: dict[str, Path], root: Path, students: int, warm_runs: int = 1) -> dict[str, dict[str, dict]]:
    """Each tree's cold batch, then `warm_runs` warm batches of each, interleaved and in alternating order
    (before, after; after, before; ...) so that the machine's drift between runs does not fall on one side; the
    warm figures are their medians."""
    from benchmarks.batch_throughput import generate_distinct_class

    folder = root / "class"
    generate_distinct_class(folder, "sigmoid", students)
    rows: dict[str, dict[str, dict]] = {name: {} for name in trees}
    warm: dict[str, list[dict]] = {name: [] for name in trees}

    def one(name: str, kind: str, run: int = 0) -> dict:
        row = batch(trees[name], folder, root / f"batch-{name}-{kind}{run}", root / f"batch-cache-{name}", students)
        print(line(name, f"batch {kind}", row) + f"   {row['per_minute']:.1f}/min, "
              f"{row['cpu_s_per_submission']:.2f} CPU-s/submission", flush=True)
        return row

    for name in trees:
        rows[name]["cold"] = one(name, "cold")
    for run in range(warm_runs):
        for name in (list(trees) if run % 2 == 0 else list(reversed(trees))):
            warm[name].append(one(name, "warm", run))
    for name, runs in warm.items():
        rows[name]["warm"] = {what: statistics.median(r[what] for r in runs)
                              for what in ("per_minute", "cpu_s_per_submission", "wall_s")}
    for kind in ("cold", "warm"):
        for what in ("per_minute", "cpu_s_per_submission", "wall_s"):
            b, a = rows["before"][kind][what], rows["after"][kind][what]
            print(f"  batch {kind:<5}{what:<22} before {b:7.2f}  after {a:7.2f}  ratio {a / b:.2f}x")
    return rows


def line(name: str, label: str, row: dict) -> str:
    return (f"{label:<8} {name:<6} wall {row['wall_s']:6.1f} s   CPU {row['cpu_s']:6.2f} s (containers "
            f"{row['containers_cpu_s']:5.2f} + host {row['host_cpu_s']:4.2f})   load {row['load']:.1f}   "
            f"{row['verdict']} {row['score']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", required=True)
    parser.add_argument("--submission", type=Path, default=REPO / "reference_kernels" / "example")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cold", type=int, default=1)
    parser.add_argument("--batch", type=int, default=0, metavar="N", help="instead: a batch of N distinct students")
    parser.add_argument("--warm-runs", type=int, default=1, help="with --batch: warm batches per tree, interleaved")
    parser.add_argument("--before-env", action="append", default=[], metavar="KEY=VALUE",
                        help="an environment variable for the before side (repeatable)")
    parser.add_argument("--after-env", action="append", default=[], metavar="KEY=VALUE",
                        help="the after side's extra environment (repeatable)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    EXTRA_ENV["after"].update(item.split("=", 1) for item in args.after_env)
    EXTRA_ENV["before"].update(item.split("=", 1) for item in args.before_env)
    submission = args.submission.resolve()
    with tempfile.TemporaryDirectory(prefix="bench-cpu-") as tmp:
        root = Path(tmp)
        before = root / "before"
        with worktree(args.before, before):
            trees = {"before": before, "after": REPO}
            if args.batch:
                for name, tree in trees.items():  # the images first (setup), outside the timing
                    submit(tree, submission, root / f"setup-{name}", root / f"setup-cache-{name}", setup=True)
                batches = run_batches(trees, root, args.batch, args.warm_runs)
                if args.json:
                    args.json.write_text(json.dumps({"before": args.before, "batch": batches}, indent=1))
                return 0
            rows: dict[str, dict[str, list[dict]]] = {n: {"cold": [], "warm": []} for n in trees}
            for name, tree in trees.items():  # the images first (setup), outside the timing
                submit(tree, submission, root / f"setup-{name}", root / f"setup-cache-{name}", setup=True)
            for i in range(args.cold):
                for name, tree in trees.items():
                    row = submit(tree, submission, root / f"cold-{name}-{i}", root / f"cold-cache-{name}-{i}")
                    rows[name]["cold"].append(row)
                    print(line(name, f"cold {i}", row), flush=True)
            for name, tree in trees.items():  # the warm caches' builds, outside the timing
                submit(tree, submission, root / f"warmup-{name}", root / f"cache-{name}")
            for i in range(args.rounds):
                for name, tree in trees.items():
                    row = submit(tree, submission, root / f"warm-{name}-{i}", root / f"cache-{name}")
                    rows[name]["warm"].append(row)
                    print(line(name, f"warm {i}", row), flush=True)
    print(f"\n{submission.name}: before = {args.before}, after = this tree; medians")
    summary = {}
    for kind in ("cold", "warm"):
        for what in ("wall_s", "cpu_s", "containers_cpu_s", "host_cpu_s", "host_user_s", "host_sys_s"):
            if not rows["before"][kind] or what not in rows["before"][kind][0]:
                continue
            b = statistics.median(r[what] for r in rows["before"][kind])
            a = statistics.median(r[what] for r in rows["after"][kind])
            summary[f"{kind}_{what}"] = {"before": round(b, 2), "after": round(a, 2), "ratio": round(a / b, 2) if b else None}
            print(f"  {kind:<5}{what:<18} before {b:7.2f}  after {a:7.2f}  ratio {a / b if b else float('nan'):.2f}x")
    if args.json:
        args.json.write_text(json.dumps({"before": args.before, "summary": summary, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
