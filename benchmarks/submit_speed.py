"""`grade submit` of a submission (default: the bundled example), as the README runs it, before and after
the precompiled torch headers and the default build cache, side by side in one run.

    .venv/bin/python benchmarks/submit_speed.py [--submission reference_kernels/example] [--sandbox docker]

Runs (image already built, so "cold" is a cold build, not an image build):
  before       BANG_GRADER_NO_PCH=1 --no-build-cache: how every `grade submit` ran before (always a full build)
  after cold   the precompiled headers, an empty build cache
  after warm   the same cache again: the build is reused
Prints wall seconds (process start to exit) and the ratios; the machine's load average is printed too, since
the build's wall time is mostly g++ and shares the CPU with whatever else runs.

    .venv/bin/python benchmarks/submit_speed.py --submission reference_kernels/sigmoid/vector --compare-rounds 3
compares warm submits (build cached) with one run-phase sandbox per round (BANG_GRADER_SANDBOX_PER_ROUND=1,
as before issue 14) and one sandbox for all of a submission's rounds, interleaved; `--compare-parking N` warm
submits that start their own sandboxes (BANG_GRADER_PARK_SECONDS=0) and submits that adopt the slots the previous
one parked (issue 41, stop 57), interleaved.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def submit(submission: Path, out: Path, sandbox: str, extra: list[str], env: dict[str, str]) -> tuple[float, dict]:
    argv = [sys.executable, "-m", "grader.cli", "submit", str(submission), "--out", str(out), "--json",
            "--sandbox", sandbox, "--no-setup", *extra]
    started = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, env=env, timeout=3600)
    wall = time.monotonic() - started
    try:
        data = json.loads(proc.stdout)
    except json.JSONDecodeError:
        raise SystemExit(f"grade submit failed ({proc.returncode}):\n{proc.stderr[-3000:]}") from None
    return wall, data


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--submission", type=Path, default=REPO / "reference_kernels" / "example")
    parser.add_argument("--sandbox", default="docker")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--compare-rounds", type=int, default=0, metavar="N",
                        help="instead: N warm submits each with one run-phase sandbox per round (before issue 14) "
                             "and one per submission (after), interleaved")
    parser.add_argument("--compare-parking", type=int, default=0, metavar="N",
                        help="instead: N warm submits each starting its own sandboxes (BANG_GRADER_PARK_SECONDS=0) "
                             "and adopting the previous submit's parked slots, interleaved")
    args = parser.parse_args(argv)
    if args.compare_rounds:
        return compare_rounds(args)
    if args.compare_parking:
        return compare_parking(args)
    base_env = {k: v for k, v in os.environ.items() if k != "BANG_GRADER_NO_PCH"}
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-submit-") as tmp:
        cache = Path(tmp) / "cache"
        runs = [
            ("before (no PCH, no cache)", ["--no-build-cache"], {**base_env, "BANG_GRADER_NO_PCH": "1"}),
            ("after, cold build", ["--build-cache", str(cache)], base_env),
            ("after, warm (cached build)", ["--build-cache", str(cache)], base_env),
        ]
        for i, (label, extra, env) in enumerate(runs):
            load = os.getloadavg()[0]
            wall, data = submit(args.submission, Path(tmp) / f"out{i}", args.sandbox, extra, env)
            build = data.get("build") or {}
            row = {"run": label, "wall_s": round(wall, 1), "build_s": round(float(build.get("duration_seconds") or 0), 1),
                   "build_cached": bool(build.get("cached")), "verdict": data["verdict"],
                   "score": f"{data['score']:g}/{data['max_score']:g}", "load_before": round(load, 1)}
            rows.append(row)
            print(f"  {label:<28} {wall:6.1f} s  (build {row['build_s']} s{' cached' if row['build_cached'] else ''}, "
                  f"{row['verdict']} {row['score']}, load {load:.1f})", flush=True)
    before = rows[0]["wall_s"]
    print(f"\n`grade submit {args.submission.relative_to(REPO) if args.submission.is_relative_to(REPO) else args.submission}`"
          f", {args.sandbox} sandbox, image built:")
    print(f"{'run':<30} {'wall s':>8} {'build s':>8} {'vs before':>10}")
    for row in rows:
        print(f"{row['run']:<30} {row['wall_s']:>8.1f} {row['build_s']:>8.1f} {before / row['wall_s']:>9.2f}x")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


def compare_rounds(args: argparse.Namespace) -> int:
    """Warm `grade submit` (build cached) with the run phase's rounds in a sandbox each vs in one sandbox."""
    from grader.orchestration.execute import PER_ROUND_ENV

    base_env = {k: v for k, v in os.environ.items() if k not in ("BANG_GRADER_NO_PCH", PER_ROUND_ENV)}
    modes = {"before: a sandbox per round": {**base_env, PER_ROUND_ENV: "1"},
             "after: one sandbox per submission": base_env}
    return _interleaved(args, modes, args.compare_rounds, base_env)


def compare_parking(args: argparse.Namespace) -> int:
    """Warm `grade submit` (build cached) starting its own sandboxes (parking off) vs adopting the slots the previous
    submit parked (issue 41, stop 57). Interleaved: a submit with parking off neither adopts nor parks, so each
    parking one adopts what the one before it of its kind left."""
    from grader.sandbox.slot_runner import PARK_ENV

    base_env = {k: v for k, v in os.environ.items() if k not in ("BANG_GRADER_NO_PCH", PARK_ENV)}
    modes = {"before: its own sandboxes": {**base_env, PARK_ENV: "0"},
             "after: the last submit's, parked": {**base_env, PARK_ENV: "300"}}
    return _interleaved(args, modes, args.compare_parking, modes["after: the last submit's, parked"])


def _interleaved(args: argparse.Namespace, modes: dict[str, dict[str, str]], rounds: int,
                 warm_up: dict[str, str]) -> int:
    """`rounds` warm submits in each environment of `modes`, interleaved (load changes hit both alike), after one
    submit in `warm_up` that fills the build cache; medians and the speed-up."""
    times: dict[str, list[float]] = {label: [] for label in modes}
    with tempfile.TemporaryDirectory(prefix="bench-submit-") as tmp:
        cache = ["--build-cache", str(Path(tmp) / "cache")]
        wall, _ = submit(args.submission, Path(tmp) / "warm-up", args.sandbox, cache, warm_up)
        print(f"  {'warm-up (its build)':<36} {wall:6.1f} s", flush=True)
        for i in range(rounds):
            for label, env in modes.items():
                wall, data = submit(args.submission, Path(tmp) / f"out{i}-{len(times[label])}", args.sandbox, cache,
                                    env)
                times[label].append(wall)
                print(f"  {label:<36} {wall:6.1f} s  ({data['verdict']} {data['score']:g}, "
                      f"load {os.getloadavg()[0]:.1f})", flush=True)
    medians = {label: statistics.median(t) for label, t in times.items()}
    before, after = medians.values()
    print(f"\nwarm `grade submit` of {args.submission.name}, {args.sandbox} sandbox, median of {rounds}:")
    for label, median in medians.items():
        print(f"  {label:<36} {median:6.1f} s")
    print(f"  speed-up {before / after:.2f}x ({before - after:.1f} s less per grading)")
    if args.json:
        args.json.write_text(json.dumps({"runs": times, "medians": medians}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
