"""The host's reading of one program's run: its signed launch records and the buffers captured at each launch.

Nothing the program printed is believed. A launch record counts only when its line verifies under the program's
key (bang_harness.protocol.program_key), with call "" and seq 0, 1, 2 ...; a captured file counts only when its
bytes hash to the segment's sha256 in that record. Names of the files are the host's own (from the record's
capture index), never read from the record.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from bang_harness.protocol import (
    TRACE_MAX_BYTES,
    TRACE_MAX_LINE_BYTES,
    TRACE_MAX_RECORDS,
    call_key,
    verify_line,
)

from grader.sandbox.capped import UntrustedFileError, load_npy_expected, read_bytes_capped

CAPTURE_DTYPES = {"<f4": np.float32, "<f2": np.float16, "<f8": np.float64}


@dataclass
class Launches:
    records: list[dict[str, Any]] = field(default_factory=list)
    findings: list[str] = field(default_factory=list)


def read_launches(trace: Path, master: bytes) -> Launches:
    """The verified launch records of a program's trace; the first bad line is a finding and ends the reading."""
    out = Launches()
    try:
        data = read_bytes_capped(trace, TRACE_MAX_BYTES, trace.parent)
    except FileNotFoundError:
        return out
    except UntrustedFileError as exc:
        out.findings.append(str(exc))
        return out
    key = call_key(master, "")
    for seq, line in enumerate(data.splitlines()):
        payload = verify_line(key, line) if len(line) <= TRACE_MAX_LINE_BYTES else None
        record = _json_object(payload) if payload is not None else None
        if record is None or seq >= TRACE_MAX_RECORDS:
            out.findings.append(f"trace line {seq + 1} does not verify (signature, size or JSON)")
            break
        if record.get("call") != "" or record.get("seq") != seq or record.get("record") != "launch":
            out.findings.append(f"trace line {seq + 1}: unexpected call, seq or record kind")
            break
        out.records.append(record)
    return out


def _json_object(payload: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(payload, parse_constant=_reject)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _reject(name: str) -> None:
    raise ValueError(name)


class CaptureError(Exception):
    """A captured argument is missing, malformed, or does not match its signed digest."""


def int_arg(record: dict[str, Any], index: int) -> int:
    args = (record.get("capture") or {}).get("args") or []
    if index >= len(args) or args[index].get("kind") != "int" or not isinstance(args[index].get("value"), int):
        raise CaptureError(f"argument {index} was not captured as an integer")
    return int(args[index]["value"])


def pointer_arg(record: dict[str, Any], index: int) -> dict[str, Any]:
    args = (record.get("capture") or {}).get("args") or []
    if index >= len(args) or args[index].get("kind") != "ptr":
        raise CaptureError(f"argument {index} does not point into device memory")
    return args[index]


def load_rows(folder: Path, record: dict[str, Any], index: int, phase: str, rows: int,
              cols: int) -> tuple[np.ndarray, np.ndarray]:
    """(row indices, rows x cols array) of the rows of a row-major matrix argument its captured segments cover
    completely, each segment's file checked against the record's sha256."""
    arg = pointer_arg(record, index)
    dtype = CAPTURE_DTYPES.get(arg.get("dtype"))
    if dtype is None:
        raise CaptureError(f"argument {index} has element type {arg.get('dtype')!r}, not floating point")
    itemsize = np.dtype(dtype).itemsize
    row_bytes = cols * itemsize
    if not isinstance(arg.get("bytes"), int) or arg["bytes"] < rows * row_bytes:
        raise CaptureError(f"argument {index} points at {arg.get('bytes')} bytes, fewer than {rows}x{cols} elements")
    capture_index = int((record.get("capture") or {}).get("index", -1))
    row_ids, blocks = [], []
    for s, seg in enumerate(arg.get(phase) or []):
        offset, nbytes = int(seg["offset"]), int(seg["bytes"])
        if offset % itemsize or nbytes % itemsize:
            raise CaptureError(f"argument {index}: segment {s} is not element-aligned")
        path = folder / f"l{capture_index}_a{index}_{phase}{s}.npy"
        array = load_npy_expected(path, (nbytes // itemsize,), dtype, root=folder)
        if hashlib.sha256(array.tobytes()).hexdigest() != seg.get("sha256"):
            raise CaptureError(f"{path.name} does not match the signed digest of argument {index}")
        first = -(-offset // row_bytes)
        last = min(rows, (offset + nbytes) // row_bytes)
        if last > first:
            start = (first * row_bytes - offset) // itemsize
            blocks.append(array[start:start + (last - first) * cols].reshape(last - first, cols))
            row_ids.append(np.arange(first, last))
    if not blocks:
        raise CaptureError(f"argument {index} ({phase}) was not captured (capture cap reached?)")
    return np.concatenate(row_ids), np.concatenate(blocks)
