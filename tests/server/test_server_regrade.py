"""Grading jobs never lose a result (issue 40 item 6; PrairieLearn's habit): a regrade keeps the result it
replaces on the pages, in the API and on the leaderboard until the new one is committed (grading.commit_result,
the real commit point), a regrade the grader fails on keeps it and says so, a redelivered commit counts once,
and a cancelled job (a first grading or a queued regrade) is never graded. The real app in process, on SQLite
and PostgreSQL; the gradings' results are committed as a worker commits them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from course import course, stored
from factories import grade_result
from sqlalchemy import select

from grader.i18n import use_language
from grader.results import StageResult, Timing, Verdict
from grader.server.accounts import set_leaderboard
from grader.server.db import Student
from grader.server.grading import commit_result, grade_uploaded
from grader.server.workers import worker_gone


def graded(score: float, verdict: Verdict = Verdict.PASSED, median_us: float = 100.0):  # noqa: ANN201
    stage = StageResult(name="vector", title="vector", entry="sigmoid", points=score, points_possible=100,
                        correct=verdict is Verdict.PASSED, verdict=verdict,
                        timing=Timing(source="modelled", median_us=median_us, min_us=median_us, max_us=median_us,
                                      spread=0.0, repeats=3))
    return grade_result(assignment="sigmoid", score=score, verdict=verdict, stages=[stage] if score else [],
                        message="the grader failed: the sandbox vanished" if verdict is Verdict.INTERNAL_ERROR else "")


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_a_regrade_keeps_the_old_result_until_the_new_one_is_committed(kind: str, tmp_path: Path) -> None:
    with use_language("en"), course(kind, tmp_path, ["ann", "bob"]) as c:
        sub = stored(c, "ann")
        assert commit_result(c.db, sub, graded(80.0)) == "committed"
        with c.db.session() as s:
            set_leaderboard(c.db, s.scalar(select(Student).where(Student.student_id == "ann")), True)
        teacher, ann = c.api("teacher"), c.api("ann")

        def shown() -> tuple[float, list]:
            return (ann.get(f"/api/submissions/{sub}/result").json()["score"],
                    ann.get("/api/leaderboard/sigmoid").json().get("vector", []))

        assert shown()[0] == 80.0 and len(shown()[1]) == 1
        # the regrade is queued: the old result stays shown (API, report, leaderboard, the student's page)
        r = teacher.post(f"/api/submissions/{sub}/regrade")
        assert r.status_code == 200 and c.queued[-1][0] == sub, r.text
        state = ann.get(f"/api/submissions/{sub}").json()
        assert (state["status"], state["graded"], state["generation"], state["score"]) == ("queued", True, 1, 80.0)
        assert shown()[0] == 80.0 and len(shown()[1]) == 1
        assert ann.get(f"/api/submissions/{sub}/report").status_code == 200
        with c.page("ann") as page:
            row = re.search(rf'<tr id="sub-{sub}"[^>]*>(.*?)</tr>', page.get("/").text, re.S).group(1)
            assert f'href="/submissions/{sub}/report"' in row, row
        assert teacher.post(f"/api/submissions/{sub}/regrade").status_code == 409  # in flight already
        # the grader fails on the regrade: the old result stands, and the pages say the regrade failed
        assert commit_result(c.db, sub, graded(0.0, Verdict.INTERNAL_ERROR), generation=1) == "regrade failed"
        state = ann.get(f"/api/submissions/{sub}").json()
        assert (state["status"], state["score"]) == ("done", 80.0) and "sandbox vanished" in state["regrade_failed"]
        assert shown()[0] == 80.0 and len(shown()[1]) == 1
        with c.page("teacher") as page:
            row = re.search(rf'<tr id="sub-{sub}"[^>]*>(.*?)</tr>', page.get("/instructor").text, re.S).group(1)
            assert "the regrade failed (the grader failed: the sandbox vanished)" in row, row
        # regraded again: replaced at its commit; the same generation delivered twice counts once
        assert teacher.post(f"/api/submissions/{sub}/regrade").status_code == 200
        assert commit_result(c.db, sub, graded(95.0, median_us=50.0), generation=2) == "committed"
        assert commit_result(c.db, sub, graded(10.0), generation=2) == "already committed"
        assert shown()[0] == 95.0 and shown()[1][0]["median_us"] == 50.0
        history = teacher.get(f"/api/submissions/{sub}/history").json()  # the one it replaced is kept
        assert [(h["generation"], h["score"], h["counts"]) for h in history] == [(0, 80.0, False), (2, 95.0, True)]
        assert ann.get(f"/api/submissions/{sub}/history").status_code == 403
        assert ann.get(f"/api/submissions/{sub}").json()["regrade_failed"] is None
        # a queued regrade cancelled: the result before it stays, and its job is never graded
        assert teacher.post(f"/api/submissions/{sub}/regrade").status_code == 200
        assert ann.post(f"/api/submissions/{sub}/cancel").json()["status"] == "done"
        assert grade_uploaded(c.db, sub, worker="w", work_root=tmp_path / "work") == "cancelled"
        assert shown()[0] == 95.0
        # a first grading cancelled is final, frees the slot and is never graded either
        first = stored(c, "bob")
        assert c.api("bob").post(f"/api/submissions/{first}/cancel").json()["status"] == "cancelled"
        assert grade_uploaded(c.db, first, worker="w", work_root=tmp_path / "work") == "cancelled"
        assert c.api("bob").get(f"/api/submissions/{first}").json()["status"] == "cancelled"
        # a regrade of ann's while she has another in flight, or with no live worker: refused, nothing changes
        other = stored(c, "ann")
        r = teacher.post(f"/api/submissions/{sub}/regrade")
        assert r.status_code == 409 and "another submission in flight" in r.json()["error"], r.text
        c.api("ann").post(f"/api/submissions/{other}/cancel")
        worker_gone(c.db, "slot0@here")
        r = teacher.post(f"/api/submissions/{sub}/regrade")
        assert r.status_code == 409 and "no worker grades device type mlu370-x8 now" in r.json()["error"], r.text
        assert ann.get(f"/api/submissions/{sub}").json()["status"] == "done" and shown()[0] == 95.0
