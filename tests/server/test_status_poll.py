"""What a follower's status poll (`grade submit --server`, GET /api/submissions/ID) hears, read cheaply: the real
app (FastAPI through TestClient) on a real database, SQLite and PostgreSQL, results committed through the commit
point (grading.commit_result); no grading runs.

- a poll reads the submission and the student's finals only (what counts is decided among finals), and the hidden
  cases' figures it shows are each result's own, however often it is polled (views._shown_figures keeps them);
- it says when to ask again: a quarter of the estimated wait, between workers.POLL_SECONDS (the longest while no
  worker serves the queue), so a class waiting in the queue does not ask twice a second each;
- its place in the queue is read from an index (db.Submission `queue_state`), never by a scan of the rows;
- the uploads live in a table of their own (db.Upload, migration 0009), so that no scan of the submissions (the
  pages' live refresh, the dashboard) walks them: SQLite kept them inline in the rows."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from sqlalchemy import event, select, update
from test_what_counts import api, graded

from grader.server.accounts import add_account
from grader.server.db import Assignment, Database, Student, Submission, now
from grader.server.workers import POLL_SECONDS, queue_place, worker_seen

QUEUE = "grade.emu.mlu370-x8"




def queued(db: Database, who: str, *, status: str = "queued", started_ago: float | None = None) -> int:
    """`who` uploads a test run, left `status` (started `started_ago` seconds ago)."""
    with db.session() as s:
        student = s.scalar(select(Student).where(Student.student_id == who))
        assignment = s.scalar(select(Assignment).where(Assignment.name == "sigmoid"))
        sub = Submission(student_pk=student.id, assignment_pk=assignment.id, mode="test",
                         content_hash="1" * 64, queue=QUEUE, status=status, in_flight=True, submitted_at=now(),
                         started_at=None if started_ago is None else now() - started_ago)
        s.add(sub)
        s.flush()
        return sub.id


def test_a_poll_shows_each_result_as_the_student_sees_it_and_what_counts(db: Database) -> None:
    """ann's two finals (70 of 80 losing `large`, then 80 of 80) and a test run graded after them: each poll of a
    final shows that final's visible figures (the hidden `saturation` group pending), the same on every poll; the
    latest final counts whatever test run came after it; the instructor sees the whole of each."""
    ann = add_account(db, "ann", "Ann")
    first = graded(db, "ann", 70.0, max_score=80.0, lost="large")
    second = graded(db, "ann", 80.0, max_score=80.0)
    trial = graded(db, "ann", 10.0, max_score=80.0, mode="test", lost="tail")
    with api(db, ann) as c:
        for _poll in range(2):
            states = {sub: c.get(f"/api/submissions/{sub}").json() for sub in (first, second, trial)}
            assert [(states[sub]["score"], states[sub]["max_score"], states[sub]["pending"])
                    for sub in (first, second)] == [(50.0, 60.0, 20.0), (60.0, 60.0, 20.0)], states
            assert {states[sub]["counting"] for sub in (first, second, trial)} == {second}, states
            assert (states[trial]["mode"], states[trial]["status"], states[trial]["counts"]) == ("test", "done", False)
    with api(db, add_account(db, "t", role="instructor")) as c:
        assert [(c.get(f"/api/submissions/{sub}").json()["score"]) for sub in (first, second)] == [70.0, 80.0]


def test_a_poll_says_when_to_ask_again(db: Database) -> None:
    """Gradings of this queue took 40 s each. With one live worker: a job behind one being graded is about 80 s
    away (ask again in 15 s, the longest); the one being graded for 38 s is about 2 s from its result (ask again in
    half a second, the shortest); with a second worker the waiting job is 40 s away (a quarter: 10 s). Without a live
    worker nothing moves: 15 s. Before any grading: no estimate,
    half a second."""
    for who in ("ann", "ben", "cho", "dan"):
        add_account(db, who, who.title())
    unserved = queued(db, "dan")
    assert queue_place(db, unserved).poll_seconds == POLL_SECONDS[1]  # nobody serves the queue
    with db.session() as s:
        s.execute(update(Submission).where(Submission.id == unserved).values(status="cancelled", in_flight=None))
    worker_seen(db, "slot0@test", queue=QUEUE, device_type="mlu370-x8", device="mlu370-x8")
    running = queued(db, "ann", status="running", started_ago=38.0)
    waiting = queued(db, "ben")
    assert (queue_place(db, waiting).estimate_seconds, queue_place(db, waiting).poll_seconds) == (None, POLL_SECONDS[0])
    done = graded(db, "cho", 50.0)
    with db.session() as s:
        s.execute(update(Submission).where(Submission.id == done).values(started_at=now() - 50, reported_at=now() - 10))
    place = queue_place(db, waiting)
    assert place.position == 0 and place.estimate_seconds == pytest.approx(80.0, abs=1.0), place
    assert place.poll_seconds == POLL_SECONDS[1], place
    place = queue_place(db, running)
    assert place.estimate_seconds == pytest.approx(2.0, abs=1.0) and place.poll_seconds == POLL_SECONDS[0], place
    with api(db, add_account(db, "t", role="instructor")) as c:
        assert c.get(f"/api/submissions/{waiting}").json()["poll_seconds"] == POLL_SECONDS[1]
        assert c.get(f"/api/submissions/{done}").json()["status"] == "done"
    worker_seen(db, "slot1@test", queue=QUEUE, device_type="mlu370-x8", device="mlu370-x8")
    place = queue_place(db, waiting)
    assert (place.workers, place.estimate_seconds) == (2, pytest.approx(40.0, abs=1.0)), place
    assert place.poll_seconds == pytest.approx(10.0, abs=0.3), place  # a quarter, between the bounds


def test_a_poll_reads_the_queue_from_the_index_not_from_the_uploads(db: Database) -> None:
    """The queries of a poll's place in the queue (workers.queue_place) read the `queue_state` index alone (or a
    row by its key): SQLite keeps each upload inline in its row, before the status and queue columns, so a scan of
    the rows would walk every upload's pages on every poll (17 ms a poll at 200 uploads of 100 KB, 1 ms from the
    index). PostgreSQL keeps large values out of line: its plans are its own."""
    if db.engine.dialect.name != "sqlite":
        pytest.skip("the query plans checked are SQLite's (PostgreSQL stores the uploads out of line)")
    for who in ("ann", "ben", "cho"):
        add_account(db, who, who.title())
    worker_seen(db, "slot0@test", queue=QUEUE, device_type="mlu370-x8", device="mlu370-x8")
    done = graded(db, "cho", 50.0)
    with db.session() as s:
        s.execute(update(Submission).where(Submission.id == done).values(started_at=now() - 50, reported_at=now() - 10))
    queued(db, "ann", status="running", started_ago=5.0)
    waiting = queued(db, "ben")
    statements: list[tuple[str, object]] = []

    def seen(_conn, _cursor, statement, parameters, _context, _many) -> None:  # noqa: ANN001
        if statement.lstrip().upper().startswith("SELECT") and "submissions" in statement:
            statements.append((statement, parameters))

    event.listen(db.engine, "before_cursor_execute", seen)
    try:
        assert queue_place(db, waiting).position == 0
    finally:
        event.remove(db.engine, "before_cursor_execute", seen)
    assert len(statements) >= 3, statements
    with db.engine.connect() as conn:
        for statement, parameters in statements:
            plan = " | ".join(row[-1] for row in conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {statement}", parameters))
            touches = [step for step in plan.split(" | ") if "submissions" in step]
            assert touches and all("COVERING INDEX queue_state" in step or "INTEGER PRIMARY KEY" in step
                                   for step in touches), (statement, plan)


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_migration_0008_adds_the_queue_state_index_and_takes_it_back(kind: str, tmp_path: Path) -> None:
    from alembic import command
    from sqlalchemy import inspect
    from test_server_held_review import _migrations

    config, engine, pg = _migrations(kind, tmp_path)
    try:
        command.upgrade(config, "0007")
        assert "queue_state" not in {i["name"] for i in inspect(engine).get_indexes("submissions")}
        command.upgrade(config, "0008")
        found = {i["name"]: i["column_names"] for i in inspect(engine).get_indexes("submissions")}
        assert found["queue_state"] == ["status", "queue", "reported_at", "started_at"], found
        command.downgrade(config, "0007")
        assert "queue_state" not in {i["name"] for i in inspect(engine).get_indexes("submissions")}
    finally:
        engine.dispose()
        if pg is not None:
            pg.stop()


def test_the_uploads_live_out_of_the_submissions_rows(db: Database) -> None:
    """Uploads taken by the real intake (POST /api/submissions) land in `uploads`, the submissions' rows stay a
    few bytes each (SQLite: the table's pages, from dbstat), and a worker reads each upload back whole."""
    import io
    import tarfile

    from grader.server.db import upload_of

    tokens = {who: add_account(db, who, who.title()) for who in ("ann", "ben", "cho", "dan", "eve")}
    worker_seen(db, "slot0@test", queue=QUEUE, device_type="mlu370-x8", device="mlu370-x8")
    sent: dict[int, bytes] = {}
    for who, token in tokens.items():
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
            body = f"# {who}\n".encode() + os.urandom(60_000).hex().encode()  # ~120 KB that gzip cannot shrink away
            info = tarfile.TarInfo("ops.py")
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
        with api(db, token) as c:
            r = c.post("/api/submissions", data={"assignment": "sigmoid", "mode": "test"},
                       files={"archive": ("s.tar.gz", buffer.getvalue(), "application/gzip")})
            assert r.status_code == 201, r.text
            sent[r.json()["id"]] = buffer.getvalue()
    with db.session() as s:
        assert {sub: upload_of(s, sub) for sub in sent} == sent
    if db.engine.dialect.name != "sqlite":
        return
    with db.engine.connect() as conn:
        try:
            pages = dict(conn.exec_driver_sql("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name").all())
        except Exception as exc:  # noqa: BLE001 - a SQLite built without the dbstat table
            pytest.skip(f"this SQLite has no dbstat table: {exc}")
    assert pages["uploads"] >= 5 * 50_000 and pages["submissions"] <= 2 * 4096, pages


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_migration_0009_moves_the_uploads_into_their_table_and_back(kind: str, tmp_path: Path) -> None:
    from alembic import command
    from sqlalchemy import inspect, text
    from test_server_held_review import _migrations, _one_submission

    config, engine, pg = _migrations(kind, tmp_path)
    upload = os.urandom(150_000)
    try:
        command.upgrade(config, "0008")
        with engine.begin() as conn:
            _one_submission(conn, 1, "passed")
            conn.execute(text("UPDATE submissions SET archive = :a"), {"a": upload})
        command.upgrade(config, "0009")
        assert "archive" not in {c["name"] for c in inspect(engine).get_columns("submissions")}
        with engine.connect() as conn:
            assert conn.execute(text("SELECT submission_pk, archive FROM uploads")).all() == [(1, upload)]
        assert {i["name"] for i in inspect(engine).get_indexes("submissions")} >= {"queue_state"}
        command.downgrade(config, "0008")
        assert "uploads" not in inspect(engine).get_table_names()
        with engine.connect() as conn:
            assert conn.execute(text("SELECT id, archive FROM submissions")).all() == [(1, upload)]
    finally:
        engine.dispose()
        if pg is not None:
            pg.stop()
