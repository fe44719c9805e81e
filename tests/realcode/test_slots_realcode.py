"""The public lab answers graded by `grade batch` with their run sandboxes in slot containers (BANG_GRADER_SLOTS=1,
grader.sandbox.slot_runner) get the gradebook of plain containers, row for row: code nobody here wrote, as a
class of students hands it in. Every available answer of an assignment is one student of a class; both batches
use one seed and one build cache (the second batch's builds are warm, which changes no grade). Runs with
REALCODE_GRADE=1 where the mirrors are fetched and slots can run (root, a local Docker daemon); skips visibly
elsewhere."""

from __future__ import annotations

import csv
import io
import uuid
from pathlib import Path

import pytest

from grader.sandbox import slot_runner
from grader.sandbox.docker_settings import TAG_ENV
from tests.realcode import answers
from tests.realcode.conftest import GRADE, require_grader
from tests.sandbox.container_events import Created


@pytest.mark.parametrize("assignment", ["sigmoid", "matmul"])
def test_public_answers_grade_alike_in_slots_and_plain_containers(assignment: str, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    require_grader()
    if not GRADE:
        pytest.skip("real gradings of public answers run with REALCODE_GRADE=1")
    if not slot_runner.slots_possible():
        pytest.skip("slots need root, mount and a local Docker daemon sharing our mount namespace")
    found = [a for a in answers.ANSWERS if a.assignment == assignment and answers.available(a)]
    if not found:
        pytest.skip(f"no mirror of any public {assignment} answer (tests/realcode/answers.py names them)")
    from grader.batch.similarity import SimilarityOptions
    from grader.drivers.batch import run_batch

    class_dir = tmp_path / "class"
    for answer in found:
        answers.stage(answer, class_dir / answer.key)
    (tmp_path / "no-references").mkdir()
    monkeypatch.setenv(TAG_ENV, uuid.uuid4().hex)
    monkeypatch.setenv(slot_runner.SLOTS_ENV, "0")
    books, created = {}, {}
    for mode in ("plain", "slots"):
        if mode == "slots":
            monkeypatch.setenv(slot_runner.SLOTS_ENV, "1")
        with Created() as created[mode]:
            run_batch(class_dir, assignment, tmp_path / mode, workers=2, sandbox="docker", progress=False,
                      seed="realcode-slots", reference_root=tmp_path / "no-references",
                      similarity=SimilarityOptions(enabled=False))
        books[mode] = {row["student_id"]: row for row in
                       csv.DictReader(io.StringIO((tmp_path / mode / "gradebook.csv").read_text()))
                       if row["student_id"] != "(points possible)"}
    assert set(books["slots"]) == {a.key for a in found}
    differ = {key: (row, books["slots"][key]) for key, row in books["plain"].items() if books["slots"][key] != row}
    assert not differ, differ
    assert created["slots"].get("slot", 0) >= 1 and created["plain"].get("slot", 0) == 0, created  # really in slots
    assert created["slots"].get("run:run", 0) == created["slots"].get("run:replay", 0) == 0, created  # all of them
