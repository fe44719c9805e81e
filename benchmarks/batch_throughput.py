"""Batch-grades a generated class on the emulator and measures submissions per minute, cold and warm.

    .venv/bin/python benchmarks/batch_throughput.py                      # 40 students, sigmoid, cores + 1 workers
    .venv/bin/python benchmarks/batch_throughput.py --students 12 --workers 2 --json out.json
    .venv/bin/python benchmarks/batch_throughput.py --students 12 --distinct 4 --compare-rounds   # issue 14
    .venv/bin/python benchmarks/batch_throughput.py --students 40 --all-distinct --compare-objects  # shared bindings
    .venv/bin/python benchmarks/batch_throughput.py --students 40 --all-distinct --compare-workers  # serving workers
    .venv/bin/python benchmarks/batch_throughput.py --students 40 --all-distinct --own-bindings --compare-gxx  # clang

The class mixes instructor references, known-bad fixtures, exact duplicates, renamed copies (the same files
under another folder name) and zipped submissions. Three runs, each into its own batch directory:
  cold    empty build cache: every distinct submission is built once (twins wait for the first build), a
          binding compiled before is reused (--compare-objects first runs it with every binding compiled)
  warm    fresh batch directory, the cold run's build cache: nothing is rebuilt
  resume  the warm directory again: every result is already stored, nothing is graded
Throughput is submissions graded per minute of wall time (times on the emulator are modelled; the wall
time measured here is real). Needs the docker sandbox image (`grade images build`).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from bang_harness.toolchains import GXX_ONLY_ENV

from grader.batch.pool import FRESH_WORKERS_ENV
from grader.drivers.batch import device_slots, run_batch
from grader.orchestration import object_cache
from grader.orchestration.execute import PER_ROUND_ENV
from grader.results import GradeResult

REPO = Path(__file__).resolve().parents[1]
KERNELS = REPO / "reference_kernels"
PER_ASSIGNMENT = {
    "sigmoid": {
        "references": ["sigmoid/vector", "sigmoid/multicore", "sigmoid/pipeline"],
        "known_bad": ["compile_error", "tail_dropped", "wrapper_calls_torch_sigmoid", "kernel_never_launches",
                      "wrong_task_offset", "missing_sync_io", "nram_overflow"],
    },
    "matmul": {
        "references": ["example", "matmul/vector", "matmul/multicore"],
        "known_bad": ["out_of_bounds_write", "output_partly_unwritten", "wrapper_calls_torch_matmul"],
    },
}


def copy_submission(src: Path, dest: Path) -> None:
    """Copies a fixture; `_shared` headers a fixture includes through a relative symlink are resolved."""
    shutil.copytree(src, dest, symlinks=False, ignore=shutil.ignore_patterns("__pycache__", "expected.toml"))


def zip_submission(src: Path, archive: Path) -> None:
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(src.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.name != "expected.toml":
                zf.write(path, Path("my_ops") / path.relative_to(src))


def generate_class(root: Path, assignment: str, students: int, distinct: int | None = None) -> dict[str, str]:
    """Writes `students` submissions into `root`, built from `distinct` different fixtures (default: all);
    returns student id -> what it is."""
    kinds = PER_ASSIGNMENT[assignment]
    refs = [("reference", KERNELS / r) for r in kinds["references"]]
    bad = [("known_bad", KERNELS / "known_bad" / b) for b in kinds["known_bad"]]
    # Interleaved, so a small `distinct` still mixes references and known-bad fixtures.
    sources = [s for pair in itertools.zip_longest(refs, bad) for s in pair if s is not None][:distinct]
    root.mkdir(parents=True)
    made: dict[str, str] = {}
    # Every distinct fixture once; then duplicates, renamed copies and zips cycling over them.
    styles = itertools.cycle(["duplicate", "renamed", "zip"])
    for i in range(students):
        kind, src = sources[i % len(sources)]
        style = "original" if i < len(sources) else next(styles)
        sid = f"s{i:03d}" if style != "renamed" else f"renamed-copy-{i:03d}"
        if style == "zip":
            zip_submission(src, root / f"{sid}.zip")
        else:
            copy_submission(src, root / sid)
        made[sid] = f"{kind}:{src.name} ({style})"
    return made


def generate_distinct_class(root: Path, assignment: str, students: int, own_bindings: bool = False) -> dict[str, str]:
    """`students` submissions that all differ in content (so none shares a whole build): the instructor
    references in turn, each with a comment naming its student in every kernel, as real classes differ; with
    `own_bindings` in the binding too (by default the binding stays the handout's, as most students keep it,
    so builds share its compiled object: grader/orchestration/object_cache.py)."""
    refs = PER_ASSIGNMENT[assignment]["references"]
    root.mkdir(parents=True)
    made: dict[str, str] = {}
    for i in range(students):
        src = KERNELS / refs[i % len(refs)]
        sid = f"s{i:03d}"
        copy_submission(src, root / sid)
        for path in [*((root / sid).glob("cpp/*.cpp") if own_bindings else []), *(root / sid).glob("mlu/*.mlu")]:
            path.write_text(path.read_text() + f"\n// student {sid}\n")
        made[sid] = f"reference:{src.name} (distinct)"
    return made


def busy_cpu_seconds() -> float:
    """CPU seconds the whole machine (host, daemon, containers) has been busy since boot."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def measure(label: str, subs: Path, assignment: str, out: Path, cache: Path, workers: int | None,
            no_pch: bool = False, sandbox_per_round: bool = False, no_shared_objects: bool = False,
            fresh_workers: bool = False, gxx_bindings: bool = False) -> dict:
    switches = {"BANG_GRADER_NO_PCH": no_pch, PER_ROUND_ENV: sandbox_per_round, object_cache.OFF_ENV: no_shared_objects,
                FRESH_WORKERS_ENV: fresh_workers, GXX_ONLY_ENV: gxx_bindings}
    previous = {name: os.environ.pop(name, None) for name in switches}
    for name, on in switches.items():
        # Read in each worker: NO_PCH and GXX_BINDINGS by Backend.env (builds compile torch/extension.h themselves,
        # or bindings by g++ with its PCH alone), PER_ROUND by
        # the executor (one run-phase sandbox per round, as before one sandbox served all of a submission's);
        # FRESH_WORKERS by the pool (a worker process per job, as before a worker served its slot's jobs).
        if on:
            os.environ[name] = "1"
    try:
        started, busy = time.monotonic(), busy_cpu_seconds()
        summary = run_batch(subs, assignment, out, workers=workers, backend="emu", sandbox="docker", force=False,
                            seed="benchmark", progress=sys.stderr.isatty(), build_cache=cache)
        wall, busy = time.monotonic() - started, busy_cpu_seconds() - busy
    finally:
        for name, value in previous.items():
            os.environ.pop(name, None)
            if value is not None:
                os.environ[name] = value
    cached = 0
    build_seconds = []
    grading_seconds = []
    for path in (out / "results").glob("*.json"):
        result = GradeResult.from_json(path.read_text())
        cached += bool(result.build and result.build.cached)
        if result.build and not result.build.cached and result.build.ok:
            build_seconds.append(result.build.duration_seconds)
        if result.started_at and result.finished_at:
            grading_seconds.append((result.finished_at - result.started_at).total_seconds())
    return {"run": label, "workers": len(device_slots("emu", workers, None)), "students": summary.total, "graded": summary.graded, "skipped": summary.skipped,
            "wall_seconds": round(wall, 1), "per_minute": round(60 * summary.graded / wall, 2) if summary.graded else None,
            "builds_from_cache": cached, "verdicts": summary.verdicts, "worker_failures": summary.worker_failures,
            "median_build_seconds": round(statistics.median(build_seconds), 1) if build_seconds else None,
            "median_grading_seconds": round(statistics.median(grading_seconds), 1) if grading_seconds else None,
            # Every core busy for the whole run could grade at most this many per minute: the CPU floor.
            "cpu_seconds_per_submission": round(busy / summary.graded, 2) if summary.graded else None,
            "cpu_bound_per_minute": round(60 * (os.cpu_count() or 1) * summary.graded / busy, 1)
            if summary.graded and busy else None}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--students", type=int, default=40)
    parser.add_argument("--workers", type=int, default=None, help="default: grade batch's (cores + 1)")
    parser.add_argument("--distinct", type=int, default=None,
                        help="how many different fixtures the class is made of (default: all; fewer = fewer builds)")
    parser.add_argument("--all-distinct", action="store_true",
                        help="every submission differs in content (references with a per-student comment in "
                             "each kernel; the binding is the handout's)")
    parser.add_argument("--own-bindings", action="store_true",
                        help="with --all-distinct: the comment goes into each binding too (nothing is shared)")
    parser.add_argument("--compare-objects", action="store_true",
                        help="first a cold run where every build compiles its own binding (how builds ran before)")
    parser.add_argument("--compare-pch", action="store_true",
                        help="first a cold run without the precompiled torch headers (how builds ran before)")
    parser.add_argument("--compare-gxx", action="store_true",
                        help="first a cold run with bindings compiled by g++ alone (before the clang fast path)")
    parser.add_argument("--compare-workers", action="store_true",
                        help="also a warm run with a fresh worker process per job (how it ran before workers "
                             "served a slot's jobs in turn)")
    parser.add_argument("--compare-rounds", action="store_true",
                        help="also a warm run with one run-phase sandbox per round (how it ran before issue 14)")
    parser.add_argument("--assignment", choices=sorted(PER_ASSIGNMENT), default="sigmoid")
    parser.add_argument("--keep", type=Path, default=None, help="keep the class and batch folders here")
    parser.add_argument("--json", type=Path, default=None, help="also write the measurements here")
    args = parser.parse_args(argv)

    work = args.keep or Path(tempfile.mkdtemp(prefix="batch-bench-"))
    if args.keep and work.exists():
        shutil.rmtree(work)
    subs, cache = work / "class", work / "build-cache"
    kinds = generate_distinct_class(subs, args.assignment, args.students, args.own_bindings) if args.all_distinct else \
        generate_class(subs, args.assignment, args.students, args.distinct)
    print(f"class of {len(kinds)} in {subs} ({args.assignment}, {len(device_slots('emu', args.workers, None))} workers)", file=sys.stderr)

    runs = []
    if args.compare_pch:
        runs.append(measure("cold-noPCH", subs, args.assignment, work / "batch-cold-nopch", work / "cache-nopch",
                            args.workers, no_pch=True))
    if args.compare_gxx:
        runs.append(measure("cold-gxx-bindings", subs, args.assignment, work / "batch-cold-gxx", work / "cache-gxx",
                            args.workers, gxx_bindings=True))
    if args.compare_objects:
        runs.append(measure("cold-noshare", subs, args.assignment, work / "batch-cold-noshare",
                            work / "cache-noshare", args.workers, no_shared_objects=True))
    cold = measure("cold", subs, args.assignment, work / "batch-cold", cache, args.workers)
    runs.append(cold)
    if args.compare_rounds:  # before: the same warm cache, a sandbox per round
        runs.append(measure("warm-per-round", subs, args.assignment, work / "batch-warm-per-round", cache,
                            args.workers, sandbox_per_round=True))
    if args.compare_workers:  # before: a worker process per job, one worker per two cores (then the default)
        runs.append(measure("warm-fresh-workers-half-cores", subs, args.assignment, work / "batch-warm-before", cache,
                            max(1, (os.cpu_count() or 2) // 2), fresh_workers=True))
        runs.append(measure("warm-fresh-workers", subs, args.assignment, work / "batch-warm-fresh", cache,
                            args.workers, fresh_workers=True))
    warm = measure("warm", subs, args.assignment, work / "batch-warm", cache, args.workers)
    runs += [warm, measure("resume", subs, args.assignment, work / "batch-warm", cache, args.workers)]
    speedup = cold["wall_seconds"] / warm["wall_seconds"] if warm["wall_seconds"] else None
    load = Path("/proc/loadavg").read_text().split()[:3] if Path("/proc/loadavg").exists() else []
    report = {"assignment": args.assignment, "students": len(kinds), "workers": args.workers, "runs": runs,
              "distinct_fixtures": len({v.split(" (")[0] for v in kinds.values()}), "loadavg_after": load,
              "warm_speedup": round(speedup, 2) if speedup else None, "class": kinds}

    print(f"{'run':<30}{'workers':>8}{'graded':>8}{'skipped':>9}{'wall s':>9}{'subs/min':>10}{'s/grading':>11}"
          f"{'cached builds':>15}{'build s/sub (median)':>22}{'CPU s/sub':>11}{'CPU-bound/min':>15}{'vs first':>10}")
    first = runs[0]["wall_seconds"]
    for r in runs:
        rate = f"{r['per_minute']:.1f}" if r["per_minute"] else "-"
        floor = f"{r['median_build_seconds']:.1f}" if r.get("median_build_seconds") else "-"
        grading = f"{r['median_grading_seconds']:.1f}" if r.get("median_grading_seconds") else "-"
        ratio = f"{first / r['wall_seconds']:.2f}x" if r["wall_seconds"] else "-"
        print(f"{r['run']:<30}{r['workers']:>8}{r['graded']:>8}{r['skipped']:>9}{r['wall_seconds']:>9.1f}{rate:>10}{grading:>11}"
              f"{r['builds_from_cache']:>15}{floor:>22}{r['cpu_seconds_per_submission'] or '-':>11}"
              f"{r['cpu_bound_per_minute'] or '-':>15}{ratio:>10}")
    if args.compare_rounds:
        before = next(r for r in runs if r["run"] == "warm-per-round")
        print(f"warm, one sandbox per submission vs one per round: {before['wall_seconds'] / warm['wall_seconds']:.2f}x "
              f"({before['per_minute']} -> {warm['per_minute']} submissions/min; s/grading: median wall seconds "
              "of one grading, results' started_at..finished_at)")
    if args.compare_workers:
        for label in ("warm-fresh-workers-half-cores", "warm-fresh-workers"):
            before = next(r for r in runs if r["run"] == label)
            print(f"warm vs {label}: {before['wall_seconds'] / warm['wall_seconds']:.2f}x ({before['per_minute']} -> "
                  f"{warm['per_minute']} submissions/min; {before['cpu_seconds_per_submission']} -> "
                  f"{warm['cpu_seconds_per_submission']} CPU s/sub)")
    print("build s/sub: the harness's own build time per uncached submission (g++ and cncc-emu: the compiler "
          "floor a cold batch cannot go below, per worker)")
    print(f"CPU s/sub: the whole machine's busy CPU seconds per graded submission (host, Docker, containers); "
          f"CPU-bound/min: what {os.cpu_count()} cores fully busy could grade at that cost")
    print(f"warm cache speed-up: {report['warm_speedup']}x   verdicts (cold): {cold['verdicts']}")
    print(f"{report['distinct_fixtures']} distinct fixtures; load average after: {' '.join(load)}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if cold["worker_failures"] == 0 and warm["worker_failures"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
