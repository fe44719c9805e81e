"""Summarises an emulator trace (JSON Lines, one record per kernel launch) into results.TraceSummary.

The trace is written inside the sandbox, so it is read size-capped and every field is coerced; a malformed
record is skipped, never trusted blindly.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from grader.results import EmuDiagnostic, SourceLocation, TraceSummary
from grader.sandbox.capped import UntrustedFileError, read_bytes_capped

TRACE_MAX_BYTES = 32 << 20
MAX_DIAGNOSTICS = 20


def read_trace(path: Path, root: Path | None = None) -> list[dict[str, Any]]:
    try:
        data = read_bytes_capped(path, TRACE_MAX_BYTES, root)
    except (UntrustedFileError, OSError):
        return []
    records = []
    for line in data.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            records.append(record)
    return records


def _num(value: Any, default: float = 0.0) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else default


def _int_map(value: Any) -> dict[str, int]:
    if not isinstance(value, dict):
        return {}
    return {str(k): int(v) for k, v in value.items() if isinstance(v, int | float) and not isinstance(v, bool)}


def diagnostics_of(records: list[dict[str, Any]]) -> list[EmuDiagnostic]:
    out: list[EmuDiagnostic] = []
    seen: set[tuple[str, str]] = set()
    for record in records:
        for diag in record.get("diagnostics") or []:
            if not isinstance(diag, dict) or len(out) >= MAX_DIAGNOSTICS:
                continue
            key = (str(diag.get("kind", "")), str(diag.get("message", "")))
            if key in seen:
                continue
            seen.add(key)
            severity = diag.get("severity") if diag.get("severity") in ("error", "warning", "note") else "error"
            line = diag.get("line")
            out.append(EmuDiagnostic(
                severity=severity, kind=key[0] or "unknown", message=key[1][:2000],
                kernel=str(diag["kernel"]) if diag.get("kernel") else None,
                location=SourceLocation(file=str(diag["file"]) if diag.get("file") else None,
                                        line=int(line) if isinstance(line, int) else None)))
    return out


def summarise_trace(records: list[dict[str, Any]], invocations: int, device: str) -> TraceSummary | None:
    """Per-invocation summary: a call's trace holds every invocation (checked call, warm-ups, timed repeats)."""
    if not records:
        return None
    invocations = max(1, invocations)
    by_kernel: Counter[str] = Counter()
    builtins: Counter[str] = Counter()
    bytes_moved: Counter[str] = Counter()
    split: Counter[str] = Counter()
    peak: dict[str, int] = {}
    capacity: dict[str, int] = {}
    main: dict[str, Any] = records[0]
    main_time = -1.0
    for record in records:
        t = _num(record.get("modelled_time_us"))
        by_kernel[str(record.get("kernel", "?"))] += 1
        builtins.update(_int_map(record.get("builtin_counts")))
        bytes_moved.update(_int_map(record.get("bytes_moved")))
        for k, v in (record.get("time_split_us") or {}).items():
            split[str(k)] += _num(v)
        for k, v in _int_map(record.get("onchip_peak_bytes")).items():
            peak[k] = max(peak.get(k, 0), v)
        capacity.update(_int_map(record.get("onchip_capacity_bytes")))
        if t > main_time:
            main, main_time = record, t
    dim = main.get("dim")
    dims = tuple(int(d) for d in dim[:3]) if isinstance(dim, list) and len(dim) >= 3 else (1, 1, 1)
    names = [k for k, _ in by_kernel.most_common()]
    kernel = names[0] + (f" (+{len(names) - 1} more)" if len(names) > 1 else "")
    return TraceSummary(
        kernel=kernel,
        dim=dims,  # type: ignore[arg-type]
        func_type=str(main.get("func_type", "BLOCK")),
        device_profile=str(main.get("device", device)),
        modelled_time_us=sum(_num(r.get("modelled_time_us")) for r in records) / invocations,
        time_split_us={k: v / invocations for k, v in split.items()},
        bytes_moved={k: v // invocations for k, v in bytes_moved.items()},
        onchip_peak_bytes=peak,
        onchip_capacity_bytes=capacity,
        builtin_counts={k: v // invocations for k, v in builtins.items()},
        cores_used=max(int(_num(r.get("cores_used"), 1)) for r in records),
        launches=max(1, len(records) // invocations),
        diagnostics=diagnostics_of(records),
    )
