"""Sandbox overhead per submission: what a container (or bwrap) costs over a plain process.

    .venv/bin/python benchmarks/container_overhead.py                 # warm numbers (images present)
    .venv/bin/python benchmarks/container_overhead.py --rebuild thin  # + cold: thin layer rebuilt first
    .venv/bin/python benchmarks/container_overhead.py --rebuild base  # + cold: debootstrap base too (minutes)

"cold" = the image build and the first container started from a freshly built image; "warm" = the median
of `--repeats` further runs. Each run is one harness-like phase: a trivial `python3 -c pass` (pure runner
overhead) and `import torch` (what every harness phase pays). A grading run has two phases (build, run).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from grader.sandbox.base import Limits, Mounts, Phase
from grader.sandbox.bwrap_runner import BwrapRunner, bwrap_available
from grader.sandbox.docker_runner import DockerRunner
from grader.sandbox.images import docker_client, ensure_base_image, ensure_emu_image

PROGRAMS = {"python3 -c pass": "pass", "import torch": "import torch"}


def fresh_mounts(root: Path, i: int) -> Mounts:
    mounts = Mounts(root / f"s{i}", root / f"b{i}", root / f"io{i}")
    for path in (mounts.submission, mounts.build, mounts.io):
        path.mkdir()
    return mounts


def time_runner(runner, code: str, root: Path, i: int) -> float:
    started = time.monotonic()
    outcome = runner.run(Phase.RUN, ["python3", "-c", code], fresh_mounts(root, i), Limits(wall_seconds=120))
    if not outcome.ok:
        raise SystemExit(f"{runner.name} run failed: {outcome}")
    return time.monotonic() - started


def time_plain(code: str) -> float:
    started = time.monotonic()
    subprocess.run([sys.executable, "-c", code], check=True)
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--rebuild", choices=["none", "thin", "base"], default="none")
    args = parser.parse_args()

    quiet = lambda _line: None  # noqa: E731
    if args.rebuild == "base":
        started = time.monotonic()
        ensure_base_image(docker_client(timeout=600), rebuild=True, log=quiet)
        print(f"cold: base image (debootstrap + venv + docker import)   {time.monotonic() - started:8.1f} s")
    started = time.monotonic()
    tag = ensure_emu_image(rebuild=args.rebuild != "none", log=quiet)
    label = "cold: thin layer (sandbox/ + emulator prebuild)" if args.rebuild != "none" else \
        "ensure_emu_image (builds only what is stale)"
    print(f"{label:55s} {time.monotonic() - started:8.1f} s   [{tag}]")

    runners = [DockerRunner(tag)]
    if bwrap_available():
        runners.append(BwrapRunner())
    with tempfile.TemporaryDirectory(prefix="bang-grader-bench-") as tmp:
        root = Path(tmp)
        i = 0
        first = time_runner(runners[0], "pass", root, i)
        print(f"{'first container from this image (python3 -c pass)':55s} {first:8.2f} s")
        print(f"\nwarm, median of {args.repeats} (min-max), seconds per phase:")
        print(f"{'program':18s} {'plain process':>18s}" + "".join(f"{r.name:>18s}" for r in runners))
        for name, code in PROGRAMS.items():
            plain = [time_plain(code) for _ in range(args.repeats)]
            cells = [plain]
            for runner in runners:
                samples = []
                for _ in range(args.repeats):
                    i += 1
                    samples.append(time_runner(runner, code, root, i))
                cells.append(samples)
            print(f"{name:18s}" + "".join(
                f"{statistics.median(s):8.2f} ({min(s):.2f}-{max(s):.2f})" for s in cells))
        print("\noverhead = runner column minus plain process; a grading run pays it twice (build + run).")


if __name__ == "__main__":
    main()
