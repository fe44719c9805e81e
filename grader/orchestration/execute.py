"""Executing planned calls in one run phase of the sandbox: inputs and job.json into the io folder, a fresh
trace key, progress from the outputs as they appear, the runner, then each call's outcome read back."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from bang_harness.protocol import KEY_BYTES, KEY_FILE

from grader.checks.integrity import HostFacts
from grader.orchestration.environment import ResolvedBackend
from grader.orchestration.judge import CallOutcome
from grader.orchestration.plan import PlannedCall
from grader.orchestration.read_outputs import describe_outcome, read_call
from grader.sandbox.base import Limits, Mounts, Phase, Runner
from grader.sandbox.layout import sandbox_user
from grader.spec import AssignmentSpec


@dataclass
class Executor:
    runner: Runner
    backend: ResolvedBackend
    spec: AssignmentSpec
    root: Path
    module: str
    extension: str
    build_dir: Path
    progress: Callable[[str, float], None]
    notes: list[str]  # the grading's notes: a run phase that did not finish cleanly is added here
    facts: HostFacts | None = None  # what integrity checks compare the sandbox's claims against
    integrity_seconds: float = field(default=0.0)  # host cost of the checks, for the record

    def run(self, calls: list[PlannedCall], io: Path, progress_span: tuple[float, float],
            call_timeout: float | None = None) -> dict[str, CallOutcome]:
        if not calls:
            return {}
        (io / "inputs").mkdir(parents=True)
        (io / "outputs").mkdir()
        self._write_job(calls, io, call_timeout)
        key = write_trace_key(io) if self.backend.impl.kernel_trace else None
        stop = threading.Event()
        watcher = threading.Thread(target=self._watch_outputs, args=(io / "outputs", calls, progress_span, stop),
                                   daemon=True)
        watcher.start()
        try:
            outcome = self.runner.run(Phase.RUN, self.backend.argv(Phase.RUN),
                                      Mounts(submission=self.root.resolve(), build=self.build_dir, io=io),
                                      Limits(wall_seconds=self.spec.run_timeout_seconds), env=dict(self.backend.env))
        finally:
            stop.set()
            watcher.join()
            (io / KEY_FILE).unlink(missing_ok=True)  # the harness unlinks it first; this covers a failed start
        if not outcome.ok:
            self.notes.append(f"the run phase did not finish cleanly: {describe_outcome(outcome)}")
        results = {}
        for call in calls:
            results[call.id], seconds = read_call(call, io / "outputs", outcome, self.spec, self.backend,
                                                  self.facts, key)
            self.integrity_seconds += seconds
        return results

    def _write_job(self, calls: list[PlannedCall], io: Path, call_timeout: float | None) -> None:
        written: set[str] = set()
        job_calls = []
        for call in calls:
            names = []
            for name, array in call.case.make_inputs().items():
                file = f"{call.case.name}_{name}.npy"
                if file not in written:
                    np.save(io / "inputs" / file, array, allow_pickle=False)
                    written.add(file)
                names.append(file)
            job_calls.append({"id": call.id, "entry": call.entry, "inputs": names, "dtype": call.case.dtype,
                              "timed_repeats": call.timed_repeats, "warmup": call.warmup, "poison": "nan"})
        job = {"backend": self.backend.name, "device": self.backend.device, "module": self.module,
               "extension": self.extension, "calls": job_calls,
               "call_timeout_seconds": call_timeout or self.spec.call_timeout_seconds}
        (io / "job.json").write_text(json.dumps(job, indent=1), encoding="utf-8")

    def _watch_outputs(self, outputs: Path, calls: list[PlannedCall], span: tuple[float, float],
                       stop: threading.Event) -> None:
        total = len(calls)
        last = -1
        while not stop.wait(0.5):
            done = sum(1 for c in calls if (outputs / f"{c.id}.json").exists())
            if done != last and done < total:
                last = done
                self.progress(f"running {calls[done].label} [{done + 1}/{total}]",
                              span[0] + (span[1] - span[0]) * done / total)


def write_trace_key(io: Path) -> bytes:
    """A fresh master key per run phase: a trace line signed in one phase verifies in no other."""
    key = os.urandom(KEY_BYTES)
    fd = os.open(io / KEY_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(key)
        if os.geteuid() == 0:  # the sandbox's supervisor runs as the dedicated user: only it may read
            os.fchown(fh.fileno(), *sandbox_user())
    return key
