"""Faults with nothing lost and nothing counted twice: jobs queued while the server is restarted and the broker
(redis-server, append-only file) is restarted, a worker started afterwards grading each once; and a whole worker
node SIGKILLed mid-grading, its job graded by another node once the broker's visibility timeout passes."""

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
    try:
        from grader.sandbox.images import docker_client

        docker_client(timeout=10).ping()
    except Exception as exc:  # noqa: BLE001 - no daemon here
        pytest.skip(f"needs a running Docker daemon: {exc}")
    redis_dir = tmp_path / "redis"
    broker_proc, broker = start_redis(redis_dir)
    port = int(broker.rsplit(":", 1)[1].split("/")[0])
    server = start_server(tmp_path / "server", broker, ["fay", "gus"])
    try:
        ids = []
        for who in ("fay", "gus"):
            with server.client(who) as c:
                r = c.post("/api/submissions", data={"assignment": "sigmoid", "mode": "test"},
                           files={"archive": ("s.tar.gz", pack_folder(SIGMOID), "application/gzip")})
                assert r.status_code == 201, r.text
                ids.append(r.json()["id"])
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


def test_a_whole_node_killed_mid_grading_is_graded_elsewhere_once(tmp_path, monkeypatch) -> None:  # noqa: ANN001
    """The Celery node itself SIGKILLed with its grading process (a machine lost): nobody rejects the message,
    so Redis hands it out again after the visibility timeout (20 s here) to a node started afterwards."""
    import os
    import signal

    try:
        from grader.sandbox.images import docker_client

        docker_client(timeout=10).ping()
    except Exception as exc:  # noqa: BLE001 - no daemon here
        pytest.skip(f"needs a running Docker daemon: {exc}")
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
            deadline = time.monotonic() + 120
            while c.get(f"/api/submissions/{sub_id}").json()["status"] != "running":
                assert time.monotonic() < deadline, "never started"
                time.sleep(0.3)
            time.sleep(3)
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
