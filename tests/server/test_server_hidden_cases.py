"""Hidden (after_deadline) groups and the leaderboard (issue 31): two students whose final submissions differ only
in passing sigmoid's hidden `saturation` group (one wrong element when N == 8192, its only case; the other's
branch never fires, so both run the same instructions at every perf shape) must be indistinguishable to
anyone but the instructor until the hidden cases are released: the leaderboard (API and page: rank, row count,
time, labels) and their own results (verdicts, scores, stage decisions and times). Released by the deadline
passing, or by the instructor closing the assignment (or releasing: test_server_inputs.py); without a deadline
they stay hidden until then, and a student's page says so (en, zh). Real parts: `grade serve`, redis-server, a
Celery worker grading in the Docker sandbox."""

from __future__ import annotations

import re
import shutil
import time
from pathlib import Path

import pytest
from cluster import REPO, iso, start_server

from tests.sandbox_ready import emu_image_ready

pytestmark = [pytest.mark.slow, pytest.mark.docker]
SIGMOID = REPO / "reference_kernels" / "sigmoid" / "vector"
LINE = "    __bang_active_sigmoid(tile, tile, CEIL_ALIGN(n, VECTOR_ALIGN_ELEMS));\n"


def twin(tmp: Path, name: str, count: int) -> Path:
    """The vector reference kernel writing -1 to element 0 when it is called on `count` elements."""
    folder = tmp / name
    shutil.copytree(SIGMOID, folder)
    kernel = folder / "mlu" / "sigmoid_vector.mlu"
    text = kernel.read_text()
    assert LINE in text
    kernel.write_text(text.replace(LINE, LINE + f"    if (count == {count}) tile[0] = (T)(-1.0f);\n"))
    return folder


def board_api(server, viewer: str) -> dict[str, list[dict]]:  # noqa: ANN001
    """The leaderboard as `viewer` gets it, pseudonyms and the viewer's own mark left out (what names who a row is)."""
    with server.client(viewer) as c:
        board = c.get("/api/leaderboard/sigmoid").json()
    return {stage: [{k: v for k, v in row.items() if k not in ("pseudonym", "mine")} for row in rows] for stage, rows in board.items()}


def board_page(server, viewer: str, lang: str = "en") -> dict[str, list[list[str]]]:  # noqa: ANN001
    """The leaderboard page's rows per stage, each row's cells without the pseudonym's."""
    with server.page_session(viewer, lang) as page:
        html = page.get("/leaderboard/sigmoid").text
    stages = {}
    for stage, table in re.findall(r"<h2>(\w+)</h2>\s*<table class=\"stage\">(.*?)</table>", html, re.S):
        rows = re.findall(r'<tr class="board-row[^"]*"[^>]*>(.*?)</tr>', table, re.S)
        cells = [re.findall(r"<td>(.*?)</td>", row, re.S) for row in rows]
        stages[stage] = [c[:1] + c[2:] for c in cells]
    return stages


def own_view(server, who: str, sub_id: int) -> dict:  # noqa: ANN001
    """What a student sees of their own result, less what names the student or the upload."""
    with server.client(who) as c:
        state = c.get(f"/api/submissions/{sub_id}").json()
        result = c.get(f"/api/submissions/{sub_id}/result").json()
    return {"state": {k: state[k] for k in ("verdict", "score", "max_score", "status", "pending", "counts")},
            "verdict": result["verdict"], "score": result["score"], "max_score": result["max_score"],
            "cases": sorted((c["name"], c["verdict"], c["passed"]) for c in result["cases"]),
            "stages": [(s["name"], s["verdict"], s["correct"], s["points"], s["message"], s["next_step"],
                        s["timing"] and s["timing"]["median_us"]) for s in result["stages"]]}


def notice(server, who: str, lang: str) -> list[str]:  # noqa: ANN001
    with server.page_session(who, lang) as page:
        return re.findall(r'<p class="hidden-cases">(.*?)</p>', page.get("/").text, re.S)


def test_a_hidden_failure_shows_nowhere_until_released(redis_url: str, tmp_path) -> None:  # noqa: ANN001
    if not emu_image_ready():
        pytest.skip("needs a running Docker daemon and the emulation image (grade setup)")
    passes, fails = twin(tmp_path, "passes", 8191), twin(tmp_path, "fails", 8192)
    server = start_server(tmp_path / "server", redis_url, ["ann", "bob", "cid"])  # sigmoid: no deadline
    try:
        server.add_worker("w1")
        for who in ("ann", "bob"):
            with server.page_session(who) as page:
                assert page.post("/leaderboard/opt", data={"csrf": page.csrf, "on": "1"}).status_code == 303
        ids = {}
        for who, folder in (("ann", passes), ("bob", fails)):
            r = server.submit(who, folder, mode="final")
            assert r.status_code == 201, r.text
            ids[who] = r.json()["id"]
            server.graded(who, ids[who])
        # the instructor sees the difference: bob's vector stage fails saturated_8192, so he is not on its board
        with server.client("teacher") as t:
            full = {who: t.get(f"/api/submissions/{i}/result").json() for who, i in ids.items()}
        failed = [c["name"] for c in full["bob"]["cases"] if not c["passed"]]
        assert failed == ["saturated_8192"], failed
        assert all(c["passed"] for c in full["ann"]["cases"])
        assert full["bob"]["stages"][0]["timing"] is not None  # timed although it failed: only a hidden case did
        teacher_board = board_api(server, "teacher")
        assert len(teacher_board["vector"]) == 1, teacher_board

        def indistinguishable(when: str) -> None:
            for viewer in ("ann", "bob", "cid"):
                board = board_api(server, viewer)
                assert len(board["vector"]) == 2 and board["vector"][0] == board["vector"][1], (when, viewer, board)
                assert all(rows[0] == rows[1] for rows in board.values()), (when, viewer, board)
                page = board_page(server, viewer, "zh" if viewer == "cid" else "en")
                assert page.keys() == board.keys() and all(len(r) == 2 and r[0] == r[1] for r in page.values()), \
                    (when, viewer, page)
            assert own_view(server, "ann", ids["ann"]) == own_view(server, "bob", ids["bob"]), when

        def distinguishable(when: str) -> None:
            for viewer in ("ann", "bob", "cid"):
                assert len(board_api(server, viewer)["vector"]) == 1, (when, viewer)
                assert len(board_page(server, viewer)["vector"]) == 1, (when, viewer)
            assert own_view(server, "ann", ids["ann"]) != own_view(server, "bob", ids["bob"]), when
            assert own_view(server, "bob", ids["bob"])["verdict"] == full["bob"]["verdict"], when

        # no deadline: hidden until the instructor releases them, and the students' pages say so
        indistinguishable("no deadline")
        assert notice(server, "ann", "en") == ["Some cases of sigmoid are hidden: they, and the stage points that "
                                               "depend on them, are shown when your instructor releases them."]
        zh = notice(server, "bob", "zh")
        assert len(zh) == 1 and "sigmoid" in zh[0] and "隐藏" in zh[0], zh
        # a deadline ahead: still hidden, the note names it
        with server.client("teacher") as t:
            t.post("/api/assignments/sigmoid", json={"due": iso(time.time() + 3600)}).raise_for_status()
        indistinguishable("before the deadline")
        assert "are shown after" in notice(server, "ann", "en")[0]
        # the deadline passed: everybody sees the difference, the note is gone
        with server.client("teacher") as t:
            t.post("/api/assignments/sigmoid", json={"due": iso(time.time() - 60)}).raise_for_status()
        distinguishable("after the deadline")
        assert notice(server, "ann", "en") == []
        # the deadline extended again (never released): hidden again
        with server.client("teacher") as t:
            t.post("/api/assignments/sigmoid", json={"due": iso(time.time() + 3600)}).raise_for_status()
        indistinguishable("deadline extended")
        # the instructor closes the assignment on the dashboard: no more uploads, the hidden cases released
        with server.page_session("teacher") as page:
            assert 'action="/instructor/assignments/sigmoid/close"' in page.get("/instructor").text
            assert page.post("/instructor/assignments/sigmoid/close", data={"csrf": page.csrf}).status_code == 303
        distinguishable("closed")
        assert notice(server, "bob", "zh") == []
        r = server.submit("cid", passes, mode="final")
        assert r.status_code == 403 and "closed" in r.json()["error"], r.text
        with server.client("teacher") as t:
            row = next(a for a in t.get("/api/assignments").json() if a["name"] == "sigmoid")
        assert not row["open"] and row["released_at"] is not None and row["released"], row
    finally:
        server.stop()
