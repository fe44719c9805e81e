"""Trusted replay of a round (DESIGN.md "Threat model"): the host's answer to "did the kernels do this?".

Everything in the run sandbox is the student's, the emulator runtime and its counters included, so nothing it
signs or counts can decide a grade. The run's worker processes journal what they did to the device instead
(allocations, host writes, copies, launches with their sites and argument bytes; bang_emu runtime/journal.cpp).
After the round, a sandbox of its own -- no student host code, the run's processes gone, the twin inputs never
where the run could see them -- replays each journal against the device module (the .mlu files compiled again,
every function checked, nothing run at load), with the *twin* of each call's case (same shapes, a seed derived
from the case's) in place of every input the run uploaded. Work, modelled time, kernel-written bytes and the
output the host grades come from that replay, signed with a key only the replay sandbox held.

A kernel computes the twin's answer from the twin's inputs; a wrapper that computed the output on the host, a
kernel that replays a cached answer, or records rewritten in the run's process do not.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from bang_harness.protocol import (
    JOURNAL_SUFFIX,
    KEY_BYTES,
    KEY_FILE,
    REPLAY_INPUTS,
    REPLAY_JOURNALS,
    REPLAY_OUTPUT_SUFFIX,
    REPLAY_SECONDS_PER_CALL,
    REPLAY_STATUS_SUFFIX,
    ExitCode,
)

from grader.i18n import _
from grader.orchestration.environment import ResolvedBackend
from grader.orchestration.plan import PlannedCall
from grader.sandbox.base import Limits, Mounts, Phase, Runner, RunOutcome, SandboxError
from grader.sandbox.capped import UntrustedFileError, read_bytes_capped, read_json_capped
from grader.sandbox.layout import sandbox_user
from grader.spec import ConcreteCase

JOURNAL_MAX_BYTES = (1 << 30) + (1 << 20)  # the runtime stops a journal at 1 GiB (runtime/journal.h)
REPLAY_JOB = "replay.json"  # bang_harness/replay.py
# Drawn once per grader process and never written anywhere a sandbox reads: the twins cannot be computed
# from a case's seed (public with the public master seed) by the run they check.
TWIN_SALT = secrets.token_bytes(32)


@dataclass
class ReplayedCall:
    """What the replay says of one call: its status, and the output it computed from the twin's inputs."""

    twin: ConcreteCase
    output: np.ndarray | None = None
    error: str | None = None  # why the replay could not stand for the call (None: it did)


@dataclass
class RunRound:
    """A round the run sandbox finished: its calls, the folder its outputs (and journals) are in, its outcome."""

    calls: list[PlannedCall]
    outputs: Path
    outcome: RunOutcome
    call_timeout: float


@dataclass
class ReplayRound:
    outputs: Path  # the replay's outputs: <call>.trace.jsonl (signed with `key`), .out.bin, .replay.json
    key: bytes
    outcome: RunOutcome | None
    calls: dict[str, ReplayedCall] = field(default_factory=dict)


def journals_by_worker(calls: list[PlannedCall], run_outputs: Path) -> dict[str, int]:
    """The round's journals (named by each worker's first call) -> how many of the round's calls each covers."""
    ids = [call.id for call in calls]
    firsts = [i for i, call_id in enumerate(ids) if (run_outputs / f"{call_id}{JOURNAL_SUFFIX}").is_file()]
    return {f"{ids[i]}{JOURNAL_SUFFIX}": (firsts[n + 1] if n + 1 < len(firsts) else len(ids)) - i
            for n, i in enumerate(firsts)}


def copy_untrusted(source: Path, target: Path, root: Path, cap: int) -> bool:
    """Copies a file the run sandbox wrote, refusing links and anything over the cap."""
    try:
        data = read_bytes_capped(source, cap, root=root)
    except (UntrustedFileError, OSError):
        return False
    target.write_bytes(data)
    return True


def write_trace_key(io: Path) -> bytes:
    """A fresh key for one sandbox, readable only by the sandbox's user: a run sandbox's keeper verifies the
    host's jobs with it; the replay signs its traces with it."""
    key = os.urandom(KEY_BYTES)
    fd = os.open(io / KEY_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(key)
        if os.geteuid() == 0:  # the sandbox's supervisor runs as the dedicated user: only it may read
            os.fchown(fh.fileno(), *sandbox_user())
    return key


def replay_round(runner: Runner, backend: ResolvedBackend, rounds: list[RunRound], io: Path, submission: Path,
                 build_dir: Path, tmpfs_bytes: int = Limits().tmpfs_bytes) -> ReplayRound:
    """Replays the rounds' journals in a sandbox of its own (see the module's docstring); `tmpfs_bytes` is the
    run rounds' own disk budget."""
    shutil.rmtree(io, ignore_errors=True)
    (io / REPLAY_JOURNALS).mkdir(parents=True)
    (io / REPLAY_INPUTS).mkdir()
    (io / "outputs").mkdir()
    copied: dict[str, int] = {}
    seconds = 60.0
    for ran in rounds:
        journals = journals_by_worker(ran.calls, ran.outputs)
        for name, calls in journals.items():
            if copy_untrusted(ran.outputs / name, io / REPLAY_JOURNALS / name, ran.outputs.parent, JOURNAL_MAX_BYTES):
                copied[name] = calls
                seconds += min(REPLAY_SECONDS_PER_CALL, ran.call_timeout) * calls
            (ran.outputs / name).unlink(missing_ok=True)  # out of the run sandbox's capped /io
    calls = [call for ran in rounds for call in ran.calls]
    twins = {call.id: call.case.replay_twin(TWIN_SALT) for call in calls}
    for call in calls:
        for index, array in enumerate(twins[call.id].make_inputs().values()):
            (io / REPLAY_INPUTS / f"{call.id}.{index}.bin").write_bytes(np.ascontiguousarray(array).tobytes())
    (io / REPLAY_JOB).write_text(json.dumps({"device": backend.device, "calls_per_journal": copied}))
    key = write_trace_key(io)
    outcome = None
    if copied:
        outcome = runner.run(Phase.RUN, backend.impl.replay_argv(), Mounts(submission=submission.resolve(),
                                                                          build=build_dir, io=io),
                             Limits(wall_seconds=seconds, tmpfs_bytes=tmpfs_bytes), env=dict(backend.env))
    if outcome is not None and outcome.exit_code == ExitCode.REPLAY_FAILED:
        raise SandboxError(_("the grader's replay of the kernels failed: {tail}").format(
            tail=(outcome.stderr_tail or "")[-1500:]))
    replay = ReplayRound(outputs=io / "outputs", key=key, outcome=outcome)
    for call in calls:
        replay.calls[call.id] = read_replayed(call, twins[call.id], replay.outputs, outcome)
    return replay


def read_replayed(call: PlannedCall, twin: ConcreteCase, outputs: Path, outcome: RunOutcome | None) -> ReplayedCall:
    done = ReplayedCall(twin=twin)
    try:
        status = read_json_capped(outputs / f"{call.id}{REPLAY_STATUS_SUFFIX}", root=outputs.parent)
    except (UntrustedFileError, OSError):
        status = None
    if not isinstance(status, dict):
        why = (_("the run left no device journal for this call") if outcome is None
               else _("the replay did not reach this call"))
        done.error = why
        return done
    if status.get("ok") is not True:
        done.error = str(status.get("error") or _("the replay failed"))[:2000]
        return done
    if status.get("sealed") is not True:
        done.error = _("the run never marked the call's output")
        return done
    dtype = np.dtype(call.case.dtype)
    size = int(np.prod(call.case.output_shape, dtype=np.int64)) * dtype.itemsize
    try:
        data = read_bytes_capped(outputs / f"{call.id}{REPLAY_OUTPUT_SUFFIX}", size, root=outputs.parent)
    except (UntrustedFileError, OSError) as exc:
        done.error = _("the replayed output could not be read: {error}").format(error=exc)
        return done
    if len(data) != size:
        done.error = _("the replayed output has {got} bytes, the case's output {want}").format(got=len(data),
                                                                                           want=size)
        return done
    done.output = np.frombuffer(data, dtype=dtype).reshape(call.case.output_shape)
    return done
