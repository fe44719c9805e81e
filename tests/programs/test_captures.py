"""The host's reading of a program's signed launch records and captured segments (grader/programs/captures.py),
on records signed here with the protocol's own signer and files written with numpy."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from bang_harness.protocol import call_key, program_key, sign_line

from grader.programs.captures import (
    CaptureError,
    draw_twin_seeds,
    load_rows,
    read_launches,
    twin_inputs,
    twin_plan,
    twin_values,
)
from grader.programs.spec import load_programs

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


def _lab_launch(folder: Path, left: np.ndarray, right: np.ndarray, index: int = 3) -> dict:
    """A launch record of multiplyMatricesMLU(left, right, result, m, n, k) with left and right captured."""
    (m, n), k = left.shape, right.shape[1]
    args = [{"kind": "ptr", "dtype": "<f4", "bytes": a.nbytes,
             "in": [_segment(folder, f"l{index}_a{i}_in0.npy", a.ravel(), 0)]} for i, a in enumerate((left, right))]
    args += [{"kind": "ptr", "dtype": "<f4", "bytes": m * k * 4, "in": []}] + [{"kind": "int", "value": v}
                                                                            for v in (m, n, k)]
    return {"record": "launch", "call": "", "seq": 0, "kernel": "multiplyMatricesMLU",
            "capture": {"index": index, "args": args}}


def test_the_twin_plan_names_the_graded_launchs_inputs_and_their_shapes() -> None:
    spec, _base = load_programs("matmul_programs")
    plan = twin_plan(spec, {"03_vector_nram": 7})
    # left is m x n (args 3, 4), right n x k (args 4, 5); the result is never substituted
    assert plan == {"kernel": "multiplyMatricesMLU", "operands": [[0, 3, 4], [1, 4, 5]],
                    "seeds": {"03_vector_nram": 7}}
    seeds = draw_twin_seeds({"01_scalar", "02_scalar_nram"})
    assert set(seeds) == {"01_scalar", "02_scalar_nram"} and len(set(seeds.values())) == 2


def test_twin_values_are_lab_like_and_seeded() -> None:
    values = twin_values(11, 3, 0, 0, 4096, np.dtype(np.float32))
    assert values.dtype == np.float32 and 1.0 <= values.min() and values.max() < 1.125 and len(set(values)) > 4000
    np.testing.assert_array_equal(twin_values(11, 3, 0, 100, 10, np.dtype(np.float32)), values[100:110])
    assert not np.array_equal(twin_values(12, 3, 0, 0, 4096, np.dtype(np.float32)), values)  # another seed
    assert not np.array_equal(twin_values(11, 4, 0, 0, 4096, np.dtype(np.float32)), values)  # another launch
    assert not np.array_equal(twin_values(11, 3, 1, 0, 4096, np.dtype(np.float32)), values)  # another operand


def test_the_graded_inputs_must_be_the_twin(tmp_path: Path) -> None:
    """The host redraws the twin: captured inputs that are the program's own data (a replay that did not
    substitute them) are refused, the twin's are taken."""
    spec, _base = load_programs("matmul_programs")
    m, n, k, seed = 6, 5, 4, 99
    left = twin_values(seed, 3, 0, 0, m * n, np.dtype(np.float32)).reshape(m, n)
    right = twin_values(seed, 3, 1, 0, n * k, np.dtype(np.float32)).reshape(n, k)
    rows, got_left, got_right = twin_inputs(tmp_path, _lab_launch(tmp_path, left, right), spec, seed, m, n, k)
    assert rows.tolist() == list(range(m))
    np.testing.assert_array_equal(got_left, left)
    np.testing.assert_array_equal(got_right, right)
    own = np.full((m, n), 1.05, dtype=np.float32)
    with pytest.raises(CaptureError, match="left .* not the grader's twin"):
        twin_inputs(tmp_path, _lab_launch(tmp_path, own, right), spec, seed, m, n, k)
    with pytest.raises(CaptureError, match="twin"):
        twin_inputs(tmp_path, _lab_launch(tmp_path, left, right), spec, seed + 1, m, n, k)
