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
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from bang_harness.protocol import (
    ENGINE_RECORD_SUFFIX,
    ENGINES,
    JOURNAL_SUFFIX,
    KEY_BYTES,
    KEY_FILE,
    REPLAY_ENGINE_ENV,
    REPLAY_INPUTS,
    REPLAY_JOURNALS,
    REPLAY_OUTPUT_SUFFIX,
    REPLAY_SECONDS_PER_CALL,
    REPLAY_STATUS_SUFFIX,
    WASM_NOTE_MAX_BYTES,
    ExitCode,
)

from grader.i18n import _
from grader.orchestration.environment import ResolvedBackend
from grader.orchestration.plan import PlannedCall
from grader.orchestration.replay_sandbox import ReplaySandboxes, as_in_own_sandbox
from grader.orchestration.wasm_engine import stage_engine
from grader.sandbox.base import Limits, Mounts, Phase, Runner, RunOutcome, SandboxError
from grader.sandbox.capped import UntrustedFileError, copy_capped, read_bytes_capped, read_json_capped
from grader.sandbox.layout import sandbox_user
from grader.spec import ConcreteCase
from grader.spec.models import DeviceOpsSpec

JOURNAL_CAP_BYTES = 1 << 30  # the runtime stops a journal here, ending it with an overflow record (runtime/journal.h)
JOURNAL_MAX_BYTES = JOURNAL_CAP_BYTES + (1 << 20)
OVERFLOW_RECORD = bytes([10, 0, 0, 0, 0])  # JournalKind::kOverflow, no payload: the journal's last record at its cap
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
    over_budget: bool = False  # the error is the run's journal running into a budget of the sandbox (error says which)
    not_kernel: str | None = None  # a torch operator the assignment does not allow wrote into the output (which one)
    host_data: str | None = None  # host code's upload reached the output (its line, where the shim saw one)
    engine: str = ""  # the engine that replayed it ("wasm", "native"; "" when no record says)
    native_why: str = ""  # why it was replayed natively where the WebAssembly engine was asked for
    twin_check: Any = field(default=None, repr=False)  # judge.twin_check's outcome, kept (a checks.CheckOutcome)


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
    staged: Staged | None = field(default=None, repr=False)  # what it replayed, for a second opinion


@dataclass
class Staged:
    """A replay's inputs as the host laid them out in its /io: the journals, the twins and the job, kept so that the
    same journals can be replayed again on the same twins (second_opinion)."""

    io: Path
    calls: list[PlannedCall]
    twins: dict[str, ConcreteCase]
    journal_of: dict[str, str]  # call id -> its journal's name
    over: dict[str, str]  # call id -> the budget its journal ran into
    seconds: float
    runner: Runner
    backend: ResolvedBackend
    submission: Path
    build_dir: Path
    budget: Limits
    any_journal: bool = True  # False: no round left a journal, no replay sandbox is started


def journals_by_worker(calls: list[PlannedCall], run_outputs: Path) -> dict[str, int]:
    """The round's journals (named by each worker's first call) -> how many of the round's calls each covers."""
    ids = [call.id for call in calls]
    firsts = [i for i, call_id in enumerate(ids) if (run_outputs / f"{call_id}{JOURNAL_SUFFIX}").is_file()]
    return {f"{ids[i]}{JOURNAL_SUFFIX}": (firsts[n + 1] if n + 1 < len(firsts) else len(ids)) - i
            for n, i in enumerate(firsts)}


def copy_untrusted(source: Path, target: Path, root: Path, cap: int) -> bool:
    """Copies a file the run sandbox wrote, refusing links and anything over the cap."""
    try:
        copy_capped(source, target, cap, root=root)
    except (UntrustedFileError, OSError):
        target.unlink(missing_ok=True)
        return False
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


def journal_budget(journal: Path, budget: Limits) -> str | None:
    """Which budget of the run sandbox a journal (the host's copy) ran into, for the calls it could not carry
    (None: none). Past the file size limit a write fails (EFBIG) and the journal ends inside a record; at its own
    cap the runtime ends it with an overflow record. Either way the calls after that point cannot be replayed,
    and the student (or a seed sweep sharing one journal between seeds) must read which limit it was, not a
    broken record."""
    try:
        size = journal.lstat().st_size
        with journal.open("rb") as fh:
            fh.seek(max(0, size - len(OVERFLOW_RECORD)))
            tail = fh.read()
    except OSError:
        return None
    if size >= budget.file_size_bytes:
        limit = _("the sandbox's file size limit ({mib} MiB)").format(mib=budget.file_size_bytes >> 20)
    elif size > JOURNAL_CAP_BYTES - (1 << 20) and tail == OVERFLOW_RECORD:
        limit = _("the journal's cap ({mib} MiB)").format(mib=JOURNAL_CAP_BYTES >> 20)
    else:
        return None
    return _("the run's device journal (what the process did to the device, which the grader replays) reached "
             "{limit}: the calls after that point could not be replayed; upload less from host code").format(
                 limit=limit)


def stage_replay(runner: Runner, backend: ResolvedBackend, rounds: list[RunRound], io: Path, submission: Path,
                 build_dir: Path, budget: Limits | None = None,
                 device_ops: dict[str, list[str]] | None = None) -> Staged:
    """A replay of the rounds' journals laid out (see the module's docstring; replay_staged runs it): the journals
    taken out of the run's folders (which the next round's processes could write) into the replay's /io, beside
    the twins' inputs and the job. `budget` is the run rounds' own limits (disk, file size, memory; the wall limit
    is the replay's own); `device_ops` the torch operators the replay runs itself (DeviceOpsSpec.model_dump();
    None: the default). Nothing is run."""
    budget = budget or Limits()
    fresh_io(io)
    copied: dict[str, int] = {}
    over: dict[str, str] = {}  # call id -> the budget its journal ran into
    journal_of: dict[str, str] = {}
    seconds = 60.0
    for ran in rounds:
        journals = journals_by_worker(ran.calls, ran.outputs)
        ids = [call.id for call in ran.calls]
        for name, calls in journals.items():
            first = ids.index(name.removesuffix(JOURNAL_SUFFIX))
            journal_of.update(dict.fromkeys(ids[first:first + calls], name))
            if copy_untrusted(ran.outputs / name, io / REPLAY_JOURNALS / name, ran.outputs.parent, JOURNAL_MAX_BYTES):
                copied[name] = calls
                seconds += min(REPLAY_SECONDS_PER_CALL, ran.call_timeout) * calls
                if (limit := journal_budget(io / REPLAY_JOURNALS / name, budget)) is not None:
                    over.update(dict.fromkeys(ids[first:first + calls], limit))
            (ran.outputs / name).unlink(missing_ok=True)  # out of the run sandbox's capped /io
    calls = [call for ran in rounds for call in ran.calls]
    twins = {call.id: call.case.replay_twin(TWIN_SALT) for call in calls}
    for call in calls:
        for index, array in enumerate(twins[call.id].make_inputs().values()):
            np.ascontiguousarray(array).tofile(io / REPLAY_INPUTS / f"{call.id}.{index}.bin")
    (io / REPLAY_JOB).write_text(json.dumps({"device": backend.device, "calls_per_journal": copied,
                                             "device_ops": device_ops or DeviceOpsSpec().model_dump()}))
    return Staged(io, calls, twins, journal_of, over, seconds, runner, backend, submission, build_dir, budget,
                  any_journal=bool(copied))


def replay_staged(staged: Staged, engine: Path | None = None, shared: ReplaySandboxes | None = None) -> ReplayRound:
    """A staged replay run and read: in the submission's replay sandox, `shared` (replay_sandbox.py), handed the
    staged folder, else (None, or a replay too large for its room) in a sandbox of its own; `engine` is the folder
    of the build's WebAssembly engine, made on the trusted side (wasm_engine.py; None: the replay makes it), staged
    into its /io first. It reads nothing of the run's folders: it may run beside the next round
    (execute.Executor.settle_beside)."""
    stage_engine(engine, staged.io)
    return _run_replay(staged, engine=None, any_journal=staged.any_journal, shared=shared)


def draw_ahead(calls: list[PlannedCall], reference: str) -> None:
    """What reading the calls' replay will need, drawn now (kept in the cases' cache, spec/cases.py): each case's
    reference output, its twin's inputs and the twin's reference. The executor draws them while the round runs."""
    for call in calls:
        call.case.expected(reference)
        call.case.replay_twin(TWIN_SALT).expected(reference)


def second_opinion(first: ReplayRound, io: Path, call_ids: set[str]) -> ReplayRound:
    """The journals holding `call_ids` replayed again, natively, on the same twins as `first` (which the
    WebAssembly engine replayed): what decides whether the engine's account of a call that would cost it points is
    the kernels' doing or the engine's (DESIGN.md "Confinement by construction", the disagreement policy). Its
    account is never credited: it can only hold a call for review."""
    staged = first.staged
    if staged is None:
        raise ValueError("a replay round without its staged inputs")
    fresh_io(io)
    journals = {staged.journal_of[c] for c in call_ids if c in staged.journal_of}
    job = json.loads((staged.io / REPLAY_JOB).read_text())
    calls = [c for c in staged.calls if staged.journal_of.get(c.id) in journals]
    ids = {c.id for c in calls}
    for name in journals:
        if (staged.io / REPLAY_JOURNALS / name).is_file():
            os.link(staged.io / REPLAY_JOURNALS / name, io / REPLAY_JOURNALS / name)
    for source in (staged.io / REPLAY_INPUTS).iterdir():
        if source.name.split(".", 1)[0] in ids:
            os.link(source, io / REPLAY_INPUTS / source.name)
    job["calls_per_journal"] = {k: v for k, v in job.get("calls_per_journal", {}).items() if k in journals}
    (io / REPLAY_JOB).write_text(json.dumps(job))
    again = replace(staged, io=io, calls=calls, seconds=60.0 + staged.seconds * len(calls) / max(1, len(staged.calls)))
    return _run_replay(again, engine="native", any_journal=bool(job["calls_per_journal"]))


def fresh_io(io: Path) -> None:
    """A replay's /io, empty: its journals, inputs and outputs folders (a lab programs' replay's too,
    orchestration/programs.py)."""
    shutil.rmtree(io, ignore_errors=True)
    (io / REPLAY_JOURNALS).mkdir(parents=True)
    (io / REPLAY_INPUTS).mkdir()
    (io / "outputs").mkdir()


def _run_replay(staged: Staged, engine: str | None, any_journal: bool,
                shared: ReplaySandboxes | None = None) -> ReplayRound:
    io = staged.io
    outcome = None
    replayed = shared.replay(io, staged.seconds) if shared is not None and any_journal else None
    if replayed is not None:
        outcome, key = replayed.outcome, replayed.key
    else:
        key = write_trace_key(io)
        env = dict(staged.backend.env)
        if engine is not None:
            env[REPLAY_ENGINE_ENV] = engine
        if any_journal:
            outcome = staged.runner.run(Phase.RUN, staged.backend.impl.replay_argv(),
                                        Mounts(submission=staged.submission.resolve(), build=staged.build_dir, io=io),
                                        replace(staged.budget, wall_seconds=staged.seconds), env=env)
    if outcome is not None and outcome.exit_code == ExitCode.REPLAY_FAILED:
        raise SandboxError(_("the grader's replay of the kernels failed: {tail}").format(
            tail=as_in_own_sandbox(outcome.stderr_tail or "")[-1500:]))
    replay = ReplayRound(outputs=io / "outputs", key=key, outcome=outcome, staged=staged)
    engines = {name: engine_record(replay.outputs, name) for name in set(staged.journal_of.values())}
    for call in staged.calls:
        replayed = replay.calls[call.id] = read_replayed(call, staged.twins[call.id], replay.outputs, outcome)
        if replayed.error is not None and call.id in staged.over:
            replayed.error, replayed.over_budget = staged.over[call.id], True
        if call.id in staged.journal_of:
            replayed.engine, replayed.native_why = engines[staged.journal_of[call.id]]
    return replay


def engine_record(outputs: Path, journal: str) -> tuple[str, str]:
    """Which engine replayed a journal, and why natively where it was (bang_harness/wasm_replay.replay_either
    writes it in the replay process before any kernel runs there; a lab program's journal is <stem>.journal)."""
    try:
        record = read_json_capped(outputs / f"{journal.removesuffix(JOURNAL_SUFFIX)}{ENGINE_RECORD_SUFFIX}",
                                  root=outputs.parent, max_bytes=2 * WASM_NOTE_MAX_BYTES)
    except (UntrustedFileError, OSError):
        return "", ""
    if not isinstance(record, dict) or record.get("engine") not in ENGINES:
        return "", ""
    return str(record["engine"]), as_in_own_sandbox(str(record.get("why") or ""))[:WASM_NOTE_MAX_BYTES]


def engine_notes(asked: str, native_whys: Iterable[str]) -> list[str]:
    """The grading's notes on the engine that replayed the kernels (DESIGN.md "Confinement by construction", the
    switch-over): a grading asked to replay natively says so; else each reason a journal (or a lab program) was
    replayed natively where the confined engine was asked for, once."""
    if asked == "native":
        return [_("your kernels were replayed natively, as this grading was asked to (not in the confined "
                  "WebAssembly engine)")]
    return [_("your kernels were replayed natively, not in the confined WebAssembly engine: {why}").format(
        why=why[:1500]) for why in sorted(set(native_whys)) if why]


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
        done.error = as_in_own_sandbox(str(status.get("error") or _("the replay failed")))[:2000]
        return done
    if status.get("sealed") is not True:
        done.error = _("the run never marked the call's output")
        return done
    if isinstance(status.get("not_kernel"), str) and status["not_kernel"]:
        done.not_kernel = status["not_kernel"][:500]
    if isinstance(status.get("host_data"), str) and status["host_data"]:
        done.host_data = status["host_data"][:500]
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
