"""The call policy (grader/orchestration/policy.py) driven by a fake runner: which calls reach the sandbox when
an entry hangs or fails to load on its probe, and how many timing rounds a hardware backend runs. Real runs
cannot make these cases happen on demand (a hang costs a full time limit; there is no MLU card here).

The fake implements grader.sandbox.base.Runner and answers as the harness does: it reads /io/job.json and
writes outputs/<id>.json (+ <id>.npy) for each call, computing a right or wrong output from the inputs."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from bang_harness.protocol import KEY_FILE, ErrorKind
from signed_trace import write_signed

from grader.backends import EmuBackend, MluBackend
from grader.orchestration import GradeOptions, grade_submission
from grader.orchestration.environment import ResolvedBackend
from grader.orchestration.execute import Executor
from grader.orchestration.plan import plan_calls
from grader.orchestration.policy import PROBE_TIMEOUT_SECONDS, Ran, run_calls
from grader.orchestration.score_stages import Scorer
from grader.results import Verdict
from grader.sandbox.base import Limits, Mounts, Phase, RunOutcome
from grader.scoring.timing import MAX_ROUNDS
from grader.spec import REFERENCES, AssignmentSpec, SeedPlan, load_assignment

# (call as in job.json) -> the result JSON's fields; "output": "right" | "wrong" writes an output array.
Behaviour = Callable[[dict[str, Any]], dict[str, Any]]


def right(call: dict[str, Any]) -> dict[str, Any]:
    return {"ok": True, "output": "right", "device_us": [100.0] * max(1, call["timed_repeats"])}


class FakeRunner:
    """A Runner that runs nothing: each call's result is what `behave` says for it."""

    name = "fake"

    def __init__(self, spec: AssignmentSpec, behave: Behaviour) -> None:
        self.spec = spec
        self.behave = behave
        self.jobs: list[dict[str, Any]] = []  # every run phase's job.json, in order

    def run(self, phase: Phase, argv: list[str], mounts: Mounts, limits: Limits,
            env: dict[str, str] | None = None) -> RunOutcome:
        if phase is Phase.BUILD:
            (mounts.build / "build.json").write_text(json.dumps({"ok": True, "toolchain": "fake", "seconds": 0.1}))
            return RunOutcome(exit_code=0)
        job = json.loads((mounts.io / "job.json").read_text())
        self.jobs.append(job)
        for call in job["calls"]:
            meta = dict(self.behave(call))
            output = meta.pop("output", None)
            if output is not None:
                inputs = [np.load(mounts.io / "inputs" / name).astype(np.float64) for name in call["inputs"]]
                value = REFERENCES[self.spec.reference].compute(*inputs) + (0.0 if output == "right" else 1.0)
                value = value.astype(call["dtype"])
                np.save(mounts.io / "outputs" / f"{call['id']}.npy", value)
                if (mounts.io / KEY_FILE).exists():  # a backend with a launch trace (emu): sign one as its runtime
                    self._trace(mounts.io, call, inputs, value, job["device"], meta.get("device_us", [1.0])[0])
            (mounts.io / "outputs" / f"{call['id']}.json").write_text(json.dumps(meta))
        return RunOutcome(exit_code=0)

    @staticmethod
    def _trace(io: Path, call: dict[str, Any], inputs: list[np.ndarray], value: np.ndarray, device: str,
               time_us: float) -> None:
        (m, k), (_, n) = inputs[0].shape, inputs[1].shape
        size = value.dtype.itemsize
        launch = {"record": "launch", "kernel": "matmul_kernel", "dim": [1, 1, 1], "func_type": "BLOCK",
                  "device": device, "modelled_time_us": time_us, "cores_used": 1, "diagnostics": [],
                  "bytes_moved": {"GDRAM2NRAM": size * (m * k + k * n), "NRAM2GDRAM": size * m * n},
                  "builtin_counts": {}, "work": {"vector_elements": {}, "tensor_macs": m * n * k}}
        data = value.tobytes()
        output = {"record": "output", "bytes": len(data), "kernel_written": len(data),
                  "sha256": hashlib.sha256(data).hexdigest()}
        write_signed(io / "outputs" / f"{call['id']}.trace.jsonl", (io / KEY_FILE).read_bytes(), call["id"],
                     [launch, output])

    def ran(self, entry: str | None = None) -> list[str]:
        """Ids of the calls the sandbox was asked to run (of one entry)."""
        return [c["id"] for job in self.jobs for c in job["calls"] if entry is None or c["entry"] == entry]


SPEC = load_assignment("matmul")
ENTRIES = {"scalar_gdram": "good", "vector": "other"}
MLU = ResolvedBackend(name="mlu", device="0", impl=MluBackend())


def run_policy(tmp_path: Path, behave: Behaviour, backend: ResolvedBackend = MLU) -> tuple[FakeRunner, Ran]:
    runner = FakeRunner(SPEC, behave)
    seeds = SeedPlan.create("public", None)
    executor = Executor(runner, backend, SPEC, tmp_path, "ops", "my_ops_ext", tmp_path / "build",
                        lambda step, fraction: None, notes=[])
    calls = plan_calls(SPEC, seeds, ENTRIES, list(ENTRIES), backend.impl)
    return runner, run_calls(executor, Scorer(SPEC, backend), seeds, calls, tmp_path / "work")


def other_fails(meta: dict[str, Any]) -> Behaviour:
    return lambda call: meta if call["entry"] == "other" else right(call)


@pytest.mark.parametrize("meta", [
    {"ok": False, "error_kind": ErrorKind.TIMEOUT, "error": "the call took longer than 20 s"},
    {"ok": False, "error_kind": ErrorKind.LOAD_FAILURE, "error": "cannot import ops"},
    {"ok": False, "error_kind": ErrorKind.PYTHON_EXCEPTION, "error": "import failed", "during": "load"},
])
def test_an_entry_doomed_by_its_probe_runs_no_other_call(tmp_path, meta):
    runner, ran = run_policy(tmp_path, other_fails(meta))
    probe_job = runner.jobs[0]
    assert probe_job["call_timeout_seconds"] == PROBE_TIMEOUT_SECONDS
    assert {c["entry"] for c in probe_job["calls"]} == {"good", "other"}
    assert runner.ran("other") == [c["id"] for c in probe_job["calls"] if c["entry"] == "other"]  # only its probe
    others = [r for r in ran.judged.values() if r.entry == "other"]
    assert len(others) > 1 and not any(r.passed for r in others)  # every case recorded, none run
    assert all("not run: other() already failed on its first case" in r.message for r in others[1:])
    # The healthy entry is untouched: all its cases ran and passed, and its stage was timed.
    good = [c for c in ran.judged if ran.judged[c].entry == "good"]
    assert set(good) <= set(runner.ran("good")) and all(ran.judged[c].passed for c in good)
    assert ran.samples["scalar_gdram"] and not ran.samples["vector"]


def test_a_failure_that_dooms_nothing_leaves_the_other_calls_to_run(tmp_path):
    runner, ran = run_policy(tmp_path, other_fails({"ok": False, "error_kind": ErrorKind.PYTHON_EXCEPTION,
                                                    "error": "IndexError"}))
    correctness = [c for c, r in ran.judged.items() if r.entry == "other" and c.startswith("c")]
    assert len(correctness) > 1 and set(correctness) <= set(runner.ran("other"))
    assert not any("not run" in ran.judged[c].message for c in correctness)
    assert "vector" not in {c["entry"] for c in runner.jobs[-1]["calls"]}  # failing cases: its stage not timed
    assert ran.judged[correctness[0]].verdict == Verdict.RUNTIME_ERROR


def timed(samples_by_round: Callable[[int], list[float]], wrong_from: int = MAX_ROUNDS) -> Behaviour:
    """Right outputs; a timed call's device_us by round (0: the first timing, r<n>_...: round n)."""
    def behave(call: dict[str, Any]) -> dict[str, Any]:
        round_index = int(call["id"][1:].split("_")[0]) if call["id"].startswith("r") else 0
        if not call["timed_repeats"]:
            return right(call)
        return {"ok": True, "output": "right" if round_index < wrong_from else "wrong",
                "device_us": samples_by_round(round_index)}
    return behave


def rounds(runner: FakeRunner) -> int:
    return sum(1 for job in runner.jobs if all(c["id"].startswith("r") for c in job["calls"]))


def test_hardware_timing_stops_once_the_spread_settles(tmp_path):
    # Two samples cannot settle (fewer than five); one round of ten equal ones does.
    runner, ran = run_policy(tmp_path, timed(lambda r: [100.0, 400.0] if r == 0 else [100.0] * 10))
    assert rounds(runner) == 1
    assert len(ran.samples["scalar_gdram"]) == 12 and len(ran.samples["vector"]) == 12


def test_hardware_timing_that_never_settles_stops_at_max_rounds(tmp_path):
    runner, ran = run_policy(tmp_path, timed(lambda r: [100.0, 300.0] * 5))
    assert rounds(runner) == MAX_ROUNDS - 1
    assert len(ran.samples["scalar_gdram"]) == 10 * MAX_ROUNDS
    retimed = [c for c in runner.ran() if c.startswith("r")]
    assert retimed[0].startswith("r1_") and retimed[-1].startswith(f"r{MAX_ROUNDS - 1}_")
    assert all(c["warmup"] == 1 and c["timed_repeats"] == MluBackend.timed_repeats
               for job in runner.jobs for c in job["calls"] if c["id"].startswith("r"))


def test_a_wrong_output_in_a_timing_round_adds_no_samples(tmp_path):
    runner, ran = run_policy(tmp_path, timed(lambda r: [100.0, 300.0] * 5, wrong_from=2))
    assert rounds(runner) == MAX_ROUNDS - 1  # still unsettled: the rounds go on
    assert len(ran.samples["scalar_gdram"]) == 10 * 2  # the first timing and round 1 only


def test_the_emulator_is_timed_once(tmp_path):
    # Modelled time is deterministic: one timed call, no rounds, whatever the in-process clock claims.
    emu = ResolvedBackend(name="emu", device=EmuBackend.default_device, impl=EmuBackend())
    runner, ran = run_policy(tmp_path, timed(lambda r: [100.0, 300.0] * 5), backend=emu)
    assert all(r.passed for r in ran.judged.values()), [r.message for r in ran.judged.values() if not r.passed]
    perf = [c for c in runner.jobs[-1]["calls"] if c["timed_repeats"]]
    assert len(perf) == 2 and all(c["warmup"] == 0 and c["timed_repeats"] == 1 for c in perf)
    assert rounds(runner) == 0


def test_grade_submission_uses_the_runner_in_the_options(tmp_path):
    sub = tmp_path / "sub"
    files = {"mlu/mm.mlu": "__mlu_global__ void k() {}\n",
             "cpp/bind.cpp": 'PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("mm", &mm); }\n',
             "ops.py": "import my_ops_ext\n\ndef matmul(a, b):\n    return my_ops_ext.mm(a, b)\n"}
    for name, text in files.items():
        (sub / name).parent.mkdir(parents=True, exist_ok=True)
        (sub / name).write_text(text)
    hang = {"ok": False, "error_kind": ErrorKind.TIMEOUT, "error": "hung"}
    runner = FakeRunner(SPEC, lambda call: hang)
    result = grade_submission(sub, GradeOptions(assignment="matmul", runner=runner))
    assert result.sandbox == "fake" and result.build is not None and result.build.ok
    assert result.verdict == Verdict.TIMEOUT and len(runner.jobs) == 1  # the probe, then nothing
