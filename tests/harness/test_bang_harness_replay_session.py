"""The replay sandbox's keeper (bang_harness.replay_session) driven by the host's ReplaySandbox
(grader/orchestration/replay_sandbox.py) through ProcessRunner: what it refuses before any replay runs. The
replays themselves, in docker, are the e2e tests' (tests/e2e/test_wasm_engine.py) and the pipeline policy's
(tests/test_pipeline_policy.py, the fake keeper)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from bang_harness.protocol import KEY_FILE, REPLAYS_DIR, ExitCode

from grader.orchestration.replay import fresh_io, write_trace_key
from grader.orchestration.replay_sandbox import ReplaySandbox
from grader.sandbox.base import Limits, Mounts
from grader.sandbox.process import ProcessRunner


def sandbox(space, tmp_path: Path) -> ReplaySandbox:
    io = tmp_path / "io-replays"
    io.mkdir()
    master = write_trace_key(io)
    return ReplaySandbox(ProcessRunner(), ["python3", "-m", "bang_harness", "replay"],
                         Mounts(space.submission, space.build, io), Limits(wall_seconds=300), {}, master)


def staged(io: Path) -> Path:
    fresh_io(io)
    (io / "replay.json").write_text(json.dumps({"device": "mlu370-x8", "calls_per_journal": {}}))
    return io


def test_a_replay_without_the_hosts_mac_is_not_run_and_its_sandbox_is_not_reused(host_run, tmp_path):
    replays = sandbox(host_run, tmp_path)
    replays.master = os.urandom(32)  # the job's MAC is then not under the key the keeper took
    try:
        done = replays.replay(staged(tmp_path / "r0"), 60)
    finally:
        replays.close()
    assert done.outcome.exit_code == ExitCode.JOB_UNREADABLE
    assert "does not carry the host's MAC" in done.outcome.stderr_tail
    assert not replays.alive
    assert not (replays.mounts.io / KEY_FILE).exists()  # the keeper took the master key first
    assert list((replays.mounts.io / REPLAYS_DIR).iterdir()) == []  # the replay's folder is gone, read or not
    assert list((tmp_path / "r0" / "outputs").iterdir()) == []  # nothing of a replay that never ran
