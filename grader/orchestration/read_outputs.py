"""Reading what the sandbox wrote back, all of it untrusted and size-capped: a call's result JSON, raw output
array and signed launch trace (-> CallOutcome), the build's report and log, and the runner's own observation."""

from __future__ import annotations

import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from bang_harness.protocol import ErrorKind

from grader.checks.integrity import CallIntegrity, HostFacts
from grader.checks.kernel_use import read_kernel_use, work_floor
from grader.i18n import N_, _
from grader.orchestration.environment import ResolvedBackend
from grader.orchestration.judge import CallOutcome
from grader.orchestration.plan import PlannedCall
from grader.orchestration.replay import ReplayRound
from grader.orchestration.trace_summary import read_trace, run_structure
from grader.sandbox.base import Limits, RunOutcome
from grader.sandbox.capped import UntrustedFileError, load_npy_expected, read_bytes_capped, read_json_capped
from grader.spec import REFERENCES, AssignmentSpec


@dataclass
class RunRead:
    """What a round's folder says of one call, read once, right after the round: the result file, the output
    array and (emu) the launches the run's own process recorded. Later rounds run in the same sandbox, whose
    processes could write that folder again: the host has read what it needs before the next round starts."""

    meta: dict[str, Any]
    output: np.ndarray | None = None
    read_error: str | None = None
    structure: tuple[int, str] | None = None  # emu: (launches, digest) of the run's own (unsigned) records


def read_run(call: PlannedCall, outputs: Path, outcome: RunOutcome, backend: ResolvedBackend) -> RunRead:
    """The run's side of a call (read_call reads the replay's against it)."""
    try:
        meta = read_json_capped(outputs / f"{call.id}.json", root=outputs.parent)
    except (UntrustedFileError, OSError):
        meta = None
    if meta is not None and not isinstance(meta, dict):
        meta = {"ok": False, "error": _("the call's result file is not a JSON object")}
    if meta is None:
        # The host's own observation of its runner: the only source of crash/timeout it needs no file for.
        kind = ErrorKind.TIMEOUT if outcome.timed_out else ErrorKind.CRASH
        meta = {"ok": False, "error_kind": kind, "error": describe_outcome(outcome), "lost": True}
    read = RunRead(meta)
    if meta.get("ok") is True:
        try:
            # Header checked against the case's shape and dtype before any array is allocated.
            read.output = load_npy_expected(outputs / f"{call.id}.npy", tuple(call.case.output_shape),
                                            call.case.dtype, root=outputs.parent)
        except (UntrustedFileError, OSError) as exc:
            read.read_error = _("the output could not be read back: {error}").format(error=exc)
        if backend.impl.kernel_trace:
            read.structure = run_structure(outputs / f"{call.id}.trace.jsonl", call.id, root=outputs.parent)
    return read


def read_call(call: PlannedCall, outputs: Path, outcome: RunOutcome, spec: AssignmentSpec,
              backend: ResolvedBackend, facts: HostFacts | None,
              replay: ReplayRound | None, run: RunRead | None = None) -> tuple[CallOutcome, float]:
    """One call's outcome, and the seconds the host's integrity checks took. With a replay (the emulator), the
    launch records, counted work and kernel-written bytes are the replay's, never the run's. `run`: the run's
    side as read_run read it after the round (None: read now). Without a replay on the emulator, what the run
    alone shows (its launch count for judge.passes_on_the_run)."""
    run = run or read_run(call, outputs, outcome, backend)
    meta, output, read_error = run.meta, run.output, run.read_error
    ok = meta.get("ok") is True
    if ok and backend.impl.kernel_windows:
        # mlu: kernel use and device time from the timing driver's records, never the harness's own figures.
        started = time.perf_counter()
        use = read_kernel_use(outputs / f"{call.id}.trace.jsonl", outputs.parent, invocations=call.invocations,
                              timed=call.timed_repeats, symbols=facts.symbols if facts else None,
                              during=f"{call.entry}({', '.join(i.name for i in spec.inputs)})",
                              action=spec.integrity.unverified_kernel_use, stage_call=call.stage is not None,
                              floor=work_floor(REFERENCES[spec.reference].work(call.case.shapes,
                                                                               np.dtype(call.case.dtype).itemsize),
                                               call.case.dtype, backend.device, call.case.shapes))
        return (CallOutcome(meta={**meta, "device_us": use.device_us}, output=output, read_error=read_error,
                            integrity=use.findings, no_kernel=use.missing, kernels=use,
                            integrity_notes=[use.unverified] if use.unverified else []),
                time.perf_counter() - started)
    if not backend.impl.kernel_trace:
        return CallOutcome(meta=meta, output=output, read_error=read_error), 0.0
    if replay is None:  # the run alone, before its replay
        return CallOutcome(meta=meta, output=output, read_error=read_error,
                           run_launches=run.structure[0] if run.structure else 0), 0.0
    started = time.perf_counter()
    replayed = replay.calls[call.id]
    if ok and replayed.over_budget:
        # a limit of the sandbox, said as one: not "the sandbox's claims do not add up"
        meta = {**meta, "ok": False, "error_kind": ErrorKind.CRASH, "error": replayed.error}
        return CallOutcome(meta=meta, replayed=replayed), time.perf_counter() - started
    facts = facts or HostFacts(device=backend.device, profile=None, symbols=None)
    required = REFERENCES[spec.reference].required(replayed.twin.shapes)
    checker = CallIntegrity(call.id, facts, required, np.dtype(call.case.dtype).itemsize)
    trace = read_trace(replay.outputs / f"{call.id}.trace.jsonl", replay.key, call.id, checker,
                       root=replay.outputs.parent)
    findings: list[str] = []
    if ok:
        findings = [*trace.findings, *checker.finish(replayed.output)]
        if replayed.error is not None:
            findings.insert(0, _("the grader's replay of your kernels could not stand for this call: {why}").format(
                why=replayed.error))
        else:
            launches, digest = run.structure or (0, "")
            if (launches, digest) != (trace.launch_count, trace.launches.structure.hexdigest()):
                findings.append(_("the launch records written in your process ({run} launches) differ from what "
                                  "your kernels launched when the grader replayed them ({replayed}): they were "
                                  "changed inside the run").format(run=launches, replayed=trace.launch_count))
    no_kernel = None
    if ok and replayed.not_kernel:
        no_kernel = _("{op} computed (part of) the output on the device. Around your kernels, torch may move, cast, "
                      "fill, pad, concatenate, slice, clamp or scale data; the assignment's computation must be "
                      "your kernels' own work").format(op=replayed.not_kernel)
    return (CallOutcome(meta=meta, output=output, trace=trace, read_error=read_error, integrity=findings,
                        coverage=checker.coverage if ok else [], replayed=replayed, no_kernel=no_kernel),
            time.perf_counter() - started)


# What the signal that ended a process means, in a student's words (describe_outcome: the one place).
SIGNAL_WORDS: dict[int, str] = {
    signal.SIGSEGV: N_("a segmentation fault (SIGSEGV): an invalid memory access, e.g. through a null, freed or "
                       "out-of-range pointer"),
    signal.SIGBUS: N_("a bus error (SIGBUS): an access to memory that is not mapped or not aligned"),
    signal.SIGFPE: N_("an arithmetic error (SIGFPE), e.g. an integer division by zero"),
    signal.SIGABRT: N_("an abort (SIGABRT): an assertion or the C++ runtime stopped the process"),
    signal.SIGILL: N_("an illegal instruction (SIGILL)"),
    signal.SIGKILL: N_("SIGKILL, sent from outside the process (e.g. at a memory limit)"),
    signal.SIGXCPU: N_("the CPU time limit (SIGXCPU)"),
}
FILE_SIZE_WORDS = N_("the output-size limit (SIGXFSZ): a file it wrote grew past the {mib} MiB the sandbox allows")


def signal_words(number: int, limits: Limits | None = None) -> str:
    """A signal in words; SIGXFSZ names the file size limit of `limits` (the sandbox's the process ran under)."""
    if number == signal.SIGXFSZ:
        return _(FILE_SIZE_WORDS).format(mib=(limits or Limits()).file_size_bytes >> 20)
    if number in SIGNAL_WORDS:
        return _(SIGNAL_WORDS[number])
    try:
        return _("signal {signal} ({name})").format(signal=number, name=signal.Signals(number).name)
    except ValueError:
        return _("signal {signal}").format(signal=number)


def describe_outcome(outcome: RunOutcome, limits: Limits | None = None) -> str:
    """How a process (or sandbox) ended, for a student; `limits`: the ones it ran under."""
    # The runner's notes say why it stopped the sandbox (disk or output flood, pids, memory ...).
    why = "".join(f"; {note}" for note in outcome.notes if "no isolation" not in note)
    if outcome.timed_out:
        return _("killed after the wall limit ({seconds:.0f} s)").format(seconds=outcome.wall_seconds) + why
    if outcome.oom_killed:
        return _("killed: out of memory") + why
    if outcome.signal:
        return _("killed by {what}").format(what=signal_words(outcome.signal, limits)) + why
    tail = output_tail(outcome)
    return _("exit status {code}").format(code=outcome.exit_code) + why + (f": {tail}" if tail else "")


def output_tail(outcome: RunOutcome, chars: int = 4000) -> str:
    return (outcome.stderr_tail or outcome.stdout_tail or "")[-chars:].strip()


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = read_json_capped(path)
    except (UntrustedFileError, OSError):
        return None
    return data if isinstance(data, dict) else None


def read_text(path: Path, chars: int) -> str | None:
    try:
        return read_bytes_capped(path, 4 * chars + 4096).decode("utf-8", "replace")[-chars:]
    except (UntrustedFileError, OSError):
        return None
