"""The instructor's dashboard for a real class (issue 40 item 8): a class of 500 generated students (1,050
submissions) on SQLite and PostgreSQL, the page rendered a page of 50 at a time with filters (assignment,
status, late), a student's own page, adding an assignment and exporting from the dashboard. The real app in
process; the times of the dashboard's query and render are printed."""

from __future__ import annotations

import io
import re
import secrets
import time
import zipfile
from pathlib import Path

import pytest
from course import course
from factories import grade_result
from sqlalchemy import select

from grader.i18n import use_language
from grader.server.accounts import add_account
from grader.server.db import Assignment, Result, Student, Submission, hash_token, now
from grader.server.views import PAGE_SIZE, class_page

CLASS = 500


def enrol_class(db, size: int) -> None:  # noqa: ANN001
    """`size` students s000..., each with a graded final (every fifth one late) and a graded test run; every
    tenth one has an upload queued."""
    document = grade_result(assignment="sigmoid", score=90.0).to_json()
    with db.session() as s:
        sigmoid = s.scalar(select(Assignment.id).where(Assignment.name == "sigmoid"))
        students = [Student(student_id=f"s{i:03d}", name=f"Student {i}", role="student",
                            token_hash=hash_token(secrets.token_hex(8)), pseudonym=f"kernel-{i:06x}",
                            on_leaderboard=False) for i in range(size)]
        s.add_all(students)
        s.flush()
        subs = []
        for i, student in enumerate(students):
            for mode in ("final", "test"):
                subs.append(Submission(student_pk=student.id, assignment_pk=sigmoid, mode=mode,
                                       content_hash="0" * 64, queue="grade.emu.mlu370-x8", device_type="mlu370-x8",
                                       status="done", in_flight=False, verdict="passed", score=90.0,
                                       max_score=100.0, late=mode == "final" and i % 5 == 0, submitted_at=now()))
            if i % 10 == 0:
                subs.append(Submission(student_pk=student.id, assignment_pk=sigmoid, mode="test",
                                       content_hash="0" * 64, queue="grade.emu.mlu370-x8",
                                       device_type="mlu370-x8", status="queued", in_flight=True,
                                       submitted_at=now()))
        s.add_all(subs)
        s.flush()
        s.add_all([Result(submission_pk=sub.id, document=document, committed_at=now()) for sub in subs if sub.status == "done"])


def rows(html: str) -> list[str]:
    return re.findall(r'<tr id="sub-(\d+)">', html)


def timed(client, path: str) -> tuple[str, float]:  # noqa: ANN001
    started = time.monotonic()
    r = client.get(path)
    assert r.status_code == 200, r.text[:500]
    return r.text, time.monotonic() - started


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_a_class_of_500_pages_filters_and_a_students_own_page(kind: str, tmp_path: Path) -> None:
    with use_language("en"), course(kind, tmp_path, []) as c:
        enrol_class(c.db, CLASS)
        total = CLASS * 2 + CLASS // 10
        started = time.monotonic()
        first = class_page(c.db)
        query = time.monotonic() - started
        assert (first.total, first.pages, len(first.rows)) == (total, -(-total // PAGE_SIZE), PAGE_SIZE)
        with c.page("teacher") as page:
            timings = {}
            html, timings["dashboard"] = timed(page, "/instructor")
            assert len(rows(html)) == PAGE_SIZE and f"{total} submissions; page 1 of {first.pages}" in html
            assert 'id="next" href="/instructor?page=2"' in html and 'id="prev"' not in html
            html, timings["last page"] = timed(page, f"/instructor?page={first.pages}")
            assert len(rows(html)) == total - (first.pages - 1) * PAGE_SIZE and 'id="next"' not in html
            html, timings["queued"] = timed(page, "/instructor?status=queued")
            assert f"{CLASS // 10} submissions; page 1 of 1" in html and len(rows(html)) == CLASS // 10
            assert html.count('class="cancel"') == CLASS // 10  # an instructor can cancel any queued job
            html, timings["late, page 2"] = timed(page, "/instructor?assignment=sigmoid&late=1&page=2")
            assert f"{CLASS // 5} submissions; page 2 of {-(-CLASS // 5 // PAGE_SIZE)}" in html
            assert 'id="prev" href="/instructor?assignment=sigmoid&amp;late=1&amp;page=1"' in html  # the filters kept
            html, timings["one student"] = timed(page, "/instructor/students/s010")
            assert "Submissions of s010 (Student 10)" in html and len(rows(html)) == 3
            assert 'id="assignments"' not in html
            assert page.get("/instructor/students/nobody").status_code == 404
        print(f"\n{kind}: class of {CLASS}, {total} submissions: class_page query {query * 1000:.0f} ms; pages "
              + ", ".join(f"{name} {t * 1000:.0f} ms" for name, t in timings.items()))
        assert max(timings.values()) < 3.0, timings  # a page of 50, whatever the class's size


def test_adding_an_assignment_and_exporting_from_the_dashboard(tmp_path: Path) -> None:
    with use_language("en"), course("sqlite", tmp_path, []) as c:
        enrol_class(c.db, 3)
        with c.page("teacher") as page:
            html = page.get("/instructor").text
            assert re.search(r'<select name="name">.*<option>matmul</option>', html, re.S), html
            r = page.post("/instructor/assignments", data={"csrf": page.csrf, "name": "matmul", "device": ""})
            assert r.status_code == 303, r.text
            html = page.get("/instructor").text
            row = re.search(r'<tr id="assignment-matmul">(.*?)</tr>', html, re.S).group(1)
            assert "<td>no</td>" in row and 'class="open"' in row, row  # closed until opened
            assert "<option>matmul</option>" not in html.split('id="add-assignment"')[1].split("</form>")[0]
            r = page.post("/instructor/assignments", data={"csrf": page.csrf, "name": "nosuch"})
            # a page's refusal is an error page (HTML, in the page's language), saying why
            assert r.status_code == 400 and r.headers["content-type"].startswith("text/html"), r.text
            assert "no assignment &#39;nosuch&#39;" in r.text or "no assignment 'nosuch'" in r.text, r.text
            r = page.post("/instructor/assignments", data={"csrf": "forged", "name": "matmul"})
            assert r.status_code == 403
            r = page.get("/instructor/export/sigmoid.zip")
            assert r.status_code == 200 and r.headers["content-type"] == "application/zip", r.text[:300]
            names = zipfile.ZipFile(io.BytesIO(r.content)).namelist()
            assert any(n.endswith(".csv") for n in names) and sum("s00" in n for n in names) >= 3, names
            assert page.get("/instructor/export/nosuch.zip").status_code == 404
        c.tokens["ann"] = add_account(c.db, "ann")
        with c.page("ann") as page:  # a student gets none of it
            assert page.get("/instructor/export/sigmoid.zip").status_code == 403
            assert page.get("/instructor/students/s000").status_code == 403
            assert page.post("/instructor/assignments", data={"csrf": page.csrf, "name": "matmul"}).status_code == 403


def test_the_demo_class_has_both_assignments(tmp_path: Path) -> None:
    """`grade serve --demo`'s class: sigmoid and matmul (the README's bundled example is a matmul one), each closed
    until its background check opens it (run.serve starts them: jobs.start_open)."""
    from grader.server.db import Database, migrate, sqlite_url
    from grader.server.run import DEMO_ASSIGNMENTS, demo_class
    from grader.server.views import assignments
    from grader.spec import load_assignment

    url = sqlite_url(tmp_path)
    migrate(url)
    tokens = demo_class(url)
    assert set(tokens) == {"instructor", "demo-alice", "demo-bob"}
    example = (Path(__file__).resolve().parents[2] / "reference_kernels" / "example" / "grade.toml").read_text()
    assert 'assignment = "matmul"' in example and "matmul" in DEMO_ASSIGNMENTS
    assert [(a.name, a.open) for a in assignments(Database(url))] == [("matmul", False), ("sigmoid", False)]
    assert all(load_assignment(name) for name in DEMO_ASSIGNMENTS)
