"""Executing planned calls, one round at a time: inputs and the job into the round's folder, progress from the
outputs as they appear, then each call's outcome read back (from the trusted replay: replay.py).

Rounds share one run-phase sandbox per submission when the runner can leave one running (rounds.py and
bang_harness.session: torch is imported once, not once per round); otherwise, or with the environment variable
BANG_GRADER_SANDBOX_PER_ROUND=1 (how it ran before, for comparison), each round is a sandbox of its own.

A replay can run beside the next round (settle_beside: the policy times the stages while the correctness rounds
are replayed). Whatever a settle or a round has to say goes into the grading's notes on the grading's own thread,
in the order the rounds would have said it one after the other; a round run on a guess holds its notes
(holding_notes) until the caller keeps it. The host's own work waits for no sandbox it need not: while a round
runs, the references its replay is read against are drawn (replay.draw_ahead), and while a replay runs, the
run's outputs are compared with theirs (judge.check_run).
"""

from __future__ import annotations

import json
import os
import shutil
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Generic, TypeVar

import numpy as np
from bang_harness.protocol import JOB_FILE

from grader.checks.integrity import HostFacts
from grader.i18n import _, carry_language
from grader.orchestration.environment import ResolvedBackend
from grader.orchestration.judge import CallOutcome, check_run, replay_accuses
from grader.orchestration.plan import PlannedCall
from grader.orchestration.read_outputs import RunRead, describe_outcome, read_call, read_run
from grader.orchestration.replay import (
    JOURNAL_CAP_BYTES,
    ReplayRound,
    RunRound,
    Staged,
    draw_ahead,
    engine_notes,
    replay_staged,
    second_opinion,
    stage_replay,
    write_trace_key,
)
from grader.orchestration.replay_sandbox import MakeSandbox, ReplaySandboxes
from grader.orchestration.rounds import RoundRefused, RoundSandbox
from grader.orchestration.wasm_engine import EngineMaker
from grader.sandbox.base import Limits, Mounts, Phase, Runner, RunOutcome
from grader.scoring.timing import MAX_ROUNDS
from grader.spec import AssignmentSpec

PER_ROUND_ENV = "BANG_GRADER_SANDBOX_PER_ROUND"
# Seeds that may share a round: each keeps its file size budget (Executor._budget) only while the worker's one
# journal holding them all stays under the journal's own cap.
MAX_SEEDS_PER_ROUND = JOURNAL_CAP_BYTES // Limits().file_size_bytes

Note = tuple[str, bool]  # a grading note, and whether it is said once however many rounds meet it
T = TypeVar("T")


@dataclass
class _Round:
    """A round run, not yet read back: the round, and what its folder said of each call (read right after it)."""

    ran: RunRound
    reads: dict[str, RunRead]
    alone: dict[str, CallOutcome] = field(default_factory=dict)  # emu: the outcomes read from the run alone


@dataclass
class _Staging:
    """Rounds taken for one settle: everything read from their folders, the replay's /io laid out (emu)."""

    rounds: list[_Round]
    replay_io: Path
    staged: Staged | None


@dataclass
class Settled:
    """What settling some rounds gave: their calls' outcomes, and what it has to say (Executor.settle)."""

    results: dict[str, CallOutcome]
    notes: list[Note] = field(default_factory=list)
    integrity_seconds: float = 0.0


class _Background(Generic[T]):
    """`work()` in a thread of its own, in the grading's language; `result()` joins it and raises what it raised."""

    def __init__(self, work: Callable[[], T], name: str) -> None:
        self._value: T | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=carry_language(self._run), args=(work,), name=name, daemon=True)
        self._thread.start()

    def _run(self, work: Callable[[], T]) -> None:
        try:
            self._value = work()
        except BaseException as exc:  # noqa: BLE001 -- raised again on the grading's thread (result)
            self._error = exc

    def join(self) -> None:
        """Waits for it, whatever became of it (the grading is failing on its own thread)."""
        self._thread.join()

    def result(self) -> T:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]


class Beside:
    """A settle running in a thread of its own (Executor.settle_beside); `result()` joins it and says its notes."""

    def __init__(self, executor: Executor, staging: _Staging) -> None:
        self._executor = executor
        self._settling = _Background(lambda: executor._settle(staging), "replay-beside")

    def join(self) -> None:
        """Waits for the settle, whatever became of it (the grading is failing on its own thread)."""
        self._settling.join()

    def result(self) -> dict[str, CallOutcome]:
        return self._executor._apply(self._settling.result())


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
    seeds_per_round: int = 1  # seeds whose calls share each round (grade_on_seeds): its limits scale (_budget)
    engine: EngineMaker | None = None  # the build's WebAssembly engine, made beside the first round (wasm_engine.py)
    _rounds: RoundSandbox | None = field(default=None, repr=False)  # the submission's run-phase sandbox, if up
    _pending: list[_Round] = field(default_factory=list, repr=False)  # rounds run, not yet replayed and read
    _pending_io: Path | None = field(default=None, repr=False)  # the last pending round's replay folder
    _held: list[Note] | None = field(default=None, repr=False)  # notes held back (holding_notes)
    _replays: ReplaySandboxes | None = field(default=None, repr=False)  # the submission's replay sandbox (shared)
    _starting_replays: _Background[None] | None = field(default=None, repr=False)  # start_replays' thread

    def run(self, calls: list[PlannedCall], io: Path, progress_span: tuple[float, float],
            call_timeout: float | None = None, defer_replay: bool = False) -> dict[str, CallOutcome]:
        """One round: `io` names it (its folder when the round has a sandbox of its own). On the emulator the
        round is then replayed (replay.py), together with any round whose replay was deferred: `defer_replay`
        returns this round's outcomes read from the run alone (their error kinds, for the probe's decisions; their
        outputs, for the stages to time beside the replay) and leaves the round to the next settle, which returns
        its outcomes again, complete (one replay sandbox less)."""
        if not calls:
            return {}
        # beside the round's folder, never inside a run sandbox's mount: the twin inputs stay unseen there
        replay_io = io.parent / f"{io.name}-replay"
        # the emulator: the references its replay is read against, drawn while the round runs
        ahead = (_Background(lambda: draw_ahead(calls, self.spec.reference), "draw-ahead")
                 if self.backend.impl.kernel_trace else None)
        try:
            if self._share_sandbox():
                io, outcome = self._run_round(calls, io, progress_span, call_timeout)
            else:
                outcome = self._run_alone(calls, io, progress_span, call_timeout)
        finally:
            if ahead is not None:
                ahead.join()
        if not outcome.ok:
            self._note(_("the run phase did not finish cleanly: {why}").format(why=describe_outcome(outcome)))
        ran = RunRound(calls, io / "outputs", outcome, call_timeout or self.spec.call_timeout_seconds)
        # read now, before the next round: its processes could write this round's folder again
        reads = {call.id: read_run(call, ran.outputs, outcome, self.backend) for call in calls}
        self._pending.append(pending := _Round(ran, reads))
        self._pending_io = replay_io
        if self.backend.impl.kernel_trace:
            pending.alone = {call.id: read_call(call, ran.outputs, outcome, self.spec, self.backend, self.facts, None,
                                                reads[call.id])[0] for call in calls}
            if defer_replay:
                return pending.alone
        return self.settle(replay_io)

    def settle(self, replay_io: Path | None = None) -> dict[str, CallOutcome]:
        """The rounds not read back yet, replayed (the emulator) and read: their calls' outcomes. `replay_io`: the
        replay's folder (None: the last of those rounds names it)."""
        staging = self._stage(replay_io)
        return self._apply(self._settle(staging)) if staging is not None else {}

    def settle_beside(self, replay_io: Path | None = None) -> Beside | None:
        """settle() in a thread of its own, beside whatever the grading's thread does next (the next round, in
        the run sandbox: the replay is a sandbox of its own, and it reads nothing of the run's folders, all read
        and staged here first); None when no round is pending."""
        staging = self._stage(replay_io)
        return Beside(self, staging) if staging is not None else None

    @contextmanager
    def holding_notes(self) -> Iterator[list[Note]]:
        """The notes said meanwhile (the rounds', their settles') are held in the list yielded, not said: the
        caller says them (say) if it keeps what those rounds gave, in the place they would have come."""
        held: list[Note] = []
        outer, self._held = self._held, held
        try:
            yield held
        finally:
            self._held = outer

    def say(self, held: list[Note]) -> None:
        for text, once in held:
            self._note(text, once)

    def _stage(self, replay_io: Path | None) -> _Staging | None:
        """The pending rounds taken, and their replay staged (their journals out of the run's folders)."""
        rounds, self._pending = self._pending, []
        replay_io, self._pending_io = replay_io or self._pending_io, None
        if not rounds or replay_io is None:
            return None
        staged = None
        self._shared_replays()
        if self.backend.impl.kernel_trace:  # the emulator: what decides comes from the trusted replay
            staged = stage_replay(self.runner, self.backend, [r.ran for r in rounds], replay_io, self.root,
                                  self.build_dir, budget=self._budget(), device_ops=self.spec.device_ops.model_dump())
        return _Staging(rounds, replay_io, staged)

    def _apply(self, settled: Settled) -> dict[str, CallOutcome]:
        """A settle's notes said and its host seconds counted, on the grading's thread."""
        self.integrity_seconds += settled.integrity_seconds
        self.say(settled.notes)
        return settled.results

    def _settle(self, staging: _Staging) -> Settled:
        """Replays (the emulator) and reads a staging; touches nothing of the executor's but the sandboxes it
        starts, and nothing of the run's folders, so that it can run beside the next round (settle_beside)."""
        settled = Settled({})
        replay = None
        if (staged := staging.staged) is not None:
            replaying = _Background(lambda: replay_staged(staged, self.engine.engine() if self.engine else None,
                                                          self._replays), "replay")
            try:  # meanwhile the run's outputs against their references (drawn during the round)
                for ran in staging.rounds:
                    for call in ran.ran.calls:
                        if call.id in ran.alone:
                            check_run(self.spec, call.case, ran.alone[call.id])
            except BaseException:
                replaying.join()
                raise
            replay = replaying.result()
            if replay.outcome is not None and not replay.outcome.ok:
                settled.notes.append((_("the replay did not finish cleanly: {why}").format(
                    why=describe_outcome(replay.outcome)), False))
        results = settled.results
        for ran in staging.rounds:
            for call in ran.ran.calls:
                results[call.id], seconds = read_call(call, ran.ran.outputs, ran.ran.outcome, self.spec, self.backend,
                                                      self.facts, replay, ran.reads[call.id])
                if call.id in ran.alone:  # the same output, already compared with its reference (judge.run_check)
                    results[call.id].run_check = ran.alone[call.id].run_check
                settled.integrity_seconds += seconds
                # Checks that could not run are said once per grading, never passed over (e.g. no CNPAPI).
                settled.notes += [(note, True) for note in results[call.id].integrity_notes]
        if replay is not None:
            settled.notes += [(note, True) for note in engine_notes(
                self.backend.engine, [r.native_why for r in replay.calls.values() if r.engine == "native"])]
            settled.integrity_seconds += self._second_opinion(staging.rounds, replay, results,
                                                              staging.replay_io.with_name(
                                                                  f"{staging.replay_io.name}-native"))
        return settled

    def _note(self, note: str, once: bool = False) -> None:
        """A grading note (`once`: said once however many rounds meet it), or held (holding_notes)."""
        if self._held is not None:
            self._held.append((note, once))
        elif not once or note not in self.notes:
            self.notes.append(note)

    def _second_opinion(self, rounds: list[_Round], replay: ReplayRound, results: dict[str, CallOutcome],
                        io: Path) -> float:
        """The disagreement policy (DESIGN.md "Confinement by construction"): where the WebAssembly engine's account
        of a call would cost it points, the same journals are replayed natively on the same twins; if that replay
        finds nothing against the call, the call is held for review (judge.DISAGREEMENT), else the engine's account
        stands. The native replay is never credited. Returns the host seconds its integrity checks took."""
        accused = {call.id: why for ran in rounds for call in ran.ran.calls
                   if replay.calls[call.id].engine == "wasm"
                   and (why := replay_accuses(self.spec, call.case, results[call.id])) is not None}
        if not accused:
            return 0.0
        seconds = 0.0
        second = second_opinion(replay, io, set(accused))
        for ran in rounds:
            for call in ran.ran.calls:
                if call.id not in accused:
                    continue
                native, took = read_call(call, ran.ran.outputs, ran.ran.outcome, self.spec, self.backend, self.facts,
                                         second, ran.reads[call.id])
                seconds += took
                if second.calls[call.id].error is None and replay_accuses(self.spec, call.case, native) is None:
                    results[call.id] = replace(results[call.id], disagreement=accused[call.id])
        return seconds

    def start(self, work: Path) -> None:
        """Starts the submission's run-phase sandbox now (its folder in `work`), before its first round, where the
        rounds share one: it imports torch while the host gets ready (pipeline.py: the build, its facts, the
        calls). One that ends before its first round is replaced by that round (_run_round)."""
        if self._share_sandbox() and self._rounds is None:
            self._rounds = self._new_sandbox(work / "io-sandbox")
            self._rounds.start()

    def start_replays(self, work: Path) -> None:
        """Starts the submission's shared replay sandbox (its folder in `work`) in the background, where the
        emulator replays: the first replay, after the correctness round, then finds it up. Called once the run
        sandbox has imported torch (after the probe): started with it, the two start-ups shared the two cores and
        the grading was no faster (example 6.01 vs 6.12 s, vector 4.08 vs 3.98)."""
        if (replays := self._shared_replays()) is not None and self._starting_replays is None:
            self._starting_replays = _Background(lambda: replays.prestart(work), "replays-start")

    def _shared_replays(self) -> ReplaySandboxes | None:
        """The submission's shared replay sandbox, made (not started) on first use; None where the replays are not
        the emulator's or the runner shares no sandbox."""
        if self.backend.impl.kernel_trace and self._replays is None and self._share_sandbox():
            self._replays = ReplaySandboxes(MakeSandbox(
                self.runner, self.backend.impl.replay_argv(), self.root.resolve(), self.build_dir,  # type: ignore[arg-type]
                self._budget(), dict(self.backend.env), write_trace_key))
        return self._replays

    def drop_finished_rounds(self) -> None:
        """Frees the folders of the rounds read back so far: /io is a capped tmpfs, and a seed sweep runs many
        rounds in one sandbox (grade_on_seeds)."""
        rounds = self._rounds
        if rounds is not None:
            for index in range(rounds.index):
                shutil.rmtree(rounds.rounds / str(index), ignore_errors=True)

    def close(self) -> None:
        """Ends the submission's run-phase and replay sandboxes, if still up, both at once (and waits for the
        engine's maker)."""
        if self.engine is not None:
            self.engine.engine()
        replays, self._replays = self._replays, None
        ending = _Background(replays.close, "replays-close") if replays is not None else None
        rounds, self._rounds = self._rounds, None
        try:
            if rounds is not None:
                rounds.close()
        except RuntimeError:  # it could not be removed: the runner's sweep of leftovers takes it
            pass
        finally:
            if ending is not None:
                ending.result()

    def _share_sandbox(self) -> bool:
        return callable(getattr(self.runner, "start", None)) and os.environ.get(PER_ROUND_ENV) != "1"

    def _run_alone(self, calls: list[PlannedCall], io: Path, progress_span: tuple[float, float],
                   call_timeout: float | None) -> RunOutcome:
        (io / "inputs").mkdir(parents=True)
        (io / "outputs").mkdir()
        job = self._job(calls, call_timeout, io / "inputs")
        (io / JOB_FILE).write_text(json.dumps(job, indent=1), encoding="utf-8")
        with self._watching(io / "outputs", calls, progress_span):
            outcome = self.runner.run(Phase.RUN, self.backend.argv(Phase.RUN), self._mounts(io),
                                      self._limits(self._round_seconds()), env=dict(self.backend.env))
        return outcome

    def _run_round(self, calls: list[PlannedCall], io: Path, progress_span: tuple[float, float],
                   call_timeout: float | None) -> tuple[Path, RunOutcome]:
        def job(inputs: Path) -> dict[str, Any]:
            # no "trace_key": the workers get none, what they record decides nothing (the replay does)
            return self._job(calls, call_timeout, inputs)

        for attempt in range(2):
            rounds = self._rounds
            if rounds is not None and rounds.index == 0 and rounds.ended():
                # Started before the build (start) and gone before its first round -- a build longer than its
                # keeper waits, a start-up that failed: nothing of the student's ran in it, so it is not their round.
                rounds.close()
                rounds = None
            if rounds is None or not rounds.alive:
                rounds = self._rounds = self._new_sandbox(io.parent / f"{io.name}-sandbox{attempt or ''}")
            with self._watching(rounds.next_round / "outputs", calls, progress_span):
                try:
                    done = rounds.run_round(job, self._round_seconds())
                except RoundRefused as exc:  # planted by an earlier round: this round gets a sandbox of its own
                    self._note(f"a fresh sandbox for the next round: {exc}")
                    self.close()
                    continue
            if not done.sandbox_alive:
                self._rounds = None
            return done.io, done.outcome
        raise RoundRefused("a fresh sandbox refused its first round")

    def _new_sandbox(self, io: Path) -> RoundSandbox:
        """A run-phase sandbox in the folder `io` (or `io` numbered: the one started before the first round
        and the one a lost sandbox's round starts can share a name)."""
        named, number = io, 1
        while named.exists():
            number += 1
            named = io.with_name(f"{io.name}-{number}")
        io = named
        io.mkdir(parents=True)
        master = write_trace_key(io)
        # The host ends each round at the spec's wall limit; this is the runner's own backstop for all of them.
        limits = self._limits(self._round_seconds() * (3 + MAX_ROUNDS))
        return RoundSandbox(self.runner, self.backend.argv(Phase.RUN), self._mounts(io), limits,  # type: ignore[arg-type]
                            dict(self.backend.env), master)

    def _round_seconds(self) -> float:
        return self.spec.run_timeout_seconds * self.seeds_per_round

    def _budget(self) -> Limits:
        """The round's limits but its wall: each seed sharing it keeps what it has alone. Its inputs, outputs
        and journals (10 seeds of the timed matmuls overran one seed's 512 MiB of disk); its part of the
        worker's one journal, a single file (10 seeds of the bundled example's six stages ran into one seed's
        256 MiB file size limit); and the memory both tmpfs mounts (/tmp, /io) are charged to the container's."""
        alone, n = Limits(), self.seeds_per_round
        return Limits(tmpfs_bytes=alone.tmpfs_bytes * n, file_size_bytes=alone.file_size_bytes * n,
                      memory_bytes=alone.memory_bytes + 2 * alone.tmpfs_bytes * (n - 1))

    def _limits(self, wall_seconds: float) -> Limits:
        return replace(self._budget(), wall_seconds=wall_seconds)

    def _mounts(self, io: Path) -> Mounts:
        return Mounts(submission=self.root.resolve(), build=self.build_dir, io=io)

    def _job(self, calls: list[PlannedCall], call_timeout: float | None, inputs: Path) -> dict[str, Any]:
        """The round's job (bang_harness.job), its input arrays written into `inputs`."""
        written: set[str] = set()
        job_calls = []
        for call in calls:
            names = []
            for name, array in call.case.make_inputs().items():
                file = f"{call.tag}{call.case.name}_{name}.npy"
                if file not in written:
                    np.save(inputs / file, array, allow_pickle=False)
                    written.add(file)
                names.append(file)
            job_calls.append({"id": call.id, "entry": call.entry, "inputs": names, "dtype": call.case.dtype,
                              "timed_repeats": call.timed_repeats, "warmup": call.warmup, "poison": "nan"})
        return {"backend": self.backend.name, "device": self.backend.device, "module": self.module,
                "extension": self.extension, "calls": job_calls,
                "call_timeout_seconds": call_timeout or self.spec.call_timeout_seconds}

    @contextmanager
    def _watching(self, outputs: Path, calls: list[PlannedCall], span: tuple[float, float]) -> Iterator[None]:
        stop = threading.Event()
        watcher = threading.Thread(target=carry_language(self._watch_outputs), args=(outputs, calls, span, stop), daemon=True)
        watcher.start()
        try:
            yield
        finally:
            stop.set()
            watcher.join()

    def _watch_outputs(self, outputs: Path, calls: list[PlannedCall], span: tuple[float, float],
                       stop: threading.Event) -> None:
        total = len(calls)
        last = -1
        while not stop.wait(0.5):
            done = sum(1 for c in calls if (outputs / f"{c.id}.json").exists())
            if done != last and done < total:
                last = done
                self.progress(_("running {call} [{done}/{total}]").format(call=calls[done].label, done=done + 1,
                                                                           total=total),
                              span[0] + (span[1] - span[0]) * done / total)
