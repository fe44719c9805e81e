"""One place where tests build what the grader's parts hand each other: results documents (`grade_result`),
submission folders (`write_tree`, `matmul_submission`) and a fake runner (`FakeRunner`). A field added to
GradeResult, or a change to what a runner answers, is made here once, not at every test that needs one.

FakeRunner implements grader.sandbox.base.Runner and answers as the harness does: it reads /io/job.json and
writes outputs/<id>.json (+ <id>.npy) for each call, computing a right or wrong output from the inputs. It can also
be started (StartingRunner) and then plays bang_harness.session's keeper: one sandbox for the rounds, each job
taken only under the host's MAC, signed with that round's key, ended with the keeper's done mark."""

from __future__ import annotations

import hashlib
import itertools
import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from bang_harness.protocol import (
    DONE_FILE,
    JOB_FILE,
    JOB_MAC_FILE,
    KEY_FILE,
    REPLAY_STDERR,
    REPLAYS_DIR,
    ROUNDS_DIR,
    ExitCode,
    KernelRecord,
    KernelWindow,
    done_mark,
    job_mac,
    replay_done_mark,
    replay_key,
)
from signed_trace import write_signed

from grader.orchestration.replay_sandbox import STAGED_SHARE
from grader.results import GradeResult, Seeds, Verdict, Versions
from grader.sandbox.base import Limits, Mounts, Phase, RunOutcome, Started
from grader.spec import REFERENCES, AssignmentSpec

# What every results document must carry, as a plain emulator run of matmul would have it.
RESULT_DEFAULTS: dict[str, Any] = {
    "assignment": "matmul", "submission_path": "/nonexistent/submission", "submission_hash": "h", "backend": "emu",
    "device_profile": "mlu370-x8", "time_source": "modelled", "sandbox": "docker", "verdict": Verdict.PASSED,
    "score": 0.0, "max_score": 100.0, "seeds": Seeds(mode="public", master_digest="d"),
    "versions": Versions(grader="test"),
}


def grade_result(**fields: Any) -> GradeResult:
    """A GradeResult: RESULT_DEFAULTS with `fields` over them (any field of the model)."""
    return GradeResult(**{**RESULT_DEFAULTS, **fields})


def write_tree(root: Path, files: dict[str, str]) -> Path:
    """`root` holding `files` ({relative path: text}), folders made as needed; returns `root`."""
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


# A matmul submission in the handout's layout; nothing here compiles (for FakeRunner, and for steps before a build).
MATMUL_FILES = {"mlu/mm.mlu": "__mlu_global__ void k() {}\n",
                "cpp/bind.cpp": 'PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("mm", &mm); }\n',
                "ops.py": "import my_ops_ext\n\ndef matmul(a, b):\n    return my_ops_ext.mm(a, b)\n"}


def matmul_submission(root: Path) -> Path:
    return write_tree(root, MATMUL_FILES)


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
        self.jobs: list[dict[str, Any]] = []  # every round's job.json, in order
        self.sandboxes = 0  # run-phase sandboxes started
        self.replays = 0  # replay sandboxes started (emu)
        self.kill_reason = self.replay_kill_reason = ""  # why the host last stopped a run / a replay sandbox
        self.replay_fails = False  # the replay harness fails by itself (ExitCode.REPLAY_FAILED)
        self.budgets: set[tuple[int, int, int]] = set()  # (disk, file size, memory) of every run sandbox and replay
        self.on_replay: Callable[[], None] | None = None  # called as each replay starts (from its thread)
        self.replay_sandboxes = 0  # replay sandboxes started to serve replays in turn (replay_session)
        self.replay_ends_sandbox = False  # the replay's sandbox dies under it (no done mark)
        self.replay_sandbox_lives: int | None = None  # a replay sandbox is killed after this many replays

    def run(self, phase: Phase, argv: list[str], mounts: Mounts, limits: Limits,
            env: dict[str, str] | None = None) -> RunOutcome:
        if phase is Phase.BUILD:
            (mounts.build / "build.json").write_text(json.dumps({"ok": True, "toolchain": "fake", "seconds": 0.1}))
            return RunOutcome(exit_code=0)
        self.budgets.add((limits.tmpfs_bytes, limits.file_size_bytes, limits.memory_bytes))
        if argv[-1] == "replay":
            return self._replay(mounts.io)
        self.sandboxes += 1
        return self._answer(mounts.io, json.loads((mounts.io / "job.json").read_text())) or RunOutcome(0)

    def start(self, phase: Phase, argv: list[str], mounts: Mounts, limits: Limits,
              env: dict[str, str] | None = None) -> Started:
        """The keeper's side of the rounds (bang_harness.session), or of the replays (replay_session), in a thread."""
        assert phase is Phase.RUN and not (mounts.io / "job.json").exists()
        master = (mounts.io / KEY_FILE).read_bytes()
        (mounts.io / KEY_FILE).unlink()
        killed = threading.Event()

        def kill(reason: str) -> None:
            setattr(self, "replay_kill_reason" if argv[-1] == "replay" else "kill_reason", reason)
            killed.set()

        if argv[-1] == "replay":
            self.replay_sandboxes += 1
            # each replay's budget; the sandbox keeps room for one replay's staged inputs besides (replay_sandbox)
            self.budgets.add((limits.tmpfs_bytes // STAGED_SHARE, limits.file_size_bytes, limits.memory_bytes))
            return Started(lambda: self._replay_keeper(mounts.io, master, killed), kill)
        self.sandboxes += 1
        self.budgets.add((limits.tmpfs_bytes, limits.file_size_bytes, limits.memory_bytes))

        def keeper() -> RunOutcome:
            for index in itertools.count():
                round_dir = mounts.io / ROUNDS_DIR / str(index)
                while not (round_dir / JOB_FILE).exists():
                    if killed.wait(0.01):
                        return RunOutcome(exit_code=None, signal=9, notes=[self.kill_reason])
                text = (round_dir / JOB_FILE).read_bytes()
                assert (round_dir / JOB_MAC_FILE).read_text() == job_mac(master, index, text)
                job = json.loads(text)
                if any(self.behave(call).get("hangs") for call in job["calls"]):
                    self.jobs.append(job)
                    killed.wait()  # until the host's round deadline stops the sandbox
                    return RunOutcome(exit_code=None, signal=9, notes=[self.kill_reason])
                assert "trace_key" not in job  # the workers get no key: nothing they sign is believed
                ended = self._answer(round_dir, job)
                if ended is not None:
                    return ended
                (round_dir / "outputs" / DONE_FILE).write_text(done_mark(master, index))
            raise AssertionError("unreachable")

        return Started(keeper, kill)

    def _replay_keeper(self, io: Path, master: bytes, killed: threading.Event) -> RunOutcome:
        """bang_harness.replay_session: each replay the host hands in, under its own key, then its done mark."""
        for index in itertools.count():
            folder = io / REPLAYS_DIR / str(index)
            while not (folder / JOB_FILE).exists():
                if killed.wait(0.01):
                    return RunOutcome(exit_code=None, signal=9, notes=[self.replay_kill_reason])
            text = (folder / JOB_FILE).read_bytes()
            assert (folder / JOB_MAC_FILE).read_text() == job_mac(master, index, text)
            assert text == (folder / "replay.json").read_bytes() and not (io / KEY_FILE).exists()
            outcome = self._replay(folder, replay_key(master, index))
            if outcome.exit_code not in (0, ExitCode.REPLAY_FAILED):
                return outcome  # the replay's sandbox ended
            (folder / "outputs" / REPLAY_STDERR).write_text(outcome.stderr_tail)
            (folder / "outputs" / DONE_FILE).write_text(replay_done_mark(master, index, outcome.exit_code == 0))
            if self.replay_sandbox_lives is not None and index + 1 >= self.replay_sandbox_lives:
                return RunOutcome(exit_code=None, signal=9)  # killed between two replays
        raise AssertionError("unreachable")

    def _answer(self, io: Path, job: dict[str, Any]) -> RunOutcome | None:
        """Writes each call's result; a RunOutcome when a behaviour ends the sandbox (`"ends_sandbox"`). On the
        emulator the worker also journals what it did (here: the calls, for _replay to compute again)."""
        self.jobs.append(job)
        if job["backend"] == "emu" and job["calls"]:
            journal = [{"call": c, "shapes": [list(np.load(io / "inputs" / name).shape) for name in c["inputs"]]}
                       for c in job["calls"]]
            (io / "outputs" / f"{job['calls'][0]['id']}.journal").write_text(json.dumps(journal))
        for call in job["calls"]:
            meta = dict(self.behave(call))
            meta.pop("replay", None)
            if meta.pop("ends_sandbox", False):  # the process dies with nothing written (a lost call)
                return RunOutcome(exit_code=None, signal=9)
            output = meta.pop("output", None)
            if output is not None:
                inputs = [np.load(io / "inputs" / name).astype(np.float64) for name in call["inputs"]]
                value = REFERENCES[self.spec.reference].compute(*inputs) + (0.0 if output == "right" else 1.0)
                value = value.astype(call["dtype"])
                np.save(io / "outputs" / f"{call['id']}.npy", value)
                if job["backend"] == "emu":  # the run's own trace, unsigned: only compared with the replay's
                    self._trace(io / "outputs", bytes(32), call, inputs, value, job["device"],
                                meta.get("device_us", [1.0])[0])
                elif job["backend"] == "mlu":  # the timing driver's record of each invocation
                    self._windows(io / "outputs" / f"{call['id']}.trace.jsonl", call, meta.get("device_us", []))
            (io / "outputs" / f"{call['id']}.json").write_text(json.dumps(meta))
        return None

    def _replay(self, io: Path, key: bytes | None = None) -> RunOutcome:
        """The trusted replay (bang_harness/replay.py): each journaled call again, on the host's twin inputs,
        its trace signed with the replay's key (`key`: a replay sandbox's keeper hands it; else /io's key file)."""
        self.replays += 1
        if self.on_replay is not None:
            self.on_replay()
        if self.replay_fails:
            return RunOutcome(exit_code=ExitCode.REPLAY_FAILED, stderr_tail="replay-one: ImportError")
        if self.replay_ends_sandbox:
            return RunOutcome(exit_code=None, signal=9, stderr_tail="")
        key = key if key is not None else (io / KEY_FILE).read_bytes()
        device = json.loads((io / "replay.json").read_text())["device"]
        for journal in sorted((io / "journals").glob("*.journal")):
            for entry in json.loads(journal.read_text()):
                call = entry["call"]
                meta = self.behave(call)
                if meta.get("output") is None:
                    continue
                inputs = [np.fromfile(io / "replay-inputs" / f"{call['id']}.{k}.bin", dtype=call["dtype"])
                          .reshape(shape).astype(np.float64) for k, shape in enumerate(entry["shapes"])]
                replayed = meta.get("replay", meta["output"])  # what the kernels compute on the twin's inputs
                value = REFERENCES[self.spec.reference].compute(*inputs) + (0.0 if replayed == "right" else 1.0)
                value = value.astype(call["dtype"])
                (io / "outputs" / f"{call['id']}.out.bin").write_bytes(value.tobytes())
                self._trace(io / "outputs", key, call, inputs, value, device, meta.get("device_us", [1.0])[0])
                (io / "outputs" / f"{call['id']}.replay.json").write_text(
                    json.dumps({"call": call["id"], "ok": True, "sealed": True, "error": ""}))
        return RunOutcome(exit_code=0)

    @staticmethod
    def _trace(outputs: Path, key: bytes, call: dict[str, Any], inputs: list[np.ndarray], value: np.ndarray,
               device: str, time_us: float) -> None:
        (m, k), (_, n) = inputs[0].shape, inputs[1].shape
        size = value.dtype.itemsize
        launch = {"record": "launch", "kernel": "matmul_kernel", "dim": [1, 1, 1], "func_type": "BLOCK",
                  "device": device, "modelled_time_us": time_us, "cores_used": 1, "diagnostics": [],
                  "bytes_moved": {"GDRAM2NRAM": size * (m * k + k * n), "NRAM2GDRAM": size * m * n},
                  "builtin_counts": {}, "work": {"vector_elements": {}, "tensor_macs": m * n * k}}
        data = value.tobytes()
        output = {"record": "output", "bytes": len(data), "kernel_written": len(data),
                  "sha256": hashlib.sha256(data).hexdigest()}
        write_signed(outputs / f"{call['id']}.trace.jsonl", key, call["id"], [launch, output])

    @staticmethod
    def _windows(path: Path, call: dict[str, Any], device_us: list[float]) -> None:
        """As bang_harness.mlu_driver writes them: every invocation ran the extension's kernel (CNPAPI)."""
        warmup, repeats = call["warmup"], call["timed_repeats"]
        invocations = 1 + warmup + repeats - (1 if warmup == 0 and repeats else 0)
        timed = [device_us[i % len(device_us)] for i in range(repeats)] if device_us else [100.0] * repeats
        with path.open("ab") as fh:
            for index, time_us in enumerate([100.0] * (invocations - repeats) + timed):
                # The kernel busy for the whole window: the host checks the time against the work's floor.
                kernel = (KernelRecord("_Z13matmul_kernelPKfS0_Pfiii", 0, round(time_us * 1000), 1),)
                fh.write(KernelWindow(index, time_us, kernel).to_line())

    def ran(self, entry: str | None = None) -> list[str]:
        """Ids of the calls the sandbox was asked to run (of one entry)."""
        return [c["id"] for job in self.jobs for c in job["calls"] if entry is None or c["entry"] == entry]
