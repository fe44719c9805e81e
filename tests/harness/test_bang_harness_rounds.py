"""Rounds in one run-phase sandbox (bang_harness.session: keeper + fork server) driven by the host's
RoundSandbox (grader/orchestration/rounds.py) through ProcessRunner, against the prebuilt cpp-only extension."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch
from bang_harness.protocol import DONE_FILE, KEY_FILE, done_mark
from harness_workspace import write_tree

from grader.orchestration.replay import write_trace_key
from grader.orchestration.rounds import RoundSandbox
from grader.sandbox.base import Limits, Mounts
from grader.sandbox.process import ProcessRunner

pytestmark = pytest.mark.slow

X = np.linspace(-6.0, 6.0, 1001, dtype=np.float32)

LINGERING_OPS = """
import os, subprocess, sys
import torch
import my_ops_ext

def sigmoid(x):
    return my_ops_ext.host_sigmoid(x)

def leaves_a_process(x):
    # A daemon of the student's: a new session, its parent gone, asleep long past the round.
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
    return torch.tensor([float(child.pid)])

def key_in_reach(x):
    # The master key file is gone; the key pipe is closed; nothing of the keeper is readable.
    found = [os.path.exists(os.path.join(os.environ.get("BANG_GRADER_IO", "/io"), "trace.key")),
             "BANG_EMU_KEY_FD" in os.environ]
    return torch.tensor([float(f) for f in found])
"""


def sandbox(space, tmp_path: Path) -> RoundSandbox:
    io = tmp_path / "io-rounds"
    io.mkdir()
    master = write_trace_key(io)
    return RoundSandbox(ProcessRunner(), ["python3", "-m", "bang_harness", "run"],
                        Mounts(space.submission, space.build, io), Limits(wall_seconds=300, cpus=2), {}, master)


def job(calls: list[dict]) -> object:
    def make(inputs: Path) -> dict:
        np.save(inputs / "x.npy", X)
        return {"backend": "emu", "device": "mlu370-x8", "module": "ops", "extension": "my_ops_ext",
                "calls": calls, "call_timeout_seconds": 60}
    return make


def test_rounds_share_one_sandbox_and_nothing_of_a_round_outlives_it(host_extension, tmp_path):
    submission = write_tree(tmp_path / "submission", {"ops.py": LINGERING_OPS})
    space = host_extension
    space_copy = type(space)(tmp_path, submission)
    space_copy.build = space.build
    rounds = sandbox(space_copy, tmp_path)
    try:
        first = rounds.run_round(job([{"id": "a", "entry": "sigmoid", "inputs": ["x.npy"]},
                                      {"id": "daemon", "entry": "leaves_a_process", "inputs": ["x.npy"]}]), 120)
        assert first.sandbox_alive and first.outcome.ok, first.outcome
        assert not (rounds.mounts.io / KEY_FILE).exists()  # the keeper took the master key before anything ran
        assert (first.io / "outputs" / DONE_FILE).read_text() == done_mark(rounds.master, 0)
        expected = torch.sigmoid(torch.from_numpy(X).double()).numpy()
        np.testing.assert_allclose(np.load(first.io / "outputs" / "a.npy"), expected, rtol=1e-6, atol=1e-7)
        daemon = int(np.load(first.io / "outputs" / "daemon.npy")[0])
        assert daemon > 0 and not Path(f"/proc/{daemon}").exists()  # swept before the done mark

        second = rounds.run_round(job([{"id": "b", "entry": "sigmoid", "inputs": ["x.npy"]},
                                       {"id": "peek", "entry": "key_in_reach", "inputs": ["x.npy"]}]), 120)
        assert second.sandbox_alive
        assert np.load(second.io / "outputs" / "b.npy").shape == X.shape
        assert np.load(second.io / "outputs" / "peek.npy").tolist() == [0.0, 0.0]
    finally:
        rounds.close()
    assert rounds.started is not None and rounds.started.wait(0) is not None  # stopped


def test_a_job_without_the_hosts_mac_is_not_run(host_run, tmp_path):
    rounds = sandbox(host_run, tmp_path)
    rounds.master = os.urandom(32)  # the job's MAC is then not under the key the keeper took
    try:
        done = rounds.run_round(job([{"id": "a", "entry": "sigmoid", "inputs": ["x.npy"]}]), 120)
    finally:
        rounds.close()
    assert not done.sandbox_alive and done.outcome.exit_code == 2
    assert "does not carry the host's MAC" in done.outcome.stderr_tail
    assert not (done.io / "outputs" / "a.json").exists()
