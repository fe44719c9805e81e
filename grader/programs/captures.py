"""The host's reading of one program's run: its signed launch records and the buffers captured at each launch.

Nothing the program printed is believed. A launch record counts only when its line verifies under the program's
key (bang_harness.protocol.program_key), with call "" and seq 0, 1, 2 ...; a captured file counts only when its
bytes hash to the segment's sha256 in that record. Names of the files are the host's own (from the record's
capture index), never read from the record.

Which argument is which is the programs spec's (`args`: pointer and integer positions); OPERANDS adds each
matrix's shape in those integers. The graded launches' inputs are the host's twin, not the program's own data:
the replay overwrites them just before each launch of the kernel (runtime/capture.cpp, from `twin_plan`), and
the host redraws the same values here (`twin_inputs`) and checks the output against them.
"""

from __future__ import annotations

import hashlib
import json
import secrets
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

from grader.programs.spec import ProgramsSpec
from grader.sandbox.capped import UntrustedFileError, load_npy_expected, read_bytes_capped

CAPTURE_DTYPES = {"<f4": np.float32, "<f2": np.float16, "<f8": np.float64}

# The lab kernel's matrices: name -> (rows, cols), each an integer argument's name in the spec's `args`;
# result[m][k] = left[m][n] x right[n][k], all row-major as the kernel receives them.
OPERANDS = {"left": ("M", "K"), "right": ("K", "N"), "result": ("M", "N")}  # the kernel's m, n, k are M, K, N
TWIN_INPUTS = ("left", "right")


@dataclass
class Launches:
    records: list[dict[str, Any]] = field(default_factory=list)
    findings: list[str] = field(default_factory=list)


def read_launches(trace: Path, master: bytes) -> Launches:
    """The verified launch records of a program's trace; the first bad line is a finding and ends the reading."""
    out = Launches()
    if not trace.exists() and not trace.is_symlink():
        return out  # the replay launched nothing, so it wrote no trace
    try:
        data = read_bytes_capped(trace, TRACE_MAX_BYTES, trace.parent)
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


# -- twin inputs (the replay's side is runtime/capture.cpp twin_fill; the two must draw alike) ------------------
_GAMMA = 0x9E3779B97F4A7C15
_MASK = (1 << 64) - 1
# dtype -> (bit pattern of 1.0, right shift of the 64 random bits into the mantissa's low bits): [1, 1.125)
_TWIN_BITS = {np.dtype(np.float32): (np.uint32, 0x3F800000, 44), np.dtype(np.float16): (np.uint16, 0x3C00, 57),
              np.dtype(np.float64): (np.uint64, 0x3FF0000000000000, 15)}


def draw_twin_seeds(stems: list[str] | set[str]) -> dict[str, int]:
    """A fresh secret seed per program and grading: it exists only on the host and in the replay sandbox (never
    where the program's own code runs), and no report of one grading tells anything about the next one's."""
    return {stem: secrets.randbits(64) for stem in stems}


def twin_plan(spec: ProgramsSpec, seeds: dict[str, int]) -> dict[str, Any]:
    """The replay's instructions (bang_harness.protocol.PROGRAM_TWIN_FILE): which kernel, which of its pointer
    arguments are inputs and which integer arguments give their rows and columns, each program's seed."""
    operands = [[spec.args[name], spec.args[OPERANDS[name][0]], spec.args[OPERANDS[name][1]]] for name in TWIN_INPUTS]
    return {"kernel": spec.kernel, "operands": operands, "seeds": dict(seeds)}


def _mix(z: np.ndarray) -> np.ndarray:
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def twin_values(seed: int, capture_index: int, arg: int, first: int, count: int, dtype: np.dtype) -> np.ndarray:
    """Elements [first, first + count) of the twin the replay wrote into pointer argument `arg` before the launch
    with this capture index."""
    kind, one, shift = _TWIN_BITS[np.dtype(dtype)]
    with np.errstate(over="ignore"):
        stream = _mix(np.array([(seed + _GAMMA * (capture_index * 64 + arg + 1)) & _MASK], dtype=np.uint64))[0]
        counters = np.arange(first + 1, first + count + 1, dtype=np.uint64)
        values = _mix(stream + np.uint64(_GAMMA) * counters)
    return (np.asarray(one, dtype=kind) | (values >> np.uint64(shift)).astype(kind)).view(dtype)


def twin_inputs(folder: Path, record: dict[str, Any], spec: ProgramsSpec, seed: int, m: int, n: int,
                k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(captured row indices of left, left's twin at those rows, right's twin) of one graded launch: the
    captured inputs must be the twin the host draws, else the launch was not graded on it (CaptureError)."""
    index = int((record.get("capture") or {}).get("index", -1))
    dims = {"M": m, "K": n, "N": k}
    out = []
    for name in TWIN_INPUTS:
        arg, rows, cols = spec.args[name], dims[OPERANDS[name][0]], dims[OPERANDS[name][1]]
        row_ids, captured = load_rows(folder, record, arg, "in", rows, cols)
        starts = np.flatnonzero(np.diff(row_ids, prepend=-2) != 1)  # runs of consecutive rows (head, tail)
        ends = np.append(starts[1:], len(row_ids))
        twin = np.concatenate([twin_values(seed, index, arg, int(row_ids[a]) * cols, int(b - a) * cols,
                                           captured.dtype) for a, b in zip(starts, ends, strict=True)])
        twin = twin.reshape(-1, cols)
        if twin.shape != captured.shape or twin.tobytes() != captured.tobytes():
            raise CaptureError(f"{name} (argument {arg}) at the launch is not the grader's twin input: it was not "
                               "a floating-point device buffer of its rows x columns, or another argument overlaps it")
        out.append((row_ids, twin))
    (rows_l, left), (_rows_r, right) = out
    return rows_l, left, right
