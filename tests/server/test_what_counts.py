"""What counts, what is pending, who ranks, in the viewer's language (issue 40 items 1, 3, 4): the real app
(FastAPI through TestClient) on a real database, SQLite and PostgreSQL, the results committed through the commit
point (grading.commit_result) as a worker commits them; no grading runs (the results are built, tests/factories).

- counting.py's policy (latest, best, chosen) is the one the export, the student's page, the API (the CLI's) and
  the leaderboard use; a late final shows its raw score, penalty and counted score;
- hidden groups read as pending points, never full marks, and a test run is never a score;
- the leaderboard ranks a stage only where its requirements are met, and marks the viewer's row;
- a late upload is warned before it is taken (the CLI asks the server: check_late);
- the pages' words, errors (HTML on pages), and times (the course's zone) follow the page's language."""

from __future__ import annotations

import csv
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from factories import grade_result
from fastapi.testclient import TestClient
from rich.console import Console
from sqlalchemy import select

from grader.cli.remote_submit import LateNotConfirmed, check_late, counted_line, counting_line, print_remote
from grader.i18n import use_language
from grader.results import GradeResult, GroupScore, RequirementResult, StageResult, Timing, Verdict
from grader.server.accounts import add_account, set_leaderboard
from grader.server.admin import export_finals, release, set_policy
from grader.server.app import create_app
from grader.server.counting import Graded, counting
from grader.server.course_time import set_zone
from grader.server.db import Assignment, Database, Student, Submission, now
from grader.server.grading import commit_result

# sigmoid's groups: `saturation` (10 points) is after_deadline, the rest visible
GROUPS = {"tiny": 10, "aligned": 10, "tail": 20, "saturation": 10, "half": 10, "large": 10}




@pytest.fixture
def course_zone() -> Iterator[None]:
    set_zone("Asia/Shanghai")
    yield
    set_zone(None)


def stage(name: str, median_us: float, *, met: bool = True) -> StageResult:
    return StageResult(name=name, title=name, entry=name, points=10, points_possible=10, correct=True,
                       verdict=Verdict.PASSED, timing=Timing(source="modelled", median_us=median_us, min_us=median_us,
                                                             max_us=median_us, spread=0.0, repeats=3),
                       requirements=[RequirementResult(name="multicore", description="uses every core", passed=met)])


def graded(db: Database, who: str, score: float, *, mode: str = "final", late: bool = False,
           stages: list[StageResult] | None = None, lost: str | None = None, max_score: float = 100.0) -> int:
    """`who` submits in `mode`; a worker commits a result worth `score` (its groups all passed but `lost`)."""
    groups = [GroupScore(name=g, points=0.0 if g == lost else p, points_possible=p, passed_cases=1, total_cases=1)
              for g, p in GROUPS.items()]
    result = grade_result(assignment="sigmoid", score=score, max_score=max_score, groups=groups, stages=stages or [])
    with db.session() as s:
        student = s.scalar(select(Student).where(Student.student_id == who))
        assignment = s.scalar(select(Assignment).where(Assignment.name == "sigmoid"))
        sub = Submission(student_pk=student.id, assignment_pk=assignment.id, mode=mode,
                         content_hash="0" * 64, queue="grade.emu.mlu370-x8", status="running", in_flight=True,
                         submitted_at=now(), late=late)
        s.add(sub)
        s.flush()
        sub_id = sub.id
    assert commit_result(db, sub_id, result) == "committed"
    return sub_id


def api(db: Database, token: str, lang: str = "en") -> TestClient:
    client = TestClient(create_app(db, lambda _id, _queue: None, "k" * 32))
    client.headers.update({"Authorization": f"Bearer {token}", "Accept-Language": lang})
    return client


def page(db: Database, token: str, lang: str = "en") -> TestClient:
    """A logged-in browser session with page language `lang`; `.csrf` its forms' token."""
    client = TestClient(create_app(db, lambda _id, _queue: None, "k" * 32))
    csrf = re.search(r'name="csrf" value="([^"]+)"', client.get(f"/login?lang={lang}").text).group(1)
    assert client.post("/login", data={"token": token, "csrf": csrf}, follow_redirects=False).status_code == 303
    client.csrf = re.search(r'name="csrf" value="([^"]+)"', client.get("/").text).group(1)  # type: ignore[attr-defined]
    return client


def row(html: str, sub_id: int) -> str:
    found = re.search(rf'<tr id="sub-{sub_id}"[^>]*>(.*?)</tr>', html, re.S)
    assert found is not None, html
    return found.group(0)


def gradebook(db: Database, out: Path) -> dict[str, str]:
    export_finals(db, "sigmoid", out)
    with (out / "gradebook.csv").open() as fh:
        return {r["student_id"]: r["total"] for r in csv.DictReader(fh)}


def test_the_policies_pick_the_latest_the_best_after_penalty_or_the_chosen() -> None:
    finals = [Graded(1, 7, 100.0, False), Graded(2, 7, 90.0, True), Graded(3, 8, 50.0, False, chosen_at=5.0),
              Graded(4, 8, 60.0, False)]
    assert counting(finals, "latest", 0.2) == {7: 2, 8: 4}
    assert counting(finals, "best", 0.2) == {7: 1, 8: 4}  # the late 90 counts 72
    assert counting(finals, "best", 0.0) == {7: 1, 8: 4}
    assert counting(finals, "chosen", 0.2) == {7: 2, 8: 3}  # nothing chosen: the latest


def test_what_counts_is_one_rule_for_export_page_and_api(db: Database, tmp_path: Path) -> None:
    """The issue's case: an on-time 100 then a late 90 at a 20% penalty. Latest: the 90 counts 72, and the page
    and the API say so, with raw score, penalty and counted score; best: the 100; chosen: the student's pick."""
    ann = add_account(db, "ann", "Ann")
    set_policy(db, "sigmoid", late_penalty=0.2)
    release(db, "sigmoid")  # the hidden cases shown: ann sees the scores the export counts
    on_time = graded(db, "ann", 100.0)
    late = graded(db, "ann", 90.0, late=True)
    test_run = graded(db, "ann", 45.0, mode="test")
    assert gradebook(db, tmp_path / "latest")["ann"] == "72"
    with api(db, ann) as c:
        state = c.get(f"/api/submissions/{late}").json()
        assert (state["counts"], state["counting"], state["penalty"], state["counted_score"]) == (True, late, 0.2, 72)
        assert c.get(f"/api/submissions/{on_time}").json()["counts"] is False
        with use_language("en"):
            assert counted_line(state) == "score: 90 / 100  late: 90 - 20% = 72 counts"
            assert counting_line(c.get(f"/api/submissions/{on_time}").json()) == \
                f"submission #{late} counts for sigmoid, not this one"
            # a test run is never a score: "passed 45/100" misled
            assert counted_line(c.get(f"/api/submissions/{test_run}").json()) == \
                "score: not counted (a test run grades the first stage only)"
        # nothing to choose under `latest`
        refused = c.post(f"/api/submissions/{on_time}/choose")
        assert refused.status_code == 409 and "nothing to choose" in refused.json()["error"], refused.text
    html = page(db, ann).get("/").text
    assert "counts" in row(html, late) and "late: 20% off, counts 72" in row(html, late), row(html, late)
    assert 'class="counts"' not in row(html, on_time)
    assert "not counted (a test run grades the first stage only)" in row(html, test_run)

    set_policy(db, "sigmoid", counts="best")
    assert gradebook(db, tmp_path / "best")["ann"] == "100"
    with api(db, ann) as c:
        assert c.get(f"/api/submissions/{late}").json()["counting"] == on_time

    set_policy(db, "sigmoid", counts="chosen")
    assert gradebook(db, tmp_path / "chosen-none")["ann"] == "72"  # the latest until the student chooses
    session = page(db, ann, "zh")
    assert "让这次提交计分" in row(session.get("/").text, on_time)  # the choose button, in Chinese
    assert session.post(f"/submissions/{on_time}/choose", data={"csrf": session.csrf},
                        follow_redirects=False).status_code == 303
    assert gradebook(db, tmp_path / "chosen")["ann"] == "100"
    with api(db, ann) as c:
        assert c.post(f"/api/submissions/{late}/choose").json() == {"counting": late}
        assert c.post(f"/api/submissions/{test_run}/choose").status_code == 409  # a test run never counts
    assert gradebook(db, tmp_path / "chosen-again")["ann"] == "72"


def test_hidden_groups_are_pending_points_never_full_marks(db: Database, tmp_path: Path) -> None:
    """ann earned 70 of 80 (she lost `large`; the vector stage's 10 points are hers). Before the deadline she sees
    the visible groups only: 50 of 80, 20 pending (the hidden `saturation` group and the stage points that depend
    on it), on her page and in the CLI, never "50 / 60"; the instructor sees 70 / 80."""
    ann = add_account(db, "ann", "Ann")
    sub = graded(db, "ann", 70.0, max_score=80.0, lost="large", stages=[stage("vector", 5.0)])
    with api(db, ann) as c:
        state = c.get(f"/api/submissions/{sub}").json()
    assert (state["score"], state["max_score"], state["pending"]) == (50.0, 60.0, 20.0), state
    with use_language("en"):
        assert counted_line(state) == "score: 50 of 80 visible, 20 pending until the deadline"
    assert "50 of 80 visible, 20 pending until the deadline" in row(page(db, ann).get("/").text, sub)
    with use_language("zh"):
        assert "20" in counted_line(state) and "pending" not in counted_line(state)
    # the CLI's whole summary: the stages' points read "pending", never 0/0, and the score line says what is
    with api(db, ann) as c:
        result = GradeResult.from_json(c.get(f"/api/submissions/{sub}/result").text)
    console = Console(record=True, width=200)
    with use_language("en"):
        print_remote(result, state, console, tmp_path)
    text = console.export_text()
    assert "pending" in text.split("stages")[1] and "0/0" not in text, text
    assert "50 of 80 visible, 20 pending until the deadline" in text and "this submission counts" in text, text
    with api(db, add_account(db, "t", role="instructor")) as c:
        mine = c.get(f"/api/submissions/{sub}").json()
    assert (mine["score"], mine["max_score"], mine["pending"]) == (70.0, 80.0, 0.0)


def test_the_board_ranks_met_requirements_only_and_marks_the_viewer(db: Database) -> None:
    """bob's vector stage is faster but misses the stage's requirement (a one-core kernel): not on its board;
    each viewer's own row is marked, on the API and the page."""
    tokens = {who: add_account(db, who, who.title()) for who in ("ann", "bob")}
    with db.session() as s:
        for student in s.scalars(select(Student)):
            set_leaderboard(db, student, True)
    set_policy(db, "sigmoid", due=now() - 60, late_hours=1)  # released: the board counts every case
    graded(db, "ann", 100.0, stages=[stage("vector", 5.0), stage("multicore", 9.0)])
    graded(db, "bob", 100.0, stages=[stage("vector", 4.0), stage("multicore", 1.0, met=False)])
    with api(db, tokens["ann"]) as c:
        board = c.get("/api/leaderboard/sigmoid").json()
    assert [(r["rank"], r["median_us"], r["mine"]) for r in board["vector"]] == [(1, 4.0, False), (2, 5.0, True)]
    assert [(r["median_us"], r["mine"]) for r in board["multicore"]] == [(9.0, True)], board
    html = page(db, tokens["bob"]).get("/leaderboard/sigmoid").text
    mine = re.findall(r'<tr class="board-row mine"[^>]*>(.*?)</tr>', html, re.S)
    assert len(mine) == 1 and "4.00" in mine[0] and "(you)" in mine[0], html


def test_a_late_upload_is_warned_before_it_is_taken(db: Database, course_zone: None) -> None:
    """Past the deadline, inside the late window: the open assignments say so (in the course's zone), and the
    client's check refuses to upload a final without --late-ok or the student's yes."""
    ann = add_account(db, "ann", "Ann")
    deadline = now() - 60
    set_policy(db, "sigmoid", due=deadline, late_hours=2, late_penalty=0.25)
    shanghai = time.strftime("%Y-%m-%d %H:%M", time.gmtime(deadline + 8 * 3600)) + " (UTC+08:00)"
    with api(db, ann) as c, use_language("en"):
        listed = c.get("/api/assignments").json()
        assert [(a["name"], a["late_now"], a["deadline_text"]) for a in listed] == [("sigmoid", True, shanghai)]
        with pytest.raises(LateNotConfirmed) as refused:
            check_late(c, "server", "sigmoid", "final", late_ok=False, confirm=None)
        assert "25%" in str(refused.value) and shanghai in str(refused.value) and "--late-ok" in str(refused.value)
        asked: list[str] = []
        with pytest.raises(LateNotConfirmed):
            check_late(c, "server", "sigmoid", "final", late_ok=False, confirm=lambda q: asked.append(q) or False)
        assert asked and "upload it late?" in asked[0]
        check_late(c, "server", "sigmoid", "final", late_ok=False, confirm=lambda q: True)
        check_late(c, "server", "sigmoid", "final", late_ok=True, confirm=None)
        check_late(c, "server", "sigmoid", "test", late_ok=False, confirm=None)  # a test run counts nothing
    html = page(db, ann, "zh").get("/").text
    assert shanghai in html and 'class="error late-warning"' in html, html


def test_pages_and_errors_in_the_page_language(db: Database, course_zone: None) -> None:
    """Status and mode words, error pages (HTML, not JSON, on a page route) and the API's refusals follow the
    language asked for; the submission's time is the course's, with its offset."""
    ann = add_account(db, "ann", "Ann")
    sub = graded(db, "ann", 100.0)
    session = page(db, ann, "zh")
    mine = row(session.get("/").text, sub)
    assert "<td>final</td>" not in mine and "<td>done</td>" not in mine, mine
    assert "(UTC+08:00)" in mine, mine
    missing = session.get("/submissions/999/report")
    assert missing.status_code == 404 and missing.headers["content-type"].startswith("text/html"), missing.text
    assert '<html lang="zh-CN"' in missing.text and "没有这个提交" in missing.text
    nowhere = session.get("/no/such/page")
    assert nowhere.status_code == 404 and '<p id="error-message"' in nowhere.text
    with api(db, "not-a-token", "zh-CN") as c:
        wrong = c.get("/api/submissions")
    assert wrong.status_code == 401 and wrong.json()["error"] != "missing or wrong token", wrong.text
    with api(db, "not-a-token", "en") as c:
        assert c.get("/api/submissions").json()["error"] == "missing or wrong token"
