"""The reference-seed guard (grader/drivers/reference_check.py): one function and one key for both records, the
batch's DIR/references.json and the course server's assignment row. What the guard decides from its record is
tested here on a reference folder with nothing to grade; the references really graded on a seed, passing and
failing, are tests/batch/test_batch_real.py's and tests/server/test_server_seed_guard.py's (Docker)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from grader.drivers.batch import assignment_fingerprint
from grader.drivers.reference_check import FileRecord, ReferenceCheck, guard_seed, seed_check_key
from grader.orchestration.options import GradeEnvironment, GradeRequest


def test_a_key_that_passed_is_not_checked_again_and_any_other_key_is(tmp_path: Path) -> None:
    nothing = tmp_path / "references"
    nothing.mkdir()
    request = GradeRequest(assignment="sigmoid", seed_mode="secret", seed="s1")
    environment = GradeEnvironment(sandbox="none")
    record = FileRecord(tmp_path)
    assert record.passed_key() is None
    check = guard_seed("sigmoid", request, environment, record, spec_hash="h", device="mlu370-x8", root=nothing)
    assert check is not None and check.failures == [] and check.references == []
    key = seed_check_key("s1", "h", "emu", "mlu370-x8")
    assert record.passed_key() == key and json.loads((tmp_path / "references.json").read_text())["key"] == key
    assert guard_seed("sigmoid", request, environment, record, spec_hash="h", device="mlu370-x8", root=nothing) is None
    # another device, another spec, another seed: checked again
    assert guard_seed("sigmoid", request, environment, record, spec_hash="h", device="mlu270", root=nothing) is not None
    assert guard_seed("sigmoid", request, environment, record, spec_hash="h2", device="mlu270", root=nothing) is not None
    request = replace(request, seed="s2")
    assert guard_seed("sigmoid", request, environment, record, spec_hash="h2", device="mlu270", root=nothing) is not None
    assert record.passed_key() == seed_check_key("s2", "h2", "emu", "mlu270")
    # a failed check is not remembered as passed (the batch stops instead)
    FileRecord(tmp_path / "other").save(key, ReferenceCheck(["sigmoid/vector"], ["sigmoid/vector: n1 (sigmoid)"]))
    assert FileRecord(tmp_path / "other").passed_key() is None


def test_the_servers_record_is_the_assignments_row(tmp_path: Path) -> None:
    from sqlalchemy import select

    from grader.server.admin import AssignmentSeedRecord, check_seed, ensure_assignment
    from grader.server.db import Assignment, Database, migrate

    url = f"sqlite:///{tmp_path / 'server.db'}"
    migrate(url)
    db = Database(url)
    ensure_assignment(db, "sigmoid")
    nothing = tmp_path / "references"
    nothing.mkdir()
    heard: list[str] = []
    assert check_seed(db, "sigmoid", "none", nothing, heard.append).ran and len(heard) == 1
    with db.session() as s:
        row = s.scalar(select(Assignment).where(Assignment.name == "sigmoid"))
        assert row is not None
        seed, checked = row.seed, row.seed_checked
    assert checked == seed_check_key(seed, assignment_fingerprint("sigmoid").spec_hash, row.backend, row.device)
    assert not check_seed(db, "sigmoid", "none", nothing, heard.append).ran and len(heard) == 1  # once per seed
    AssignmentSeedRecord(db, "sigmoid").save(checked, ReferenceCheck(["a"], ["a: n1 (sigmoid): wrong"]))
    with db.session() as s:
        row = s.scalar(select(Assignment).where(Assignment.name == "sigmoid"))
        assert row is not None and (row.is_open, row.seed_checked, row.seed_failures) == (
            False, None, "a: n1 (sigmoid): wrong")
    assert check_seed(db, "sigmoid", "none", nothing).ran  # a failure is checked again
