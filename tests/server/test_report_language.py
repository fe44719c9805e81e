"""The course server draws a stored report in the language of whoever opens it (issue 39 item 1: through the one
rendering, orchestration/job.report_html): a real SQLite database, a stored result graded in English, opened by a
student whose page is in Chinese, and the other way round."""

from __future__ import annotations

from pathlib import Path

from factories import grade_result
from sqlalchemy import select

from grader.server.accounts import add_account
from grader.server.admin import ensure_assignment
from grader.server.db import Assignment, Database, Result, Student, Submission, migrate, now
from grader.server.views import result_of


def _stored(tmp_path: Path, lang: str) -> tuple[Database, int, Student]:
    url = f"sqlite:///{tmp_path / 'server.db'}"
    migrate(url)
    db = Database(url)
    ensure_assignment(db, "sigmoid")
    add_account(db, "s1", "Student One")
    result = grade_result(lang=lang)
    with db.session() as s:
        student = s.scalar(select(Student).where(Student.student_id == "s1"))
        assignment = s.scalar(select(Assignment).where(Assignment.name == "sigmoid"))
        sub = Submission(student_pk=student.id, assignment_pk=assignment.id, mode="final",
                         content_hash="0" * 64, queue="q", status="done", in_flight=None, submitted_at=now())
        s.add(sub)
        s.flush()
        s.add(Result(submission_pk=sub.id, document=result.to_json(), committed_at=now()))
        s.flush()
        sub_id = sub.id
        s.expunge(student)
    return db, sub_id, student


def test_a_report_graded_in_english_opens_in_chinese_for_a_chinese_page(tmp_path: Path) -> None:
    db, sub_id, student = _stored(tmp_path, "en")
    document, stored = result_of(db, sub_id, student)
    assert '<html lang="en"' in stored
    _, zh = result_of(db, sub_id, student, "zh")
    assert '<html lang="zh' in zh and zh != stored
    assert "得分" in zh or "分数" in zh, zh[:2000]
    assert result_of(db, sub_id, student, "en")[1] == stored  # its own language: the stored report itself
    assert result_of(db, sub_id, student, "zh")[0] == document  # the results document is never rewritten


def test_a_report_graded_in_chinese_opens_in_english_for_an_english_page(tmp_path: Path) -> None:
    db, sub_id, student = _stored(tmp_path, "zh")
    _, stored = result_of(db, sub_id, student)
    _, en = result_of(db, sub_id, student, "en")
    assert '<html lang="zh' in stored and '<html lang="en"' in en
