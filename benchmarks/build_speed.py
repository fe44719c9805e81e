"""Time the harness build of a submission as it is and as it was, side by side.

    .venv/bin/python benchmarks/build_speed.py [SUBMISSION ...] [--rounds 2] [--sandbox none|docker]
                                               [--before no-pch|gxx|no-lld]

Each round builds every submission twice, alternating the order (after / before), through the same runner the
grader uses, so machine load hits both alike; prints per-build wall seconds, CPU seconds (the build container's
cgroup; on `none`, the host's) and the ratio. `--before no-pch` (the default): without any precompiled torch
headers; `gxx`: bindings by g++ with its PCH alone, without the clang fast path; `no-lld`: the extension linked by
the system linker (bfd), not lld. `--sandbox docker` builds in the sandbox image (its baked PCHs); `none` on the host
(ProcessRunner; the host PCHs are made first).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bang_harness.build import LLD_OFF_ENV  # noqa: E402
from bang_harness.toolchains import GXX_ONLY_ENV  # noqa: E402

from benchmarks.cpu_ledger import Ledger  # noqa: E402
from grader.backends import DEFAULT_BACKEND, get_backend  # noqa: E402
from grader.sandbox.base import Limits, Mounts, Phase  # noqa: E402
from grader.sandbox.select import select_runner  # noqa: E402

DEFAULT = [REPO / "reference_kernels" / "sigmoid" / "vector", REPO / "reference_kernels" / "example"]
BEFORE = {"no-pch": ("BANG_GRADER_NO_PCH", "before (no PCH)"), "gxx": (GXX_ONLY_ENV, "before (g++ PCH)"),
          "no-lld": (LLD_OFF_ENV, "before (bfd link)")}


def build_once(runner, submission: Path, after: bool, before_switch: str) -> tuple[float, bool, float, float]:
    backend = get_backend("emu")
    with tempfile.TemporaryDirectory(prefix="bench-build-") as tmp:
        build, io = Path(tmp) / "build", Path(tmp) / "io"
        build.mkdir()
        io.mkdir()
        env = dict(backend.run_env(backend.resolve_device(None)))
        if not after:
            env[before_switch] = "1"
        started = time.monotonic()
        with Ledger() as ledger:  # the build container's CPU seconds (docker), or the host's (none)
            outcome = runner.run(Phase.BUILD, backend.harness_argv(Phase.BUILD),
                                 Mounts(submission=submission.resolve(), build=build, io=io),
                                 Limits(wall_seconds=900, cpus=2.0), env=env)
        wall = time.monotonic() - started
        info = json.loads((build / "build.json").read_text()) if (build / "build.json").exists() else {}
        return wall, bool(info.get("ok")) and outcome.ok, float(info.get("seconds", 0.0)), \
            ledger.containers + ledger.host


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("submissions", nargs="*", type=Path, default=DEFAULT)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--sandbox", default="none", choices=["none", "docker", "bwrap"])
    parser.add_argument("--image", help="docker: this image tag instead of the current sources' one")
    parser.add_argument("--before", choices=sorted(BEFORE), default="no-pch")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    before_switch, before_label = BEFORE[args.before]
    if args.image:
        from grader.sandbox.docker_runner import DockerRunner

        args.sandbox = "docker"
        runner = DockerRunner(args.image)
    else:
        runner = select_runner(args.sandbox, batch=False, backend=get_backend(DEFAULT_BACKEND))  # type: ignore[arg-type]
    if args.sandbox == "none":  # the one-off host PCH build is not part of any timed build
        from grader.sandbox.process import ProcessRunner, ensure_host_pch

        assert isinstance(runner, ProcessRunner)
        import os

        cache = Path(os.environ.get("BANG_EMU_CACHE") or Path.home() / ".cache" / "bang_emu")
        env = {**os.environ, "PYTHONPATH": str(REPO / "sandbox")}
        problem = ensure_host_pch(runner.command(["python"])[0], cache, env)
        if problem:
            print(problem)
    rows = []
    for submission in args.submissions:
        times: dict[bool, list[float]] = {True: [], False: []}
        harness: dict[bool, list[float]] = {True: [], False: []}
        cpu: dict[bool, list[float]] = {True: [], False: []}
        for r in range(args.rounds):
            for after in ((True, False) if r % 2 == 0 else (False, True)):
                wall, ok, seconds, cpu_s = build_once(runner, submission, after, before_switch)
                if not ok:
                    print(f"{submission.name}: build failed ({'after' if after else 'before'})")
                times[after].append(wall)
                harness[after].append(seconds)
                cpu[after].append(cpu_s)
                print(f"  {submission.name:<12} {'after ' if after else 'before'} {wall:6.2f} s (harness "
                      f"{seconds:.2f} s, CPU {cpu_s:.2f} s)", flush=True)
        on, off = statistics.median(times[True]), statistics.median(times[False])
        rows.append({"submission": str(submission.relative_to(REPO)) if submission.is_relative_to(REPO) else str(submission),
                     "before": args.before, "before_s": round(off, 1), "after_s": round(on, 1),
                     "speedup": round(off / on, 2), "harness_before_s": round(statistics.median(harness[False]), 1),
                     "harness_after_s": round(statistics.median(harness[True]), 1),
                     "cpu_before_s": round(statistics.median(cpu[False]), 2),
                     "cpu_after_s": round(statistics.median(cpu[True]), 2)})
    print(f"\nbuild phase, {args.sandbox} runner, median of {args.rounds} (wall s incl. runner start; CPU s):")
    print(f"{'submission':<34} {before_label:>16} {'after':>12} {'ratio':>7} {'CPU before':>11} {'after':>7}")
    for row in rows:
        print(f"{row['submission']:<34} {row['before_s']:>16.1f} {row['after_s']:>12.1f} {row['speedup']:>6.2f}x"
              f" {row['cpu_before_s']:>11.2f} {row['cpu_after_s']:>7.2f}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
