"""The resumable store: keys, atomic commits, the manifest's secret seed, the journal."""

from __future__ import annotations

import dataclasses
import json
import os
import stat

from conftest import make_result

from grader.atomic_file import atomic_write_text
from grader.batch.store import KeyParts, ResultStore
from grader.results import Verdict

PARTS = KeyParts(student_id="s1", assignment="matmul", content_hash="c" * 64, spec_hash="s" * 24,
                 grader_version="0.1.0", backend="emu", device="", seed_digest="d" * 16)


def test_key_changes_with_every_part_and_only_then():
    assert PARTS.key() == dataclasses.replace(PARTS).key()
    keys = {PARTS.key()}
    for name in (f.name for f in dataclasses.fields(KeyParts)):
        keys.add(dataclasses.replace(PARTS, **{name: "other"}).key())
    assert len(keys) == 1 + len(dataclasses.fields(KeyParts))


def test_save_load_and_done(tmp_path):
    store = ResultStore(tmp_path)
    key = PARTS.key()
    assert store.load(key) is None and not store.is_done(key)
    store.save(key, make_result("s1"))
    assert store.load(key).student.id == "s1" and store.is_done(key)
    assert not list(store.results_dir.glob(".*.tmp"))  # no temp files left behind


def test_internal_errors_are_retried_unless_asked_not_to(tmp_path):
    store = ResultStore(tmp_path)
    store.save("k", make_result("s1", verdict=Verdict.INTERNAL_ERROR))
    assert not store.is_done("k")
    assert store.is_done("k", retry_internal_errors=False)
    store.save("k2", make_result("s2", verdict=Verdict.COMPILE_ERROR))
    assert store.is_done("k2")  # the student's own failure is a grade


def test_a_torn_result_counts_as_not_done(tmp_path):
    store = ResultStore(tmp_path)
    store.result_path("k").write_text('{"schema_version": "1.0", "student": ')
    assert store.load("k") is None and not store.is_done("k")


def test_atomic_write_replaces_whole_file(tmp_path):
    target = tmp_path / "f.json"
    atomic_write_text(target, "old")
    atomic_write_text(target, "new", mode=0o600)
    assert target.read_text() == "new"
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["f.json"]


def test_manifest_keeps_the_secret_seed_across_runs(tmp_path):
    store = ResultStore(tmp_path)
    first = store.load_or_create_manifest("matmul", "emu", None)
    assert first.seed_mode == "secret" and len(first.seed) == 32
    assert stat.S_IMODE(os.stat(store.manifest_path).st_mode) == 0o600
    assert store.load_or_create_manifest("matmul", "emu", None).seed == first.seed  # resume: same seed
    public = store.load_or_create_manifest("matmul", "emu", "42")
    assert (public.seed_mode, public.seed) == ("public", "42")


def test_journal_survives_a_torn_last_line(tmp_path):
    store = ResultStore(tmp_path)
    store.log("done", key="a", seconds=1.5)
    store.log("done", key="b", seconds=2.5)
    with open(store.journal_path, "a") as fh:
        fh.write('{"event": "done", "key": "c", "sec')  # the batch was killed mid-write
    events = store.journal()
    assert [e["key"] for e in events] == ["a", "b"]
    assert [e["seconds"] for e in events] == [1.5, 2.5]
    json.dumps(events)
