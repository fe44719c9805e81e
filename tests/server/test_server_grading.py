"""Real grading through the server: `grade serve` (uvicorn), a real redis-server, two Celery worker nodes
grading on the emulator in Docker. One student submits with `grade submit --server` (the CLI's summary,
report.html and exit status); the other's grading process is SIGKILLed mid-build: the broker hands the job out
again, it is graded again and its result is committed once."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cluster import CHROMIUM, REPO, launch_chromium, login, pool_children, sigkill, start_server
from sqlalchemy import create_engine, text

from grader.server.uploads import pack_folder
from tests.sandbox_ready import emu_image_ready

pytestmark = [pytest.mark.slow, pytest.mark.docker]
SIGMOID = REPO / "reference_kernels" / "sigmoid" / "vector"


@pytest.fixture(scope="module")
def sandbox_image() -> None:
    if not emu_image_ready():
        pytest.skip("needs a running Docker daemon and the emulation image (grade setup)")


def unique_copy(folder: Path, dest: Path) -> Path:
    """`folder` with a comment no build has seen in its kernel: a build-cache miss, so its build compiles."""
    import shutil
    import uuid

    shutil.copytree(folder, dest)
    for kernel in dest.rglob("*.mlu"):
        kernel.write_text(kernel.read_text() + f"\n// {uuid.uuid4()}\n")
    return dest


def wait_ready(log, timeout: float = 60) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if log.exists() and " ready." in log.read_text(errors="replace"):
            return
        time.sleep(0.2)
    raise AssertionError(f"worker not ready: {log.read_text(errors='replace')[-2000:] if log.exists() else ''}")


def test_two_nodes_a_killed_grading_counted_once(sandbox_image, redis_url: str, tmp_path) -> None:  # noqa: ANN001
    server = start_server(tmp_path / "server", redis_url, ["dee", "eli"])
    try:
        nodes = {name: server.add_worker(name) for name in ("nodeA", "nodeB")}
        for name in nodes:
            wait_ready(server.data / f"{name}.log")
        with server.client("dee") as dee:
            r = dee.post("/api/submissions", data={"assignment": "sigmoid", "mode": "test"},
                         files={"archive": ("s.tar.gz", pack_folder(unique_copy(SIGMOID, tmp_path / "dee")),
                                            "application/gzip")})
            assert r.status_code == 201, r.text
            sub_id = r.json()["id"]
            # eli submits with the CLI at the same time: the other node grades it
            env = {**os.environ, "BANG_GRADER_TOKEN": server.tokens["eli"]}
            cli = subprocess.Popen([sys.executable, "-m", "grader.cli", "submit", "--server", server.url,
                                    str(SIGMOID), "--out", str(tmp_path / "eli"), "--mode", "final"], env=env, cwd=REPO,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            deadline = time.monotonic() + 240
            seen_running: set[str] = set()
            killed = None
            running_since = None
            while time.monotonic() < deadline:
                state = dee.get(f"/api/submissions/{sub_id}").json()
                with server.client("teacher") as teacher:
                    seen_running |= {s["worker"] for s in teacher.get("/api/dashboard").json()["submissions"]
                                     if s["status"] == "running"}
                if state["status"] == "running" and running_since is None:
                    running_since = time.monotonic()
                # SIGKILL mid-build: dee's kernel is new to the build cache, so its build compiles; the phase
                # records say the build had started (started) and not finished (built)
                if killed is None and state["status"] == "running" and time.monotonic() - running_since > 1.5:
                    assert state["phases"]["built"] is None, f"the build finished before the kill: {state}"
                    node = nodes[state["worker"].split("@")[0]]
                    children = pool_children(node.pid)
                    assert len(children) == 1, children
                    sigkill(children[0])
                    killed = state["worker"]
                    after = dee.get(f"/api/submissions/{sub_id}").json()
                    assert after["phases"]["built"] is None, f"built before the kill landed: {after}"
                if state["status"] == "done":
                    break
                time.sleep(0.3)
            assert killed is not None, f"never saw the grading mid-build: {state}"
            assert state["status"] == "done", state
            assert state["grade_runs"] == 2 and state["verdict"] == "passed", state
            assert dee.get(f"/api/submissions/{sub_id}/result").json()["verdict"] == "passed"
        out, _ = cli.communicate(timeout=240)
        # final mode grades every stage: the single-core reference is too slow for the later ones, and the
        # CLI says so and exits 1, as `grade submit` does locally
        assert cli.returncode == 1, out
        assert "queued" in out and "verdict: too slow" in out, out
        assert (tmp_path / "eli" / "report.html").read_text().lower().startswith("<!doctype html>")
        assert len({w.split("@")[0] for w in seen_running}) == 2, seen_running  # both nodes graded at once
        engine = create_engine(server.db_url)
        with engine.connect() as conn:
            rows = conn.execute(text("SELECT submission_pk, count(*) FROM results GROUP BY submission_pk")).all()
        engine.dispose()
        assert sorted(n for _pk, n in rows) == [1, 1], rows  # two submissions, each counted once
        lost = "".join((server.data / f"{n}.log").read_text(errors="replace") for n in nodes)
        assert "WorkerLostError" in lost
        # the exports hold final results only: eli's (final), not dee's (test)
        done = subprocess.run([sys.executable, "-m", "grader.cli", "serve", "--data", str(server.data), "-a", "sigmoid",
                               "--export", str(tmp_path / "exports")], cwd=REPO, capture_output=True, text=True)
        assert done.returncode == 0, done.stdout + done.stderr
        gradebook = (tmp_path / "exports" / "gradebook.csv").read_text()
        assert "eli" in gradebook and "dee" not in gradebook, gradebook
        browse(server, sub_id)
    finally:
        server.stop()


def browse(server, dee_submission: int) -> None:  # noqa: ANN001
    """A student's and an instructor's session in Chromium, in both languages, on the graded class."""
    import importlib.util

    if importlib.util.find_spec("playwright") is None or not Path(CHROMIUM).exists():
        pytest.skip(f"browser part: needs playwright (pip install -e .[dev]) and {CHROMIUM} (Debian chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = launch_chromium(pw)
        try:
            errors: list[str] = []

            dee = login(browser, server, "dee", "en", errors)
            assert dee.locator("h1").inner_text() == "My submissions"
            assert "passed" in dee.locator(f"#sub-{dee_submission}").inner_text()
            assert dee.locator("#submissions tr[id]").count() == 1  # only dee's own
            dee.click(f"#sub-{dee_submission} a[href$='/report']")
            dee.wait_for_load_state()
            assert "sigmoid" in dee.content() and dee.url.endswith(f"/submissions/{dee_submission}/report")
            dee.goto(f"{server.url}/?lang=zh")
            assert dee.locator("h1").inner_text() == "我的提交"
            assert dee.goto(f"{server.url}/instructor").status == 403  # a student is no instructor

            eli = login(browser, server, "eli", "zh", errors)
            eli.click("#opt")  # join the leaderboard (a form with its CSRF token)
            eli.wait_for_load_state()
            assert "化名" in eli.locator("form[action='/leaderboard/opt']").inner_text()
            eli.goto(f"{server.url}/leaderboard/sigmoid")
            board = eli.locator("table.stage").first.inner_text()
            assert "kernel-" in board and "模型估算" in board and "mlu370-x8" in board, board
            eli.goto(f"{server.url}/leaderboard/sigmoid?lang=en")
            assert "modelled" in eli.locator("table.stage").first.inner_text()

            teacher = login(browser, server, "teacher", "zh", errors)
            assert teacher.url.endswith("/instructor")
            assert "队列长度" in teacher.locator("#depth").inner_text()
            table = teacher.locator("#submissions").inner_text()
            assert "dee" in table and "eli" in table and "评分次数" in table
            teacher.click(f"#sub-{dee_submission} button.regrade")  # a form with its CSRF token
            teacher.wait_for_load_state()
            teacher.goto(f"{server.url}/instructor?lang=en")
            assert "Queue depth" in teacher.locator("#depth").inner_text()
            assert not errors, errors
        finally:
            browser.close()
    # the regrade: graded once more, still one result
    with server.client("teacher") as teacher_api:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            state = teacher_api.get(f"/api/submissions/{dee_submission}").json()
            if state["status"] == "done":
                break
            time.sleep(0.5)
        assert state["status"] == "done" and state["grade_runs"] == 3 and state["verdict"] == "passed", state
