"""Faults with nothing lost and nothing counted twice: jobs queued while the server is restarted and the broker
(redis-server, append-only file) is restarted; a worker started afterwards grades each once."""

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
