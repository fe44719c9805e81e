"""Bad input through the real server (uvicorn on loopback, a real redis-server, no workers: every accepted
job stays queued), on SQLite and on a real PostgreSQL: each refusal is a clear error, counts as no attempt,
and leaves the other students' submissions alone."""

from __future__ import annotations

import io
import os
import re
import select
import subprocess
import sys
import tarfile
import time

import pytest
from cluster import REPO, pg_bin, start_postgres, start_server

from grader.server.uploads import MAX_UPLOAD_BYTES, pack_folder
from grader.server.workers import POLL_SECONDS

SIGMOID = REPO / "reference_kernels" / "sigmoid" / "vector"


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def server(request: pytest.FixtureRequest, redis_url: str, tmp_path_factory: pytest.TempPathFactory):
    pg = None
    if request.param == "postgresql":
        if pg_bin() is None:
            pytest.skip("PostgreSQL not installed (scripts/setup-system.sh --tests)")
        pg = start_postgres(tmp_path_factory.mktemp("pg"))
    srv = start_server(tmp_path_factory.mktemp(f"server-{request.param}"), redis_url, ["ann", "ben", "cho", "dan", "eve"],
                       db_url=pg.url if pg else None)
    yield srv
    srv.stop()
    if pg is not None:
        pg.stop()


def tar_with(*members: tarfile.TarInfo, data: bytes = b"x") -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for member in members:
            tf.addfile(member, io.BytesIO(data) if member.isfile() else None)
    return buf.getvalue()


def member(name: str, kind: bytes = tarfile.REGTYPE, target: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.size = kind, target, 1 if kind == tarfile.REGTYPE else 0
    return info


def upload(client, data: bytes, assignment: str = "sigmoid", mode: str = "test", **form: str):  # noqa: ANN001, ANN201
    return client.post("/api/submissions", data={"assignment": assignment, "mode": mode, **form},
                       files={"archive": ("s.tar.gz", data, "application/gzip")})


def attempts(server, who: str) -> int:  # noqa: ANN001
    return len(attempts_of(server, who))


def attempts_of(server, who: str) -> list[dict]:  # noqa: ANN001
    with server.client("teacher") as c:
        return [s for s in c.get("/api/dashboard").json()["submissions"] if s["student_id"] == who]


def test_every_route_needs_an_account(server) -> None:  # noqa: ANN001
    with server.client(None) as anon:
        for path in ("/api/me", "/api/submissions", "/api/submissions/1", "/api/dashboard"):
            r = anon.get(path)
            assert r.status_code == 401 and r.json()["error"] == "missing or wrong token", path
        assert anon.get("/").status_code == 303 and anon.get("/").headers["location"] == "/login"
        assert anon.get("/instructor").status_code == 303
    with server.client(None) as wrong:
        wrong.headers["Authorization"] = "Bearer " + "A" * 43
        assert wrong.post("/api/submissions").status_code == 401
    with server.client("ann") as c:
        assert c.get("/api/me").json() == {"student_id": "ann", "name": "Ann", "role": "student"}
        assert c.get("/api/dashboard").status_code == 403


def test_bad_uploads_are_clear_errors_and_no_attempt(server) -> None:  # noqa: ANN001
    with server.client("ben") as c:
        cases = {
            "oversized": (b"\0" * (MAX_UPLOAD_BYTES + 10), 413, "at most"),
            "dotdot": (tar_with(member("my_ops/../../etc/evil")), 400, "outside its folder"),
            "symlink": (tar_with(member("my_ops/ops.py", tarfile.SYMTYPE, "/etc/passwd")), 400, "link"),
            "hardlink": (tar_with(member("a.txt"), member("b.txt", tarfile.LNKTYPE, "a.txt")), 400, "link"),
            "not a tar": (b"PK\3\4 not really", 400, "not a readable"),
        }
        for name, (data, status, words) in cases.items():
            r = upload(c, data)
            assert r.status_code == status, (name, r.text)
            assert words in r.json()["error"], (name, r.text)
        # a malformed form: no file, no mode; an unknown mode; an unknown assignment
        r = c.post("/api/submissions", data={"assignment": "sigmoid"})
        assert r.status_code == 400 and re.search(r"missing or invalid .*archive", r.json()["error"])
        assert "unknown mode" in upload(c, pack_folder(SIGMOID), mode="fast").json()["error"]
        assert upload(c, pack_folder(SIGMOID), assignment="nope").status_code == 404
    assert attempts(server, "ben") == 0


def test_one_submission_in_flight_and_only_ones_own(server) -> None:  # noqa: ANN001
    good = pack_folder(SIGMOID)
    with server.client("cho") as cho, server.client("ann") as ann:
        first = upload(cho, good)
        assert first.status_code == 201, first.text
        assert first.json()["position"] is not None
        second = upload(cho, good)
        assert second.status_code == 409 and "already have a submission" in second.json()["error"]
        # another student is not affected by cho's job in flight, and cannot see it
        other = upload(ann, good)
        assert other.status_code == 201, other.text
        sub_id = first.json()["id"]
        assert ann.get(f"/api/submissions/{sub_id}").status_code == 404
        assert ann.get(f"/api/submissions/{sub_id}/report").status_code == 404
        assert [s["id"] for s in ann.get("/api/submissions").json()] == [other.json()["id"]]
        state = cho.get(f"/api/submissions/{sub_id}").json()
        assert state["status"] == "queued" and state["phases"]["queued"] is not None
        assert "seed" not in cho.get(f"/api/submissions/{sub_id}").text
    assert attempts(server, "cho") == 1


def test_forms_need_the_csrf_token(server) -> None:  # noqa: ANN001
    with server.client(None) as browser:
        page = browser.get("/login")
        csrf = re.search(r'name="csrf" value="([^"]+)"', page.text).group(1)
        r = browser.post("/login", data={"token": server.tokens["teacher"], "csrf": "forged"})
        # a page's error is a page (issue 40: raw JSON on the pages was wrong), in the page's language
        assert r.status_code == 403 and r.headers["content-type"].startswith("text/html"), r.text
        assert "did not come from this site" in r.text
        r = browser.post("/login", data={"token": server.tokens["teacher"], "csrf": csrf})
        assert r.status_code == 303 and r.headers["location"] == "/instructor"
        dash = browser.get("/instructor")
        assert dash.status_code == 200 and "Queue depth" in dash.text
        r = browser.post("/instructor/regrade/1", data={})
        assert r.status_code == 400  # malformed: no csrf field
        r = browser.post("/instructor/regrade/1", data={"csrf": "forged"})
        assert r.status_code == 403


def test_the_cli_says_why_and_exits_2_when_nothing_is_graded(server, tmp_path) -> None:  # noqa: ANN001
    import os
    import shutil
    import subprocess
    import sys

    linked = tmp_path / "my_ops"
    shutil.copytree(SIGMOID, linked)
    (linked / "mlu" / "peek.h").symlink_to("/etc/passwd")

    def submit(folder, token: str) -> subprocess.CompletedProcess:  # noqa: ANN001
        return subprocess.run([sys.executable, "-m", "grader.cli", "submit", "--server", server.url, str(folder),
                               "--out", str(tmp_path / "out")], env={**os.environ, "BANG_GRADER_TOKEN": token},
                              cwd=REPO, capture_output=True, text=True, timeout=120)

    done = submit(linked, server.tokens["ann"])
    assert done.returncode == 2 and "peek.h is a link" in done.stderr, done.stderr
    done = submit(SIGMOID, "not-a-token")
    assert done.returncode == 2 and "missing or wrong token" in done.stderr, done.stderr
    assert not (tmp_path / "out").exists()


# What `grade submit --server` must run without (issue 40 item 7): a submit-only install has none of them.
GRADING_STACK = ("torch", "numpy", "docker", "jinja2", "sqlalchemy", "fastapi", "starlette", "celery", "uvicorn",
                 "alembic", "psycopg", "copydetect", "kubernetes")


def torchless_grade(server, *args: str, token: str, lang: str = "C.UTF-8") -> subprocess.Popen:  # noqa: ANN001
    """`grade ARGS` through the command's entry point, in a Python where the grading stack cannot be imported."""
    blocked = f"import sys; sys.modules.update(dict.fromkeys({GRADING_STACK!r})); "
    run = blocked + "sys.argv = ['grade', *sys.argv[1:]]; from grader.cli.entry import main; main()"
    env = {**os.environ, "BANG_GRADER_TOKEN": token, "LANG": lang, "LC_ALL": lang, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([sys.executable, "-c", run, *args], env=env, cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_the_client_submits_without_torch_or_the_grading_stack(server, tmp_path) -> None:  # noqa: ANN001
    """With torch, numpy, docker, jinja2, the database and web stacks unimportable, `grade submit --server`
    lists the assignments (in Chinese under a zh_CN locale), and uploads: the server takes it (queued here, no
    workers), after which the client follows its phases."""
    listing = torchless_grade(server, "submit", "--server", server.url, "--list", token=server.tokens["eve"],
                              lang="zh_CN.UTF-8")
    out, err = listing.communicate(timeout=120)
    assert listing.returncode == 0 and "sigmoid" in out and "截止时间" in out, (out, err)
    client = torchless_grade(server, "submit", "--server", server.url, str(SIGMOID), "--out", str(tmp_path / "out"),
                             "--lang", "zh", token=server.tokens["eve"])
    said = ""
    try:
        deadline = time.monotonic() + 120
        while "排队中" not in said:  # it heard the id, then follows the phases: queued
            assert client.poll() is None and time.monotonic() < deadline, said
            if select.select([client.stdout], [], [], 0.5)[0]:
                said += client.stdout.readline()  # type: ignore[union-attr]
    finally:
        client.kill()
        client.communicate()
    mine = attempts_of(server, "eve")
    assert [(s["status"], s["mode"]) for s in mine] == [("queued", "test")], mine
    assert f"提交 #{mine[0]['id']} 已上传" in said, said  # its words in Chinese (--lang zh)
    # and the worker will grade it in Chinese: the student's language is stored with the upload
    import sqlalchemy

    from grader.server.db import Database, Submission

    with Database(server.db_url).session() as s:
        assert s.scalar(sqlalchemy.select(Submission.lang).where(Submission.id == mine[0]["id"])) == "zh"


def test_a_device_type_no_live_worker_serves_is_refused_and_a_lost_one_shows_as_waiting(server) -> None:  # noqa: ANN001
    """Only a stand-by worker of the default type is live here: a submission for the MLU370-X4 type is refused
    (409, naming the types served now) and counts as no attempt. With a live X4 worker it is taken; the worker
    then goes away, and the queued job stays, shown to its student (API and page) and on the instructor's
    dashboard as waiting for a worker of that type; its student cancels it (the page's button), which frees
    their slot; another student cannot cancel it, an instructor can cancel anyone's."""
    with server.client("dan") as dan:
        r = upload(dan, pack_folder(SIGMOID), device="mars-1")
        assert r.status_code == 400 and "unknown device type 'mars-1'" in r.json()["error"], r.text
        r = upload(dan, pack_folder(SIGMOID), device="MLU370-X4")
        assert r.status_code == 409, r.text
        assert r.json()["error"] == "no worker grades device type mlu370-x4 now; served now: mlu370-x8", r.text
    assert attempts(server, "dan") == 0
    x4 = server.stand_by("mlu370-x4")
    with server.client("dan") as dan:
        r = upload(dan, pack_folder(SIGMOID), device="MLU370-X4")
        assert r.status_code == 201, r.text
        assert (r.json()["device_type"], r.json()["waiting_for"], r.json()["workers"]) == ("mlu370-x4", None, 1)
        waiting = r.json()["id"]
        server.leave(x4)  # the worker goes away with the job still queued
        state = dan.get(f"/api/submissions/{waiting}").json()
        assert (state["status"], state["device_type"], state["waiting_for"]) == ("queued", "mlu370-x4", "mlu370-x4")
        assert state["estimate_seconds"] is None, state  # nobody to grade it: no estimate
        assert state["poll_seconds"] == POLL_SECONDS[1], state  # nor anything to ask about often until a worker joins
    assert attempts(server, "dan") == 1
    # a counted (timed) run on a type whose speed thresholds nobody calibrated would score no speed: refused
    with server.client("ben") as ben:
        r = upload(ben, pack_folder(SIGMOID), mode="final", device="mlu270")
        assert r.status_code == 400 and "no speed thresholds for device type mlu270" in r.json()["error"], r.text
        assert ben.post(f"/api/submissions/{waiting}/cancel").status_code == 404  # not his: as a missing one
    assert attempts(server, "ben") == 0
    with server.client("teacher") as t:
        queues = {q["queue"]: q for q in t.get("/api/dashboard").json()["queues"]}
    x4q = queues["grade.emu.mlu370-x4"]
    assert (x4q["device_type"], x4q["queued"], x4q["workers"], x4q["unserved"]) == ("mlu370-x4", 1, [], True), queues
    with server.page_session("teacher") as page:
        html = page.get("/instructor").text
    row = re.search(r'<tr id="queue-emu-mlu370-x4" class="unserved">(.*?)</tr>', html, re.S)
    assert row is not None and "no live worker serves mlu370-x4" in row.group(1), html
    with server.page_session("dan") as page:
        mine = re.search(rf'<tr id="sub-{waiting}"[^>]*>(.*?)</tr>', page.get("/").text, re.S).group(1)
        assert "no worker grades mlu370-x4 now" in mine and 'class="cancel"' in mine, mine
        r = page.post(f"/submissions/{waiting}/cancel", data={"csrf": page.csrf})
        assert r.status_code == 303, r.text
        assert page.post(f"/submissions/{waiting}/cancel", data={"csrf": page.csrf}).status_code == 409  # final
    with server.client("dan") as dan:
        assert dan.get(f"/api/submissions/{waiting}").json()["status"] == "cancelled"
        r = upload(dan, pack_folder(SIGMOID))  # the slot is free: the next upload is taken
        assert r.status_code == 201, r.text
    with server.client("teacher") as t:
        ahead = [v["id"] for v in t.get("/api/dashboard").json()["submissions"] if v["status"] == "queued"
                 and v["device_type"] == "mlu370-x8" and v["id"] < r.json()["id"]]  # the others' queued uploads
        assert (r.json()["position"], r.json()["workers"]) == (len(ahead), 1), r.json()
        assert t.post(f"/api/submissions/{r.json()['id']}/cancel").json()["status"] == "cancelled"
    with server.client("dan") as dan:
        assert dan.get(f"/api/submissions/{r.json()['id']}").json()["status"] == "cancelled"


def test_the_assignment_buttons_need_the_csrf_token_and_an_instructor(server) -> None:  # noqa: ANN001
    with server.page_session("teacher") as page:
        for action in ("open", "close", "release"):
            r = page.post(f"/instructor/assignments/sigmoid/{action}", data={"csrf": "forged"})
            assert r.status_code == 403, (action, r.text)
        assert page.post("/instructor/assignments/sigmoid/melt", data={"csrf": page.csrf}).status_code == 404
    with server.page_session("ben") as page:
        r = page.post("/instructor/assignments/sigmoid/release", data={"csrf": page.csrf})
        assert r.status_code == 403 and "instructors only" in r.text
    with server.client("teacher") as t:
        row = next(a for a in t.get("/api/assignments").json() if a["name"] == "sigmoid")
    assert row["open"] and row["released_at"] is None and row["has_hidden"], row
    # sigmoid has no deadline: its hidden cases wait for the instructor, and a student's page says so
    assert len(hidden_notes(server, "dan")) == 1
    with server.page_session("teacher") as page:
        r = page.post("/instructor/assignments/sigmoid/release", data={"csrf": page.csrf})
        assert r.status_code == 303, r.text
        assert "released" in re.search(r'<td class="hidden-state">(.*?)</td>', page.get("/instructor").text).group(1)
    with server.client("teacher") as t:
        row = next(a for a in t.get("/api/assignments").json() if a["name"] == "sigmoid")
    assert row["open"] and row["released_at"] is not None and row["released"], row  # released, still open
    assert hidden_notes(server, "dan") == []


def hidden_notes(server, who: str) -> list[str]:  # noqa: ANN001
    with server.page_session(who) as page:
        return re.findall(r'<p class="hidden-cases">(.*?)</p>', page.get("/").text)


def test_release_from_the_cli(redis_url: str, tmp_path) -> None:  # noqa: ANN001
    """`grade serve --release NAME` on the running server's database: recorded, shown at once, then it exits."""
    import subprocess
    import sys

    srv = start_server(tmp_path / "server", redis_url, ["eve"])
    try:
        assert len(hidden_notes(srv, "eve")) == 1

        def cli(*args: str) -> subprocess.CompletedProcess:
            return subprocess.run([sys.executable, "-m", "grader.cli", "serve", "--data", str(srv.data), *args],
                                  cwd=REPO, capture_output=True, text=True, timeout=120)

        done = cli("--release", "nope")
        assert done.returncode == 2 and "no assignment 'nope'" in done.stderr, done.stdout + done.stderr
        done = cli("--release", "sigmoid")
        assert done.returncode == 0 and "released to the students: sigmoid" in done.stdout, done.stdout + done.stderr
        assert hidden_notes(srv, "eve") == []
        with srv.client("teacher") as t:
            row = next(a for a in t.get("/api/assignments").json() if a["name"] == "sigmoid")
        assert row["released_at"] is not None and row["open"], row
    finally:
        srv.stop()


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_a_database_of_the_previous_schema_is_upgraded_and_its_queued_jobs_routed_by_type(
        kind: str, redis_url: str, tmp_path) -> None:  # noqa: ANN001
    """A database at migration 0002 (queues named grade.<backend>.<device or 'default'>, an mlu assignment's
    device a card index), a job still queued on it: `grade serve` upgrades it (0003 on SQLite and PostgreSQL)
    and queues the job again on its device type's queue, where the dashboard shows it waiting."""
    from alembic import command
    from alembic.config import Config
    from sqlalchemy import create_engine, text

    from grader.server.db import MIGRATIONS, sqlite_url
    from grader.server.devices import device_type

    pg = None
    if kind == "postgresql":
        if pg_bin() is None:
            pytest.skip("PostgreSQL not installed (scripts/setup-system.sh --tests)")
        pg = start_postgres(tmp_path / "pg")
    data = tmp_path / "server"
    data.mkdir()
    url = pg.url if pg else sqlite_url(data)
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    command.upgrade(config, "0002")
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO assignments (name, backend, device, seed, is_open, late_penalty) VALUES "
                          "('sigmoid', 'emu', NULL, 'old-seed', true, 0), ('matmul', 'mlu', '0', 's2', false, 0)"))
        conn.execute(text("INSERT INTO students (student_id, name, role, token_hash, pseudonym, on_leaderboard) "
                          "VALUES ('old', '', 'student', 'h', 'kernel-old', false)"))
        conn.execute(text("INSERT INTO submissions (student_pk, assignment_pk, mode, archive, content_hash, queue, "
                          "status, in_flight, grade_runs, submitted_at, late) VALUES (1, 1, 'test', :a, 'c', "
                          "'grade.emu.default', 'queued', true, 0, 1.0, false)"), {"a": pack_folder(SIGMOID)})
    engine.dispose()
    server = start_server(data, redis_url, ["bob"], db_url=url, standby=False)
    try:
        assert "1 queued submission(s) moved to their device type's queue" in server.startup, server.startup
        default = device_type(None)
        with server.client("teacher") as t:
            dash = t.get("/api/dashboard").json()
            rows = {a["name"]: a for a in t.get("/api/assignments").json()}
        (sub,) = dash["submissions"]
        assert (sub["status"], sub["device_type"]) == ("queued", default), sub
        assert (sub["generation"], sub["regrade_failed"], sub["graded"]) == (0, None, False), sub  # 0004's columns
        assert (sub["chosen_at"], sub["policy"], rows["sigmoid"]["policy"]) == (None, "latest", "latest"), sub  # 0005's
        queues = {q["queue"]: q for q in dash["queues"]}
        assert set(queues) == {f"grade.emu.{default}"} and queues[f"grade.emu.{default}"]["unserved"], queues
        assert rows["matmul"]["device_type"] == default and rows["matmul"]["released_at"] is None, rows
    finally:
        server.stop()
        if pg is not None:
            pg.stop()


def test_a_worker_states_a_device_type_it_can_grade_on(tmp_path) -> None:  # noqa: ANN001
    """`grade serve --worker-only`: an emulator slot's --device and --device-type must agree, a type must be the
    device table's, and an MLU worker needs a card (or, in a worker pod, --device-type): usage errors (exit 2)
    before anything starts."""
    import subprocess
    import sys

    def worker(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "grader.cli", "serve", "--worker-only", "--data", str(tmp_path),
                               "--broker", "redis://127.0.0.1:1/0", *args], cwd=REPO, capture_output=True, text=True,
                              timeout=120)

    done = worker("--device", "mlu370-x8", "--device-type", "mlu270")
    assert done.returncode == 2 and "differ" in done.stderr, done.stderr
    done = worker("--device-type", "mars-1")
    assert done.returncode == 2 and "unknown device type 'mars-1'" in done.stderr, done.stderr
    done = worker("--backend", "mlu")
    assert done.returncode == 2 and "no usable MLU card" in done.stderr, done.stderr
