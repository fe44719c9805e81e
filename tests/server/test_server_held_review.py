"""A grading held for review (Verdict.HELD_FOR_REVIEW: the WebAssembly engine's account of a call would cost it
points, the native replay of the same journal finds nothing; DESIGN.md "The switch-over: which engine decides, and
the disagreement policy") resolved by the course staff on the server: the dashboard and a student's page show it
plainly and filter it, its student sees "held for review" (not a grader error) in both languages, and the
instructor's "Regrade natively (after review)" regrades it as its next generation with the native replay, the
engine recorded on the submission, with the result and in the history; a plain regrade goes back to the default
engine, and any other engine is refused. In process on SQLite and PostgreSQL (results committed as a worker commits
them), then through a real worker grading a divergent kernel in Docker."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from course import course, stored
from factories import grade_result

from grader.i18n import use_language
from grader.orchestration.judge import DISAGREEMENT
from grader.results import StageResult, Verdict
from grader.server.db import Submission
from grader.server.grading import commit_result

NATIVE_NOTE = "your kernels were replayed natively, as this grading was asked to"


def result_of(verdict: Verdict, score: float, note: str = ""):  # noqa: ANN201
    stage = StageResult(name="vector", title="vector", entry="sigmoid", points=score, points_possible=100,
                        correct=verdict is Verdict.PASSED, verdict=verdict)
    return grade_result(assignment="sigmoid", score=score, verdict=verdict, stages=[stage], message=note)


HELD = result_of(Verdict.HELD_FOR_REVIEW, 0.0, DISAGREEMENT.format(account="the output is wrong"))


def row(html: str, sub: int) -> str:
    found = re.search(rf'<tr id="sub-{sub}"[^>]*>(.*?)</tr>', html, re.S)
    assert found is not None, html[-3000:]
    return found.group(1)


def row_ids(html: str) -> set[int]:
    return {int(i) for i in re.findall(r'<tr id="sub-(\d+)"', html)}


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_a_held_result_is_shown_filtered_and_regraded_natively_as_its_next_generation(kind: str,
                                                                                      tmp_path: Path) -> None:
    with use_language("en"), course(kind, tmp_path, ["ann", "bob"]) as c:
        held, passed = stored(c, "ann"), stored(c, "bob")
        assert commit_result(c.db, held, HELD) == "committed"
        assert commit_result(c.db, passed, result_of(Verdict.PASSED, 100.0)) == "committed"
        teacher, ann = c.api("teacher"), c.api("ann")
        assert [s["held"] for s in teacher.get("/api/dashboard").json()["submissions"]] == [False, True]

        # the instructor: held shown plainly, with the native regrade's button on its row only; the filter
        with c.page("teacher") as page:
            html = page.get("/instructor").text
            mine = row(html, held)
            assert '<b class="held">held for review</b>' in mine and "yours to review" in mine, mine
            assert 'button class="regrade-native">Regrade natively (after review)</button>' in mine, mine
            assert "regrade-native" not in row(html, passed) and "held" not in row(html, passed)
            assert '<option value="held">held for review</option>' in html
            filtered = page.get("/instructor?status=held").text
            assert row_ids(filtered) == {held}, filtered[-2000:]
            assert '<option value="held" selected>held for review</option>' in filtered
            assert row_ids(page.get("/instructor?status=done").text) == {held, passed}
            assert row_ids(page.get("/instructor/students/ann?status=held").text) == {held}
            assert row_ids(page.get("/instructor/students/bob?status=held").text) == set()
            assert "held for review: 1" in html  # the verdicts' counts
        with c.page("teacher", "zh") as page:
            mine = row(page.get("/instructor?status=held").text, held)
            assert '<b class="held">待复核</b>' in mine and "Regrade natively" not in mine, mine

        # its student: held for review, waiting for the course staff; never a grader error, in either language
        state = ann.get(f"/api/submissions/{held}").json()
        assert (state["verdict"], state["held"], state["score"]) == ("held_for_review", True, 0.0), state
        with c.page("ann") as page:
            mine = row(page.get("/").text, held)
            assert "held for review" in mine and "waiting for the course staff" in mine, mine
            assert "error" not in mine.lower(), mine
        with c.page("ann", "zh") as page:
            mine = row(page.get("/").text, held)
            assert "待复核" in mine and "waiting" not in mine and "held" not in mine.replace('class="held-note"', ""), mine
        report = ann.get(f"/api/submissions/{held}/report").text
        assert "Held for review" in report and "Grader error" not in report

        # another engine is refused (400, nothing changes), as is a regrade's engine from a student
        for engine in ("wasm", "gpu", ""):
            r = teacher.post(f"/api/submissions/{held}/regrade", json={"engine": engine})
            assert r.status_code == 400 and "natively" in r.json()["error"] and repr(engine) in r.json()["error"], r.text
        assert ann.post(f"/api/submissions/{held}/regrade", json={"engine": "native"}).status_code == 403
        with c.db.session() as s:
            sub = s.get(Submission, held)
            assert (sub.status, sub.generation, sub.replay_engine, len(c.queued)) == ("done", 0, None, 0)

        # the button: the next generation, asked to replay natively; the held result stays until it commits
        with c.page("teacher") as page:
            r = page.post(f"/instructor/regrade/{held}", data={"csrf": page.csrf, "engine": "native",
                                                                "back": "/instructor/students/ann"})
            assert r.status_code == 303 and r.headers["location"] == "/instructor/students/ann", r.text
            mine = row(page.get("/instructor/students/ann").text, held)
            assert "(replayed natively)" in mine and '<b class="held">' in mine and "regrade-native" not in mine
        assert c.queued == [(held, "grade.emu.mlu370-x8")]
        state = ann.get(f"/api/submissions/{held}").json()
        assert (state["status"], state["generation"], state["replay_engine"], state["verdict"]) == (
            "queued", 1, "native", "held_for_review"), state
        # committed as a worker commits it (grading.grade_uploaded passes the submission's engine)
        regraded = result_of(Verdict.PASSED, 100.0, NATIVE_NOTE + " (not in the confined WebAssembly engine)")
        assert commit_result(c.db, held, regraded, generation=1, replay_engine="native") == "committed"
        state = ann.get(f"/api/submissions/{held}").json()
        assert (state["verdict"], state["score"], state["held"], state["result_engine"]) == (
            "passed", 100.0, False, "native"), state
        assert NATIVE_NOTE in ann.get(f"/api/submissions/{held}/result").json()["message"]
        history = teacher.get(f"/api/submissions/{held}/history").json()
        assert [(h["generation"], h["verdict"], h["replay_engine"], h["counts"]) for h in history] == [
            (0, "held_for_review", None, False), (1, "passed", "native", True)], history
        with c.page("teacher") as page:
            html = page.get("/instructor").text
            assert "replayed natively (after review)" in row(html, held) and "held for review" not in row(html, held)
            assert row_ids(page.get("/instructor?status=held").text) == set()

        # a plain regrade afterwards: the default engine again, for that grading and the result it commits
        assert teacher.post(f"/api/submissions/{held}/regrade").json() == {"id": held, "status": "queued",
                                                                              "engine": None}
        assert ann.get(f"/api/submissions/{held}").json()["replay_engine"] is None
        assert commit_result(c.db, held, result_of(Verdict.PASSED, 90.0), generation=2) == "committed"
        history = teacher.get(f"/api/submissions/{held}/history").json()
        assert [(h["generation"], h["replay_engine"]) for h in history] == [(0, None), (1, "native"), (2, None)]
        assert ann.get(f"/api/submissions/{held}").json()["result_engine"] is None


def _migrations(kind: str, tmp_path: Path):  # noqa: ANN202 - Alembic's Config, an Engine, the PostgreSQL or None
    """An empty database of `kind` (a PostgreSQL server of the test's own, or SQLite) and Alembic's config for it."""
    from alembic.config import Config
    from cluster import pg_bin, start_postgres
    from sqlalchemy import create_engine

    from grader.server.db import MIGRATIONS, sqlite_url

    pg = None
    if kind == "postgresql":
        if pg_bin() is None:
            pytest.skip("PostgreSQL not installed (scripts/setup-system.sh --tests)")
        pg = start_postgres(tmp_path / "pg")
    url = pg.url if pg else sqlite_url(tmp_path)
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config, create_engine(url), pg


def _one_submission(conn, grade_runs: int, verdict: str) -> None:  # noqa: ANN001 - a SQLAlchemy connection
    """An assignment, a student and one done submission of hers, written as the schema of 0005/0006 holds them."""
    from sqlalchemy import text

    conn.execute(text("INSERT INTO assignments (name, backend, seed, is_open, late_penalty) VALUES "
                      "('sigmoid', 'emu', 's', true, 0)"))
    conn.execute(text("INSERT INTO students (student_id, name, role, token_hash, pseudonym, on_leaderboard) "
                      "VALUES ('ann', '', 'student', 'h', 'kernel-ann', false)"))
    conn.execute(text("INSERT INTO submissions (student_pk, assignment_pk, mode, archive, content_hash, queue, "
                      "status, grade_runs, submitted_at, late, verdict) VALUES (1, 1, 'final', :a, 'c', "
                      "'grade.emu.mlu370-x8', 'done', :runs, 1.0, false, :verdict)"),
                 {"a": b"", "runs": grade_runs, "verdict": verdict})


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_migration_0006_adds_and_drops_the_replay_engine_columns(kind: str, tmp_path: Path) -> None:
    """0006 on a database at 0005 holding a graded submission: the columns arrive empty (the default engine),
    the rows intact; its downgrade drops them and keeps the rows."""
    from alembic import command
    from sqlalchemy import inspect, text

    config, engine, pg = _migrations(kind, tmp_path)
    tables = ("submissions", "results", "superseded_results")

    def columns() -> dict[str, set[str]]:
        found = inspect(engine)
        return {t: {c["name"] for c in found.get_columns(t)} for t in tables}

    try:
        command.upgrade(config, "0005")
        assert not any("replay_engine" in cs for cs in columns().values())
        with engine.begin() as conn:
            _one_submission(conn, grade_runs=1, verdict="held_for_review")
            conn.execute(text("INSERT INTO results (submission_pk, document, report_html, committed_at) VALUES "
                              "(1, '{}', '', 2.0)"))
        command.upgrade(config, "0006")
        assert all("replay_engine" in cs for cs in columns().values()), columns()
        with engine.connect() as conn:
            assert conn.execute(text("SELECT verdict, replay_engine, generation FROM submissions")).all() == [
                ("held_for_review", None, 0)]
            assert conn.execute(text("SELECT replay_engine FROM results")).all() == [(None,)]
        with engine.begin() as conn:
            conn.execute(text("UPDATE submissions SET replay_engine = 'native'"))
        command.downgrade(config, "0005")
        assert not any("replay_engine" in cs for cs in columns().values()), columns()
        with engine.connect() as conn:
            assert conn.execute(text("SELECT verdict FROM submissions")).all() == [("held_for_review",)]
            assert conn.execute(text("SELECT count(*) FROM results")).scalar() == 1
        command.upgrade(config, "head")
        assert all("replay_engine" in cs for cs in columns().values())
    finally:
        engine.dispose()
        if pg is not None:
            pg.stop()


# The sigmoid reference with its builtin only where `long` is 64 bits: natively (the run, the native replay), not in
# the WebAssembly engine (wasm32) -- tests/e2e/test_wasm_engine.py's divergent kernel
SIGMOID_CALL = "    __bang_active_sigmoid(tile, tile, CEIL_ALIGN(n, VECTOR_ALIGN_ELEMS));\n"


def divergent_kernel(dest: Path) -> Path:
    from cluster import REPO

    shutil.copytree(REPO / "reference_kernels" / "sigmoid" / "vector", dest)
    kernel = dest / "mlu" / "sigmoid_vector.mlu"
    source = kernel.read_text()
    assert SIGMOID_CALL in source
    kernel.write_text(source.replace(SIGMOID_CALL, "    if (sizeof(long) == 8)\n  " + SIGMOID_CALL))
    return dest


@pytest.mark.slow
@pytest.mark.docker
def test_a_real_worker_holds_a_divergent_kernel_and_its_native_regrade_resolves_it(redis_url: str,
                                                                                    tmp_path: Path) -> None:
    """`grade serve` with a real emulator worker: the divergent kernel is held for review (no points, no
    accusation); the instructor's native regrade is graded by the worker with the native replay and committed as
    generation 1, passed, its message and the history saying the native engine decided."""
    from cluster import start_server
    from test_server_grading import wait_ready

    from tests.sandbox_ready import emu_image_ready

    if not emu_image_ready():
        pytest.skip("needs a running Docker daemon and the emulation image (grade setup)")
    server = start_server(tmp_path / "server", redis_url, ["ann"])
    try:
        server.add_worker("node")
        wait_ready(server.data / "node.log")
        r = server.submit("ann", divergent_kernel(tmp_path / "divergent"))
        assert r.status_code == 201, r.text
        sub = r.json()["id"]
        state = server.graded("ann", sub)
        with server.client("ann") as ann:
            result = ann.get(f"/api/submissions/{sub}/result").json()
        assert (state["verdict"], state["held"], state["score"]) == ("held_for_review", True, 0.0), (
            state, result["message"][:2000])
        assert result["integrity"] == [] and "held for review" in " ".join(c["message"] for c in result["cases"])
        with server.page_session("teacher") as page:
            assert row_ids(page.get("/instructor?status=held").text) == {sub}
            r = page.post(f"/instructor/regrade/{sub}", data={"csrf": page.csrf, "engine": "native"})
            assert r.status_code == 303 and r.headers["location"] == "/instructor", r.text
        state = server.graded("ann", sub)
        with server.client("teacher") as teacher:
            result = teacher.get(f"/api/submissions/{sub}/result").json()
            history = teacher.get(f"/api/submissions/{sub}/history").json()
        assert (state["verdict"], state["generation"], state["replay_engine"], state["result_engine"]) == (
            "passed", 1, "native", "native"), (state, result["message"][:2000])
        assert state["score"] > 0 and NATIVE_NOTE in result["message"], result["message"][:2000]
        assert [(h["generation"], h["verdict"], h["replay_engine"]) for h in history] == [
            (0, "held_for_review", None), (1, "passed", "native")], history
    finally:
        server.stop()


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_migration_0007_drops_the_stored_report_and_keeps_every_result(kind: str, tmp_path: Path) -> None:
    """0007 on a database at 0006 holding a result and a superseded one: the never-read report_html column goes,
    the documents and generations stay; its
    downgrade brings the column back empty, and the code of that schema (which wrote it) can insert again."""
    from alembic import command
    from sqlalchemy import inspect, text

    config, engine, pg = _migrations(kind, tmp_path)
    document = result_of(Verdict.PASSED, 90.0).to_json()

    def result_columns() -> set[str]:
        return {c["name"] for c in inspect(engine).get_columns("results")}

    try:
        command.upgrade(config, "0006")
        with engine.begin() as conn:
            _one_submission(conn, grade_runs=2, verdict="passed")
            conn.execute(text("INSERT INTO results (submission_pk, document, report_html, committed_at, generation) "
                              "VALUES (1, :d, '<html>old</html>', 2.0, 1)"), {"d": document})
            conn.execute(text("INSERT INTO superseded_results (submission_pk, generation, document, committed_at, "
                              "superseded_at) VALUES (1, 0, :d, 1.5, 2.0)"), {"d": document})
        command.upgrade(config, "0007")
        assert "report_html" not in result_columns() and "document" in result_columns()
        with engine.connect() as conn:
            assert conn.execute(text("SELECT document, generation FROM results")).all() == [(document, 1)]
            assert conn.execute(text("SELECT count(*) FROM superseded_results")).scalar() == 1
        command.downgrade(config, "0006")
        assert "report_html" in result_columns()
        with engine.begin() as conn:
            assert conn.execute(text("SELECT report_html, generation FROM results")).all() == [("", 1)]
            conn.execute(text("DELETE FROM results"))
            conn.execute(text("INSERT INTO results (submission_pk, document, report_html, committed_at) VALUES "
                              "(1, :d, '<html/>', 3.0)"), {"d": document})
        command.upgrade(config, "head")
        assert "report_html" not in result_columns()
    finally:
        engine.dispose()
        if pg is not None:
            pg.stop()
