"""The assignment's deadline and upload policy through the server (assignment.toml's [submission], overridden by
`grade serve --due/--late-hours/--late-penalty/--rate` and the instructor's API): before the deadline a student sees
only the visible groups' cases (sigmoid's `saturation` is after_deadline), the instructor everything; after it the
student too. Uploads over the hourly rate are a 429 that is no attempt; inside the late window they are taken and
marked late (the export takes the penalty off); after it they are refused. Real parts: `grade serve`, redis-server,
a Celery worker grading in the Docker sandbox."""

from __future__ import annotations

import csv
import io
import subprocess
import sys
import time

import pytest
from cluster import REPO, iso, start_server

from grader.server.uploads import pack_folder
from tests.sandbox_ready import emu_image_ready

pytestmark = [pytest.mark.slow, pytest.mark.docker]
SIGMOID = REPO / "reference_kernels" / "sigmoid" / "vector"


def submit(server, who: str, folder, mode: str):  # noqa: ANN001, ANN201
    with server.client(who) as c:
        return c.post("/api/submissions", data={"assignment": "sigmoid", "mode": mode},
                      files={"archive": ("s.tar.gz", pack_folder(folder), "application/gzip")})


def graded(server, who: str, sub_id: int) -> dict:  # noqa: ANN001
    return server.graded(who, sub_id, 400)


def groups_seen(server, who: str, sub_id: int) -> set[str]:  # noqa: ANN001
    with server.client(who) as c:
        return {case["group"] for case in c.get(f"/api/submissions/{sub_id}/result").json()["cases"]}


def test_deadline_hidden_cases_rate_and_late_policy(redis_url: str, tmp_path) -> None:  # noqa: ANN001
    if not emu_image_ready():
        pytest.skip("needs a running Docker daemon and the emulation image (grade setup)")
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "README.md").write_text("nothing here yet\n")  # an ungradable layout: graded in a moment
    server = start_server(tmp_path / "server", redis_url, ["ann", "bob"],
                          extra=["--due", iso(time.time() + 3600), "--late-hours", "1", "--late-penalty", "0.25",
                                 "--rate", "2"])
    try:
        server.add_worker("w1")
        r = submit(server, "ann", SIGMOID, "test")
        assert r.status_code == 201, r.text
        first = r.json()["id"]
        state = graded(server, "ann", first)
        # before the deadline: ann sees the visible groups only; her score counts only their points
        assert "saturation" not in groups_seen(server, "ann", first)
        assert groups_seen(server, "teacher", first) >= {"saturation", "tiny", "tail"}
        with server.client("ann") as c:
            report = c.get(f"/api/submissions/{first}/report").text
            mine = c.get(f"/api/submissions/{first}/result").json()
        assert "saturation" not in report and "shown after" in report, report[:500]
        with server.client("teacher") as t:
            full = t.get(f"/api/submissions/{first}/result").json()
            assert "saturation" in t.get(f"/api/submissions/{first}/report").text
        assert mine["max_score"] == sum(g["points_possible"] for g in full["groups"] if g["name"] != "saturation")
        assert (state["score"], state["max_score"]) == (mine["score"], mine["max_score"])  # the status agrees
        # the rate: two uploads an hour; a third is a 429 and no attempt
        assert graded(server, "ann", submit(server, "ann", empty, "test").json()["id"])["verdict"] == \
            "ungradable_layout"
        r = submit(server, "ann", SIGMOID, "test")
        assert r.status_code == 429 and "at most 2 uploads an hour" in r.json()["error"], r.text
        with server.client("ann") as c:
            assert len(c.get("/api/submissions").json()) == 2
        # the deadline moved 10 minutes into the past (late window 1 h); rate lifted
        with server.client("teacher") as t:
            row = t.post("/api/assignments/sigmoid", json={"due": iso(time.time() - 600), "per_hour": 0}).json()
        assert row["per_hour"] is None and row["late_until"] - row["deadline"] == 3600, row
        assert "saturation" in groups_seen(server, "ann", first)  # after the deadline ann sees every case
        r = submit(server, "bob", SIGMOID, "final")
        assert r.status_code == 201, r.text
        late = graded(server, "bob", r.json()["id"])
        assert late["late"] is True, late
        # past the late window: refused, no attempt
        with server.client("teacher") as t:
            t.post("/api/assignments/sigmoid", json={"due": iso(time.time() - 7200)}).raise_for_status()
        r = submit(server, "ann", SIGMOID, "final")
        assert r.status_code == 403 and "has passed" in r.json()["error"], r.text
        with server.client("teacher") as t:
            assert len(t.get("/api/submissions").json()) == 3
            bob_score = t.get(f"/api/submissions/{late['id']}/result").json()["score"]
        done = subprocess.run([sys.executable, "-m", "grader.cli", "serve", "--data", str(server.data), "-a", "sigmoid",
                               "--export", str(tmp_path / "exports")], cwd=REPO, capture_output=True, text=True)
        assert done.returncode == 0, done.stdout + done.stderr
        rows = {r["student_id"]: r for r in csv.DictReader(io.StringIO((tmp_path / "exports" /
                                                                         "gradebook.csv").read_text()))}
        assert float(rows["bob"]["total"]) == pytest.approx(round(bob_score * 0.75, 2)), rows["bob"]
        assert "submitted late" in rows["bob"]["message"]
    finally:
        server.stop()
