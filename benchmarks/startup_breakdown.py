"""Where a warm grading's seconds go: container start, Python/torch import, emulator activation, extension
load, and each phase of a real grading, cold (empty build cache) and warm (build cached), measured in the sandbox the grader uses.

    .venv/bin/python benchmarks/startup_breakdown.py [--sandbox docker|bwrap|none] [--repeats 3]
        [--submission reference_kernels/sigmoid/vector]

Each probe is a fresh sandbox run (as a grading starts its one run-phase container) of a tiny program; the medians
are printed beside each other, so the difference between two lines is the cost of one step.

On docker every line also says its CPU seconds (the container's cgroup, read before its removal: cpu_ledger.py),
which the machine's load does not inflate as it does wall time: each round of the shared run-phase container, each
replay sandbox (and, inside it, what the replay's own profile says: the engine's making, each journal's child),
the build, the host's own process (its checks, references, report) and the Docker daemon's share.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.cpu_ledger import ContainerClock, Ledger  # noqa: E402
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


def probe(runner, argv: list[str], work: Path, clock: ContainerClock) -> tuple[float, float | None]:
    """A fresh sandbox running `argv`: its wall and (docker) CPU seconds."""
    backend = get_backend("emu")
    sub, build, io = work / "sub", work / "build", work / "io"
    for d in (sub, build, io):
        d.mkdir(parents=True, exist_ok=True)
    made = len(clock.created)
    started = time.monotonic()
    outcome = runner.run(Phase.RUN, argv, Mounts(submission=sub, build=build, io=io), Limits(wall_seconds=300),
                         env=dict(backend.run_env(backend.resolve_device(None))))
    wall = time.monotonic() - started
    if not outcome.ok:
        raise SystemExit(f"{argv}: {outcome.exit_code} {outcome.stderr_tail[-2000:]}")
    return wall, _cpu_of(clock, made)


def _cpu_of(clock: ContainerClock, made: int, io: str | None = None) -> float | None:
    """The CPU seconds of the containers created since the `made`-th (those with /io `io` only: another thread's
    run beside it is not this one's)."""
    seconds = [s for name, _phase, folder, _parent in clock.created[made:]
               if io in (None, folder) and (s := clock.seconds(name)) is not None]
    return sum(seconds) if seconds else None


class TimedRunner:
    """Wraps a runner and records each phase's wall time and (docker) CPU seconds (grading code is unchanged)."""

    def __init__(self, inner, clock: ContainerClock) -> None:
        self.inner = inner
        self.clock = clock
        self.name = getattr(inner, "name", "runner")
        self.image = getattr(inner, "image", "")
        self.phases: list[tuple[str, float, float | None]] = []

    def run(self, phase, argv, mounts, limits, env=None):
        made = len(self.clock.created)
        started = time.monotonic()
        outcome = self.inner.run(phase, argv, mounts, limits, env=env)
        self.phases.append((f"{phase.value} {Path(mounts.io).name}", time.monotonic() - started,
                            _cpu_of(self.clock, made, Path(mounts.io).name)))
        return outcome

    def start(self, phase, argv, mounts, limits, env=None):
        """A run-phase sandbox shared by the rounds (bang_harness.session): timed from start to its end."""
        made = len(self.clock.created)
        started = time.monotonic()
        handle = self.inner.start(phase, argv, mounts, limits, env=env)
        label = f"{phase.value} {Path(mounts.io).name} (all its rounds)"
        phases, clock = self.phases, self.clock

        class Timed:
            recorded = False

            def _record(self, outcome):
                if outcome is not None and not self.recorded:
                    self.recorded = True
                    ours = clock.created[made][0] if len(clock.created) > made else ""
                    phases.append((label, time.monotonic() - started, clock.seconds(ours)))
                return outcome

            def wait(self, timeout=None):
                return self._record(handle.wait(timeout))

            def stop(self, reason):
                return self._record(handle.stop(reason))

        return Timed()


class RoundClock:
    """The shared run-phase container's CPU seconds at the end of each round (Executor._run_round wrapped)."""

    def __init__(self, clock: ContainerClock) -> None:
        from grader.orchestration.execute import Executor

        self.clock = clock
        self.rounds: list[tuple[str, float, float | None]] = []
        self._executor = Executor
        self._saved = Executor._run_round

    def __enter__(self) -> RoundClock:
        saved, rounds, clock = self._saved, self.rounds, self.clock

        def timed(executor, calls, io, span, call_timeout):  # type: ignore[no-untyped-def]
            started = time.monotonic()
            result = saved(executor, calls, io, span, call_timeout)
            runs = [name for name, phase, _io, _id in clock.created if phase == "run" and _io.endswith("sandbox")]
            cpu = clock.seconds(runs[-1]) if runs else None
            rounds.append((f"round {Path(io).name} ({len(calls)} calls)", time.monotonic() - started, cpu))
            return result

        self._executor._run_round = timed  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        self._executor._run_round = self._saved  # type: ignore[method-assign]


class ReplayClock:
    """Each replay handed to the shared replay sandbox (replay_sandbox.ReplaySandbox.replay wrapped): its wall from
    hand-in to outputs read, the sandbox's start included for the first."""

    def __init__(self) -> None:
        from grader.orchestration.replay_sandbox import ReplaySandbox

        self.replays: list[tuple[str, float, float | None]] = []
        self._cls = ReplaySandbox
        self._saved = ReplaySandbox.replay

    def __enter__(self) -> ReplayClock:
        saved, replays = self._saved, self.replays

        def timed(sandbox, staged_io, wall_seconds):  # type: ignore[no-untyped-def]
            started = time.monotonic()
            result = saved(sandbox, staged_io, wall_seconds)
            replays.append((f"replay {Path(staged_io).name} (in {sandbox.mounts.io.name})", time.monotonic() - started,
                            None))
            return result

        self._cls.replay = timed  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        self._cls.replay = self._saved  # type: ignore[method-assign]


def grading_phases(sandbox: str, submission: Path, cache: Path, clock: ContainerClock, runner=None) -> dict:
    from dataclasses import replace

    from grader.orchestration.environment import resolve_environment

    environment = GradeEnvironment(sandbox=sandbox_name(sandbox), build_cache=cache)
    timed = TimedRunner(runner if runner is not None else resolve_environment(environment)[1], clock)
    os.environ["BANG_GRADER_KEEP_WORK"] = "1"
    try:
        with Ledger() as ledger, RoundClock(clock) as rounds, ReplayClock() as replays:
            started = time.monotonic()
            result = grade_submission(submission, GradeRequest(), replace(environment, runner=timed))
            total = time.monotonic() - started
    finally:
        del os.environ["BANG_GRADER_KEEP_WORK"]
    work = next((Path(n.split(": ", 1)[1]) for n in result.message.splitlines()
                 if n.startswith("work folder kept: ")), None)
    profiles = {}
    if work is not None:
        for found in sorted(work.rglob("replay-profile.json")):
            profiles[found.parent.parent.name] = json.loads(found.read_text())
        shutil.rmtree(work, ignore_errors=True)
    print(f"  graded {submission.name}: {result.verdict.value}, build cached: {bool(result.build and result.build.cached)}")
    return {"total": total, "phases": timed.phases, "rounds": rounds.rounds + replays.replays, "ledger": ledger.row(),
            "replay_profiles": profiles}


def _cpu(seconds: float | None) -> str:
    return "    -   " if seconds is None else f"{seconds:6.2f} s"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sandbox", default="docker")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--submission", type=Path, default=REPO / "reference_kernels" / "sigmoid" / "vector")
    parser.add_argument("--image", help="docker: this image tag instead of the current sources' one")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--no-probes", action="store_true", help="only the gradings")
    parser.add_argument("--warm", type=int, default=1, help="warm gradings after the cold one")
    args = parser.parse_args(argv)
    if args.image:
        from grader.sandbox.docker_runner import DockerRunner

        runner = DockerRunner(args.image)
    else:
        runner = select_runner(args.sandbox, batch=False, backend=get_backend(DEFAULT_BACKEND))  # type: ignore[arg-type]
    report: dict[str, object] = {"sandbox": args.sandbox, "load_before": os.getloadavg()[0]}
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp, ContainerClock() as clock:
        times: dict[str, list[tuple[float, float | None]]] = {label: [] for label, _ in PROBES}
        for r in range(0 if args.no_probes else args.repeats):
            for label, cmd in PROBES:  # interleaved: load changes hit every probe alike
                times[label].append(probe(runner, cmd, Path(tmp) / f"p{r}", clock))
        rows = []
        if not args.no_probes:
            print(f"\nstart-up in the {args.sandbox} sandbox, fresh sandbox per run, median of {args.repeats}:")
            previous = previous_cpu = 0.0
            for label, _ in PROBES:
                med = statistics.median(w for w, _ in times[label])
                cpus = [c for _, c in times[label] if c is not None]
                cpu = statistics.median(cpus) if cpus else None
                print(f"  {label:<28} {med:6.2f} s   (step {med - previous:+.2f} s)   CPU {_cpu(cpu)}"
                      + (f" (step {cpu - previous_cpu:+.2f} s)" if cpu is not None else ""))
                rows.append({"probe": label, "median_s": round(med, 2), "step_s": round(med - previous, 2),
                             "cpu_s": None if cpu is None else round(cpu, 2)})
                previous, previous_cpu = med, cpu or 0.0
        report["probes"] = rows
        cache = Path(tmp) / "cache"
        fixed = runner if args.image else None
        # Cold (empty build cache) then warm (the same cache), one after the other under the same load.
        for label in ["cold"] + [f"warm{i + 1}" if args.warm > 1 else "warm" for i in range(args.warm)]:
            load = os.getloadavg()[0]
            graded = grading_phases(args.sandbox, args.submission, cache, clock, fixed)
            ledger = graded["ledger"]
            print(f"\n{label} grading of {args.submission.name} (load {load:.1f}): {graded['total']:.1f} s wall; "
                  f"CPU: containers {ledger['containers_cpu_s']} s, host {ledger['host_cpu_s']} s, "
                  f"docker daemon <= {ledger['daemon_cpu_s_upper_bound']} s")
            print(f"  {'phase':<44} {'wall':>8} {'CPU':>8}")
            for name, seconds, cpu in graded["phases"]:
                print(f"  {name:<44} {seconds:6.2f} s {_cpu(cpu)}")
            previous = 0.0
            for name, seconds, cpu in graded["rounds"]:
                step = None if cpu is None else cpu - previous
                if name.startswith("replay "):
                    print(f"    {name:<42} {seconds:6.2f} s (wall, shared replay sandbox)")
                    continue
                print(f"    {name:<42} {seconds:6.2f} s {_cpu(step)} (run container, cumulative {_cpu(cpu)})")
                previous = cpu or previous
            for where, profile in graded["replay_profiles"].items():
                print(f"    {where}: " + ", ".join(f"{k} {v}" for k, v in profile.items() if k != "children"))
                for child in profile.get("children", []):
                    print(f"      child {child}")
            print(f"  {'host side (rest, wall)':<44} {graded['total'] - sum(s for _, s, _ in graded['phases']):6.2f} s")
            report[f"{label}_grading_s"] = round(graded["total"], 2)
            report[f"{label}_ledger"] = ledger
            report[f"{label}_phases"] = [{"phase": n, "seconds": round(s, 2), "cpu_s": c and round(c, 2)}
                                         for n, s, c in graded["phases"]]
            report[f"{label}_rounds"] = [{"round": n, "seconds": round(s, 2), "cpu_cumulative_s": c and round(c, 2)}
                                         for n, s, c in graded["rounds"]]
            report[f"{label}_replay_profiles"] = graded["replay_profiles"]
    report["load_after"] = os.getloadavg()[0]
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
