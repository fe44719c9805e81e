"""Reads a call's emulator trace (signed JSON Lines, DESIGN.md "Threat model") and summarises it while streaming.

The trace is written inside the sandbox, by a runtime in the student's process: every line must carry the HMAC
of the call's key (derived from the master key the host drew for the run phase), parse as plain JSON (no
NaN/Infinity), name this call and continue the sequence 0, 1, 2 ... without gaps. A line that does not is an
integrity finding and ends the reading: nothing after it is believed. Records are capped in count and bytes and
folded into running totals, never kept as a list.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bang_harness.protocol import (
    TRACE_MAX_BYTES,
    TRACE_MAX_RECORDS,
    RecordKind,
    call_key,
    split_line,
    trace_lines,
    verify_line,
)

from grader.checks.integrity import CallIntegrity
from grader.results import (
    TIMELINE_KINDS,
    TIMELINE_LANES,
    TIMELINE_MAX_EVENTS,
    EmuDiagnostic,
    SourceLocation,
    Timeline,
    TimelineEvent,
    TorchOp,
    TraceSummary,
)
from grader.sandbox.capped import UntrustedFileError, open_capped

MAX_DIAGNOSTICS = 20
TORCH_OPS_SPLIT = "torch_ops"  # the time split's row for torch operators run on the device (issue 36)
MAX_TORCH_OPS = 50  # distinct (operator, line) pairs kept for the summary; their time always counts


def _num(value: Any, default: float = 0.0) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return default
    value = float(value)
    return value if value == value and abs(value) != float("inf") else default


def _int_map(value: Any) -> dict[str, int]:
    if not isinstance(value, dict):
        return {}
    return {str(k): int(v) for k, v in value.items() if isinstance(v, int) and not isinstance(v, bool)}


def _reject_constant(name: str) -> Any:
    raise ValueError(f"non-standard JSON constant {name}")


class TraceAccumulator:
    """Running totals of launch records: what TraceSummary reports, without holding the records."""

    def __init__(self) -> None:
        self.launches = 0
        self.total_us = 0.0
        self.by_kernel: Counter[str] = Counter()
        self.builtins: Counter[str] = Counter()
        self.bytes_moved: Counter[str] = Counter()
        self.split: Counter[str] = Counter()
        self.peak: dict[str, int] = {}
        self.capacity: dict[str, int] = {}
        self.cores_used = 1
        self.main: dict[str, Any] = {}
        self._main_time = -1.0
        self.diagnostics: list[EmuDiagnostic] = []
        self._seen: set[tuple[str, str]] = set()
        self.timeline: Timeline | None = None
        self._timeline_time = -1.0
        self.structure = hashlib.sha256()  # the launches' kernels, grids and cores, in order (launch_structure)
        self.ops: dict[tuple[str, str, bool], list[float]] = {}  # (op, where, allowed) -> [runs, modelled µs]

    def add(self, record: dict[str, Any]) -> None:
        self.launches += 1
        self.structure.update(launch_structure(record))
        t = _num(record.get("modelled_time_us"))
        self.total_us += t
        self.by_kernel[str(record.get("kernel", "?"))[:200]] += 1
        self.builtins.update(_int_map(record.get("builtin_counts")))
        self.bytes_moved.update(_int_map(record.get("bytes_moved")))
        split = record.get("time_split_us")
        if isinstance(split, dict):
            for k, v in split.items():
                self.split[str(k)] += _num(v)
        for k, v in _int_map(record.get("onchip_peak_bytes")).items():
            self.peak[k] = max(self.peak.get(k, 0), v)
        self.capacity.update(_int_map(record.get("onchip_capacity_bytes")))
        self.cores_used = max(self.cores_used, int(_num(record.get("cores_used"), 1)))
        if t > self._main_time:
            # Only what the summary shows of the longest launch is kept, not the record.
            self.main = {k: record.get(k) for k in ("dim", "func_type", "device")}
            self._main_time = t
        self._add_diagnostics(record.get("diagnostics"))
        if t > self._timeline_time and isinstance(record.get("timeline"), dict):
            # The emulator times only a call's first launches (repeats launch alike): the longest of those.
            timeline = read_timeline(record["timeline"], str(record.get("kernel", "?"))[:200])
            if timeline is not None:
                self.timeline, self._timeline_time = timeline, t

    def add_op(self, record: dict[str, Any]) -> None:
        """A torch operator the replay ran on the device (replay_ops.py): its modelled time counts in the stage's,
        as its own row of the time split (no work hides in torch)."""
        t = _num(record.get("modelled_time_us"))
        self.total_us += t
        self.split[TORCH_OPS_SPLIT] += t
        key = (str(record.get("op", "?"))[:120], str(record.get("where") or "")[:200], record.get("allowed") is True)
        if key in self.ops or len(self.ops) < MAX_TORCH_OPS:
            totals = self.ops.setdefault(key, [0, 0.0])
            totals[0] += 1
            totals[1] += t

    def _add_diagnostics(self, diags: Any) -> None:
        if not isinstance(diags, list):
            return
        for diag in diags:
            if not isinstance(diag, dict) or len(self.diagnostics) >= MAX_DIAGNOSTICS:
                continue
            key = (str(diag.get("kind", ""))[:200], str(diag.get("message", ""))[:2000])
            if key in self._seen:
                continue
            self._seen.add(key)
            severity = diag.get("severity") if diag.get("severity") in ("error", "warning", "note") else "error"
            line = diag.get("line")
            self.diagnostics.append(EmuDiagnostic(
                severity=severity, kind=key[0] or "unknown", message=key[1],
                kernel=str(diag["kernel"])[:200] if diag.get("kernel") else None,
                location=SourceLocation(file=str(diag["file"])[:500] if diag.get("file") else None,
                                        line=line if isinstance(line, int) and not isinstance(line, bool) else None)))

    def summary(self, invocations: int, device: str) -> TraceSummary | None:
        """Per-invocation summary: a call's trace holds every invocation (checked call, warm-ups, timed repeats)."""
        if not self.launches:
            return None
        invocations = max(1, invocations)
        dim = self.main.get("dim")
        dims = (tuple(int(_num(d, 1)) for d in dim[:3]) if isinstance(dim, list) and len(dim) >= 3 else (1, 1, 1))
        names = [k for k, _ in self.by_kernel.most_common()]
        kernel = names[0] + (f" (+{len(names) - 1} more)" if len(names) > 1 else "")
        return TraceSummary(
            kernel=kernel,
            dim=dims,  # type: ignore[arg-type]
            func_type=str(self.main.get("func_type") or "BLOCK"),
            device_profile=str(self.main.get("device") or device),
            modelled_time_us=self.total_us / invocations,
            time_split_us={k: v / invocations for k, v in self.split.items()},
            bytes_moved={k: v // invocations for k, v in self.bytes_moved.items()},
            onchip_peak_bytes=self.peak,
            onchip_capacity_bytes=self.capacity,
            builtin_counts={k: v // invocations for k, v in self.builtins.items()},
            cores_used=self.cores_used,
            launches=max(1, self.launches // invocations),
            diagnostics=self.diagnostics,
            timeline=self.timeline,
            torch_ops=[TorchOp(op=op, where=where, allowed=allowed, count=max(1, int(runs) // invocations),
                               modelled_us=us / invocations)
                       for (op, where, allowed), (runs, us) in self.ops.items()],
        )


def read_timeline(raw: dict[str, Any], kernel: str) -> Timeline | None:
    """A launch record's "timeline" (runtime/exec.cpp timeline_json), checked and capped; None when malformed.
    Lanes and kinds are indices into the record's own name lists, kept only where the host knows the name."""
    lanes, kinds, events = raw.get("lanes"), raw.get("kinds"), raw.get("events")
    clock = _num(raw.get("clock_mhz"))
    if not (isinstance(lanes, list) and isinstance(kinds, list) and isinstance(events, list)) or clock <= 0:
        return None
    cores = int(_num(raw.get("cores")))
    if not 0 < cores <= 1024:
        return None
    kept: list[TimelineEvent] = []
    for ev in events[:TIMELINE_MAX_EVENTS]:
        if not (isinstance(ev, list) and len(ev) == 5 and all(isinstance(x, int) and not isinstance(x, bool)
                                                               for x in ev)):
            return None
        core, lane, kind, start, end = ev
        if not (0 <= core < cores and 0 <= lane < len(lanes) and 0 <= kind < len(kinds) and 0 <= start <= end):
            return None
        if lanes[lane] in TIMELINE_LANES and kinds[kind] in TIMELINE_KINDS:
            kept.append(TimelineEvent(core, lanes[lane], kinds[kind], start, end))
    makespan = max([int(_num(raw.get("makespan")))] + [ev.end for ev in kept])
    return Timeline(kernel=kernel, clock_mhz=clock, makespan_cycles=makespan,
                    merged_within_cycles=int(_num(raw.get("merged_within"))), union=int(_num(raw.get("union"))),
                    cores=cores, events=kept)


@dataclass
class TraceReading:
    """One call's trace as far as it verified: running totals, output records and integrity findings."""

    present: bool = False
    launches: TraceAccumulator = field(default_factory=TraceAccumulator)
    records: int = 0
    findings: list[str] = field(default_factory=list)  # the reader's own: signature, format, order, caps

    @property
    def launch_count(self) -> int:
        return self.launches.launches

    @property
    def diagnostics(self) -> list[EmuDiagnostic]:
        return self.launches.diagnostics

    def summary(self, invocations: int, device: str) -> TraceSummary | None:
        return self.launches.summary(invocations, device)


def read_trace(path: Path, key: bytes, call_id: str, checker: CallIntegrity | None = None,
               root: Path | None = None) -> TraceReading:
    """Stream and verify `path`; verified records go to the summary and to `checker` as they come."""
    reading = TraceReading()
    key_call = call_key(key, call_id)
    try:
        stream = open_capped(path, TRACE_MAX_BYTES, root)
    except UntrustedFileError as exc:
        if path.name and not _exists(path):
            return reading  # no launch wrote a line: the judge decides "not using a kernel"
        reading.present = True
        reading.findings.append(f"the trace cannot be read: {exc}")
        return reading
    reading.present = True
    expected_seq = 0
    with stream:
        try:
            for number, line, problem in trace_lines(stream):
                if line is not None:
                    problem = _check_line(line, key_call, call_id, expected_seq, reading, checker)
                if problem is not None:
                    reading.findings.append(f"the trace has {problem}" if number > TRACE_MAX_RECORDS
                                            else f"trace line {number}: {problem}")
                    break
                expected_seq += 1
        except UntrustedFileError as exc:
            reading.findings.append(f"the trace cannot be read: {exc}")
    return reading


def _exists(path: Path) -> bool:
    return path.is_symlink() or path.exists()


def _check_line(line: bytes, key_call: bytes, call_id: str, expected_seq: int, reading: TraceReading,
                checker: CallIntegrity | None) -> str | None:
    """None when the line (without its newline) verified and was counted; else what is wrong with it."""
    payload = verify_line(key_call, line)
    if payload is None:
        return "its signature does not verify with this call's key (not written by the emulator runtime)"
    try:
        record = json.loads(payload.decode("utf-8"), parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        return f"not plain JSON ({type(exc).__name__}: {str(exc)[:120]})"
    if not isinstance(record, dict):
        return "not a JSON object"
    if record.get("call") != call_id:
        return f"names call {str(record.get('call'))[:80]!r}, expected {call_id!r}"
    seq = record.get("seq")
    if seq != expected_seq or isinstance(seq, bool):
        return f"sequence number {str(seq)[:40]}, expected {expected_seq} (a record is missing or out of order)"
    kind = record.get("record")
    reading.records += 1
    if kind == RecordKind.LAUNCH:
        reading.launches.add(record)
        if checker is not None:
            checker.launch(record)
    elif kind == RecordKind.OP:
        if checker is not None:
            checker.op(record)
        reading.launches.add_op(record)
    elif kind == RecordKind.OUTPUT:
        if checker is not None:
            checker.output(record)
    else:
        return f"unknown record kind {str(kind)[:40]!r}"
    return None


def launch_structure(record: dict[str, Any]) -> bytes:
    """What an honest launch has alike whatever its inputs: its kernel, grid, function type and cores. A run and
    its replay on other inputs launch alike; a run whose records were rewritten does not."""
    return json.dumps([str(record.get("kernel"))[:200], str(record.get("dim"))[:100],
                       str(record.get("func_type"))[:40], str(record.get("cores_used"))[:20]]).encode() + b"\n"


def run_structure(path: Path, call_id: str, root: Path | None = None) -> tuple[int, str]:
    """The launch structure the run's own process recorded (unsigned: nothing in it is believed, it is only
    compared with the replay's): (launches, digest)."""
    digest = hashlib.sha256()
    launches = 0
    try:
        with open_capped(path, TRACE_MAX_BYTES, root) as stream:
            for _number, line, problem in trace_lines(stream):
                if problem is not None or line is None:
                    break
                parts = split_line(line)
                try:
                    record = json.loads(parts[1].decode("utf-8"), parse_constant=_reject_constant) if parts else None
                except (UnicodeDecodeError, ValueError, RecursionError):
                    record = None
                if not isinstance(record, dict) or record.get("call") != call_id:
                    continue
                if record.get("record") == RecordKind.LAUNCH:
                    launches += 1
                    digest.update(launch_structure(record))
    except (UntrustedFileError, OSError):
        pass
    return launches, digest.hexdigest()


def summarise_records(records: list[dict[str, Any]], invocations: int, device: str) -> TraceSummary | None:
    """Summary of already-trusted launch records (tests, calibration)."""
    acc = TraceAccumulator()
    for record in records:
        acc.add(record)
    return acc.summary(invocations, device)
