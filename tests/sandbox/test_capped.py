"""The capped readers against hostile files made on disk: symlinks (name and folder), FIFOs, oversize and
sparse files, pickles and deep JSON."""

from __future__ import annotations

import json
import os
import pickle

import numpy as np
import pytest

from grader.sandbox.capped import (
    UntrustedFileError,
    copy_capped,
    load_npy_capped,
    read_bytes_capped,
    read_json_capped,
)


def test_plain_files_are_read(tmp_path):
    (tmp_path / "out").mkdir()
    np.save(tmp_path / "out" / "c0.npy", np.arange(6, dtype=np.float32).reshape(2, 3))
    (tmp_path / "out" / "c0.json").write_text(json.dumps({"ok": True, "wall_us": [1.5]}))
    array = load_npy_capped(tmp_path / "out" / "c0.npy", 1 << 20, root=tmp_path)
    assert array.shape == (2, 3) and array.dtype == np.float32 and array[1, 2] == 5
    assert read_json_capped(tmp_path / "out" / "c0.json", root=tmp_path) == {"ok": True, "wall_us": [1.5]}


def test_symlinked_file_and_folder_are_refused(tmp_path):
    (tmp_path / "out").mkdir()
    secret = tmp_path / "secret.json"
    secret.write_text('{"hidden": 1}')
    os.symlink(secret, tmp_path / "out" / "c0.json")
    os.symlink(tmp_path, tmp_path / "linked")
    with pytest.raises(UntrustedFileError):
        read_json_capped(tmp_path / "out" / "c0.json", root=tmp_path)
    with pytest.raises(UntrustedFileError):
        read_json_capped(tmp_path / "out" / "c0.json")  # no root: the final component still must not be a link
    with pytest.raises(UntrustedFileError):
        read_json_capped(tmp_path / "linked" / "secret.json", root=tmp_path)
    with pytest.raises(UntrustedFileError):
        read_bytes_capped(tmp_path / "out" / ".." / "secret.json", 100, root=tmp_path)


def test_fifo_does_not_block_and_is_refused(tmp_path):
    os.mkfifo(tmp_path / "c0.json")
    with pytest.raises(UntrustedFileError, match="not a regular file"):
        read_json_capped(tmp_path / "c0.json", root=tmp_path)


def test_oversize_and_sparse_files_are_refused(tmp_path):
    with open(tmp_path / "big.npy", "wb") as f:
        f.seek(1 << 34)
        f.write(b"x")
    with pytest.raises(UntrustedFileError, match="cap"):
        load_npy_capped(tmp_path / "big.npy", 1 << 20, root=tmp_path)
    (tmp_path / "big.json").write_text(" " * 100 + "{}")
    with pytest.raises(UntrustedFileError, match="cap"):
        read_json_capped(tmp_path / "big.json", max_bytes=50)


def test_a_copy_refuses_what_a_read_refuses_and_copies_the_rest_whole(tmp_path):
    """copy_capped (a run's journals into the replay's folder, in the kernel): the bytes, all of them, or nothing
    of a link, a FIFO or a file over the cap."""
    (tmp_path / "out").mkdir()
    data = os.urandom(3 << 20)
    (tmp_path / "out" / "c0.journal").write_bytes(data)
    assert copy_capped(tmp_path / "out" / "c0.journal", tmp_path / "copy", 3 << 20, root=tmp_path) == len(data)
    assert (tmp_path / "copy").read_bytes() == data
    os.symlink(tmp_path / "copy", tmp_path / "out" / "link.journal")
    os.mkfifo(tmp_path / "out" / "fifo.journal")
    for name, why in (("link.journal", "links"), ("fifo.journal", "not a regular file"), ("c0.journal", "cap")):
        with pytest.raises(UntrustedFileError, match=why):
            copy_capped(tmp_path / "out" / name, tmp_path / f"refused-{name}", (3 << 20) - 1, root=tmp_path)
        assert not (tmp_path / f"refused-{name}").exists()


def test_pickles_and_object_arrays_are_refused(tmp_path):
    np.save(tmp_path / "obj.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    (tmp_path / "raw.npy").write_bytes(pickle.dumps([1, 2, 3]))
    for name in ("obj.npy", "raw.npy"):
        with pytest.raises(UntrustedFileError):
            load_npy_capped(tmp_path / name, 1 << 20)


def test_bad_json_is_refused(tmp_path):
    for name, text in (("deep.json", "[" * 100_000 + "]" * 100_000), ("nan.json", '{"t": NaN}'),
                       ("bin.json", b"\xff\xfe".decode("latin-1"))):
        (tmp_path / name).write_text(text, encoding="latin-1")
        with pytest.raises(UntrustedFileError):
            read_json_capped(tmp_path / name)


def _npy_with_header(header: dict, payload: bytes = b"") -> bytes:
    import io as _io

    buffer = _io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, header)
    return buffer.getvalue() + payload


def test_a_header_bomb_is_refused_before_any_allocation(tmp_path):
    """A header claiming 2**40 elements must cost nothing: shape is checked against the expected one first."""
    from grader.sandbox.capped import load_npy_expected

    bomb = tmp_path / "c0.npy"
    bomb.write_bytes(_npy_with_header({"descr": "<f4", "fortran_order": False, "shape": (1 << 40,)}))
    with pytest.raises(UntrustedFileError, match=r"output shape \[1099511627776\] but expected \[4\]"):
        load_npy_expected(bomb, (4,), "float32", root=tmp_path)
    with pytest.raises(UntrustedFileError, match="promises"):  # no expectation: the payload size still must match
        load_npy_capped(bomb, 1 << 20, root=tmp_path)


def test_expected_shape_dtype_and_payload_are_checked(tmp_path):
    from grader.sandbox.capped import load_npy_expected

    good = tmp_path / "ok.npy"
    np.save(good, np.arange(6, dtype=np.float32).reshape(2, 3))
    assert load_npy_expected(good, (2, 3), "float32", root=tmp_path)[1, 2] == 5
    with pytest.raises(UntrustedFileError, match=r"output dtype float32 but expected float16"):
        load_npy_expected(good, (2, 3), "float16", root=tmp_path)
    short = tmp_path / "short.npy"
    short.write_bytes(_npy_with_header({"descr": "<f4", "fortran_order": False, "shape": (4,)}, b"\0" * 8))
    with pytest.raises(UntrustedFileError, match="promises 16 bytes"):
        load_npy_expected(short, (4,), "float32", root=tmp_path)
    weird = tmp_path / "weird.npy"
    weird.write_bytes(_npy_with_header({"descr": [("a", "<f4")], "fortran_order": False, "shape": (1,)}, b"\0" * 4))
    with pytest.raises(UntrustedFileError, match="not a numeric array"):
        load_npy_expected(weird, (1,), None, root=tmp_path)
    fortran = tmp_path / "f.npy"
    np.save(fortran, np.asfortranarray(np.arange(6, dtype=np.float32).reshape(2, 3)))
    assert load_npy_expected(fortran, (2, 3), "float32", root=tmp_path)[1, 2] == 5
