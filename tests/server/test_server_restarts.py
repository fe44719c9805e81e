"""Faults with nothing lost and nothing counted twice: jobs queued while the server is restarted and the broker
(redis-server, append-only file) is restarted, a worker started afterwards grading each once; the broker restarted
while a worker holds an unacknowledged job mid-grading; and a whole worker node SIGKILLed mid-run, its job graded
by another node once the broker's visibility timeout passes."""

from __future__ import annotations

import time

import pytest
from cluster import REPO, start_server
from sqlalchemy import create_engine, text

from grader.server.run import start_redis, stop
from grader.server.uploads import pack_folder

pytestmark = [pytest.mark.slow, pytest.mark.docker]
SIGMOID = REPO / "reference_kernels" / "sigmoid" / "vector"


def test_server_and_broker_restarted_with_jobs_queued(tmp_path) -> None:  # noqa: ANN001
    docker_or_skip()
    redis_dir = tmp_path / "redis"
    broker_proc, broker = start_redis(redis_dir)
    port = int(broker.rsplit(":", 1)[1].split("/")[0])
    server = start_server(tmp_path / "server", broker, ["fay", "gus"])
    try:
        responses = [server.submit(who, SIGMOID) for who in ("fay", "gus")]
        assert [r.status_code for r in responses] == [201, 201], [r.text for r in responses]
        ids = [r.json()["id"] for r in responses]
        stop(broker_proc)  # SIGTERM: redis writes its append-only file and exits
        broker_proc, _ = start_redis(redis_dir, port)
        stop(server.proc)
        tokens = server.tokens
        server = start_server(tmp_path / "server", broker, [])  # the same data folder and database
        server.tokens = {**tokens, **server.tokens}  # the instructor was re-keyed
        with server.client("fay") as c:
            assert c.get(f"/api/submissions/{ids[0]}").json()["status"] == "queued"
        server.add_worker("late")
        deadline = time.monotonic() + 300
        with server.client("teacher") as teacher:
            while time.monotonic() < deadline:
                states = [teacher.get(f"/api/submissions/{i}").json() for i in ids]
                if all(s["status"] == "done" for s in states):
                    break
                time.sleep(0.5)
        assert [(s["status"], s["verdict"], s["grade_runs"]) for s in states] == [("done", "passed", 1)] * 2, states
        engine = create_engine(server.db_url)
        with engine.connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM results")).scalar() == 2
        engine.dispose()
    finally:
        server.stop()
        stop(broker_proc)


def docker_or_skip() -> None:
    try:
        from grader.sandbox.images import docker_client

        docker_client(timeout=10).ping()
    except Exception as exc:  # noqa: BLE001 - no daemon here
        pytest.skip(f"needs a running Docker daemon: {exc}")


def results_per_submission(db_url: str) -> dict[int, int]:
    engine = create_engine(db_url)
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT submission_pk, count(*) FROM results GROUP BY submission_pk")).all()
    engine.dispose()
    return dict(rows)


def test_broker_restarted_while_a_worker_holds_a_job(tmp_path, monkeypatch) -> None:  # noqa: ANN001
    """redis-server stopped and started again (same port, its append-only file) while the only worker grades
    one job (unacknowledged: acks_late) and another waits in the queue: both graded, each result committed once,
    and nothing changes after a further visibility timeout (a late redelivery finds the result committed)."""
    docker_or_skip()
    monkeypatch.setenv("BANG_GRADER_VISIBILITY_TIMEOUT", "20")
    redis_dir = tmp_path / "redis"
    broker_proc, broker = start_redis(redis_dir)
    port = int(broker.rsplit(":", 1)[1].split("/")[0])
    server = start_server(tmp_path / "server", broker, ["ivy", "jon"])
    try:
        server.add_worker("holder")
        responses = [server.submit(who, SIGMOID) for who in ("ivy", "jon")]
        assert [r.status_code for r in responses] == [201, 201], [r.text for r in responses]
        ids = [r.json()["id"] for r in responses]
        with server.client("teacher") as teacher:
            deadline = time.monotonic() + 240
            while (first := teacher.get(f"/api/submissions/{ids[0]}").json())["status"] != "running":
                assert time.monotonic() < deadline and first["status"] != "done", first
                time.sleep(0.2)
            time.sleep(1)
            assert teacher.get(f"/api/submissions/{ids[0]}").json()["status"] == "running"  # held, not acked
            stop(broker_proc)  # SIGTERM: redis writes its append-only file (the unacked job and the queue)
            time.sleep(2)
            broker_proc, _ = start_redis(redis_dir, port)
            deadline = time.monotonic() + 600
            while time.monotonic() < deadline:
                states = [teacher.get(f"/api/submissions/{i}").json() for i in ids]
                if all(s["status"] == "done" for s in states):
                    break
                time.sleep(0.5)
            assert [(s["status"], s["verdict"]) for s in states] == [("done", "passed")] * 2, states
            time.sleep(30)  # past a visibility timeout: a message left unacknowledged would be handed out again
            later = [teacher.get(f"/api/submissions/{i}").json() for i in ids]
        assert [(s["status"], s["verdict"]) for s in later] == [("done", "passed")] * 2, later
        assert results_per_submission(server.db_url) == {ids[0]: 1, ids[1]: 1}
        log = (server.data / "holder.log").read_text(errors="replace")
        assert "Connection to broker lost" in log or "Cannot connect to redis" in log, log[-3000:]
        print(f"grade_runs after the broker restart: {[s['grade_runs'] for s in later]}")
    finally:
        server.stop()
        stop(broker_proc)


def test_a_whole_node_killed_mid_run_is_graded_elsewhere_once(tmp_path, monkeypatch) -> None:  # noqa: ANN001
    """The Celery node itself SIGKILLed with its grading process (a machine lost) after the build, while the
    cases run: nobody rejects the message, so Redis hands it out again after the visibility timeout (20 s
    here) to a node started afterwards."""
    import os
    import signal

    docker_or_skip()
    monkeypatch.setenv("BANG_GRADER_VISIBILITY_TIMEOUT", "20")
    broker_proc, broker = start_redis(tmp_path / "redis")
    server = start_server(tmp_path / "server", broker, ["hal"])
    try:
        doomed = server.add_worker("doomed")
        with server.client("hal") as c:
            r = c.post("/api/submissions", data={"assignment": "sigmoid", "mode": "test"},
                       files={"archive": ("s.tar.gz", pack_folder(SIGMOID), "application/gzip")})
            assert r.status_code == 201, r.text
            sub_id = r.json()["id"]
            deadline = time.monotonic() + 240
            while (state := c.get(f"/api/submissions/{sub_id}").json())["phases"]["built"] is None:
                assert time.monotonic() < deadline and state["status"] != "done", f"never built: {state}"
                time.sleep(0.3)
            time.sleep(1)
            assert c.get(f"/api/submissions/{sub_id}").json()["phases"]["ran"] is None  # mid-run
            os.killpg(doomed.pid, signal.SIGKILL)  # the node and its grading process at once
            doomed.wait()
            server.add_worker("rescuer")
            deadline = time.monotonic() + 300
            while (state := c.get(f"/api/submissions/{sub_id}").json())["status"] != "done":
                assert time.monotonic() < deadline, state
                time.sleep(0.5)
        assert (state["grade_runs"], state["worker"].split("@")[0], state["verdict"]) == (2, "rescuer", "passed"), state
        engine = create_engine(server.db_url)
        with engine.connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM results")).scalar() == 1
        engine.dispose()
    finally:
        server.stop()
        stop(broker_proc)
