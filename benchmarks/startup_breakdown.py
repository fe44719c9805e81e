"""Where a warm grading's seconds go: container start, Python/torch import, emulator activation, extension
load, and each phase of a real grading, cold (empty build cache) and warm (build cached), measured in the sandbox the grader uses.

    .venv/bin/python benchmarks/startup_breakdown.py [--sandbox docker|bwrap|none] [--repeats 3]
        [--submission reference_kernels/sigmoid/vector]

Each probe is a fresh sandbox run (as a grading starts its one run-phase container) of a tiny program; the medians
are printed beside each other, so the difference between two lines is the cost of one step.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from grader.backends import DEFAULT_BACKEND, get_backend  # noqa: E402
from grader.orchestration import GradeEnvironment, GradeRequest, grade_submission  # noqa: E402
from grader.orchestration.options import sandbox_name  # noqa: E402
from grader.sandbox.base import Limits, Mounts, Phase  # noqa: E402
from grader.sandbox.select import select_runner  # noqa: E402

PROBES = [
    ("sandbox start (true)", ["true"]),
    ("+ python", ["python3", "-c", "pass"]),
    ("+ numpy", ["python3", "-c", "import numpy"]),
    ("+ torch", ["python3", "-c", "import torch"]),
    ("+ emulated MLU device", ["python3", "-c", "import torch, bang_emu.torch_mlu_emu as t; t.activate()"]),
]


def probe(runner, argv: list[str], work: Path) -> float:
    backend = get_backend("emu")
    sub, build, io = work / "sub", work / "build", work / "io"
    for d in (sub, build, io):
        d.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    outcome = runner.run(Phase.RUN, argv, Mounts(submission=sub, build=build, io=io), Limits(wall_seconds=300),
                         env=dict(backend.run_env(backend.resolve_device(None))))
    wall = time.monotonic() - started
    if not outcome.ok:
        raise SystemExit(f"{argv}: {outcome.exit_code} {outcome.stderr_tail[-2000:]}")
    return wall


class TimedRunner:
    """Wraps a runner and records each phase's wall time (grading code is unchanged)."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.name = getattr(inner, "name", "runner")
        self.image = getattr(inner, "image", "")
        self.phases: list[tuple[str, float]] = []

    def run(self, phase, argv, mounts, limits, env=None):
        started = time.monotonic()
        outcome = self.inner.run(phase, argv, mounts, limits, env=env)
        self.phases.append((f"{phase.value} {Path(mounts.io).name}", time.monotonic() - started))
        return outcome

    def start(self, phase, argv, mounts, limits, env=None):
        """A run-phase sandbox shared by the rounds (bang_harness.session): timed from start to its end."""
        started = time.monotonic()
        handle = self.inner.start(phase, argv, mounts, limits, env=env)
        label = f"{phase.value} {Path(mounts.io).name} (all its rounds)"
        phases = self.phases

        class Timed:
            recorded = False

            def _record(self, outcome):
                if outcome is not None and not self.recorded:
                    self.recorded = True
                    phases.append((label, time.monotonic() - started))
                return outcome

            def wait(self, timeout=None):
                return self._record(handle.wait(timeout))

            def stop(self, reason):
                return self._record(handle.stop(reason))

        return Timed()


def grading_phases(sandbox: str, submission: Path, cache: Path, runner=None) -> tuple[float, list[tuple[str, float]]]:
    from dataclasses import replace

    from grader.orchestration.environment import resolve_environment

    environment = GradeEnvironment(sandbox=sandbox_name(sandbox), build_cache=cache)
    timed = TimedRunner(runner if runner is not None else resolve_environment(environment)[1])
    started = time.monotonic()
    result = grade_submission(submission, GradeRequest(), replace(environment, runner=timed))
    total = time.monotonic() - started
    print(f"  graded {submission.name}: {result.verdict.value}, build cached: {bool(result.build and result.build.cached)}")
    return total, timed.phases


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sandbox", default="docker")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--submission", type=Path, default=REPO / "reference_kernels" / "sigmoid" / "vector")
    parser.add_argument("--image", help="docker: this image tag instead of the current sources' one")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    if args.image:
        from grader.sandbox.docker_runner import DockerRunner

        runner = DockerRunner(args.image)
    else:
        runner = select_runner(args.sandbox, batch=False, backend=get_backend(DEFAULT_BACKEND))  # type: ignore[arg-type]
    report: dict[str, object] = {"sandbox": args.sandbox}
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
        times: dict[str, list[float]] = {label: [] for label, _ in PROBES}
        for r in range(args.repeats):
            for label, cmd in PROBES:  # interleaved: load changes hit every probe alike
                times[label].append(probe(runner, cmd, Path(tmp) / f"p{r}"))
        print(f"\nstart-up in the {args.sandbox} sandbox, fresh sandbox per run, median of {args.repeats}:")
        previous = 0.0
        rows = []
        for label, _ in PROBES:
            med = statistics.median(times[label])
            print(f"  {label:<28} {med:6.2f} s   (step {med - previous:+.2f} s)")
            rows.append({"probe": label, "median_s": round(med, 2), "step_s": round(med - previous, 2)})
            previous = med
        report["probes"] = rows
        cache = Path(tmp) / "cache"
        fixed = runner if args.image else None
        # Cold (empty build cache) then warm (the same cache), one after the other under the same load.
        for label in ("cold", "warm"):
            total, phases = grading_phases(args.sandbox, args.submission, cache, fixed)
            print(f"\n{label} grading of {args.submission.name} (load {os.getloadavg()[0]:.1f}): {total:.1f} s")
            for name, seconds in phases:
                print(f"  {name:<28} {seconds:6.2f} s")
            print(f"  {'host side (rest)':<28} {total - sum(s for _, s in phases):6.2f} s")
            report[f"{label}_grading_s"] = round(total, 2)
            report[f"{label}_phases"] = [{"phase": n, "seconds": round(s, 2)} for n, s in phases]
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
