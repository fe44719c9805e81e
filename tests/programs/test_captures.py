"""The host's reading of a program's signed launch records and captured segments (grader/programs/captures.py),
on records signed here with the protocol's own signer and files written with numpy."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from bang_harness.protocol import call_key, program_key, sign_line

from grader.programs.captures import CaptureError, load_rows, read_launches

MASTER = bytes(range(32))


def _segment(folder: Path, name: str, data: np.ndarray, offset: int) -> dict:
    np.save(folder / name, data)
    return {"offset": offset, "bytes": data.nbytes, "sha256": hashlib.sha256(data.tobytes()).hexdigest()}


def _record(arg: dict, seq: int = 0) -> dict:
    return {"record": "launch", "call": "", "seq": seq, "kernel": "k", "capture": {"index": 0, "args": [arg]}}


def test_head_and_tail_segments_give_the_rows_they_cover(tmp_path: Path) -> None:
    matrix = np.arange(10 * 4, dtype=np.float32).reshape(10, 4)
    flat = matrix.ravel()
    # head: 2.5 rows (the half row is dropped), tail: the last 3 rows
    head = _segment(tmp_path, "l0_a0_in0.npy", flat[:10], 0)
    tail = _segment(tmp_path, "l0_a0_in1.npy", flat[28:], 28 * 4)
    record = _record({"kind": "ptr", "dtype": "<f4", "bytes": flat.nbytes, "in": [head, tail]})
    rows, values = load_rows(tmp_path, record, 0, "in", 10, 4)
    assert rows.tolist() == [0, 1, 7, 8, 9]
    np.testing.assert_array_equal(values, matrix[[0, 1, 7, 8, 9]])


def test_a_file_that_differs_from_its_signed_digest_is_refused(tmp_path: Path) -> None:
    data = np.ones(8, dtype=np.float32)
    seg = _segment(tmp_path, "l0_a0_in0.npy", data, 0)
    np.save(tmp_path / "l0_a0_in0.npy", data * 2)
    record = _record({"kind": "ptr", "dtype": "<f4", "bytes": data.nbytes, "in": [seg]})
    with pytest.raises(CaptureError, match="signed digest"):
        load_rows(tmp_path, record, 0, "in", 2, 4)


def test_only_lines_signed_with_the_programs_own_key_verify(tmp_path: Path) -> None:
    key = program_key(MASTER, "01_scalar")
    lines = [sign_line(call_key(key, ""), json.dumps(_record({"kind": "int", "value": 3}, seq)).encode())
             for seq in range(2)]
    (tmp_path / "trace.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    assert len(read_launches(tmp_path / "trace.jsonl", key).records) == 2
    other = read_launches(tmp_path / "trace.jsonl", program_key(MASTER, "02_scalar_nram"))
    assert not other.records and "does not verify" in other.findings[0]
    (tmp_path / "trace.jsonl").write_bytes(lines[1] + b"\n")  # seq 1 first: a dropped record
    assert "unexpected call, seq" in read_launches(tmp_path / "trace.jsonl", key).findings[0]
