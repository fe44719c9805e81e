"""The pages' live refresh, a student's code page and the instructor's similarity, in Chromium (Playwright) on the
real server (uvicorn on loopback, SQLite, a real redis-server, no workers: uploads stay queued, which is all these
pages need). A new upload appears on the open student page and the open dashboard without a reload (server-sent
events); a student sees their own code and gets a 404 for another's; two identical final uploads are the
similarity page's (and `grade serve --similarity`'s) pair."""

from __future__ import annotations

import csv
import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cluster import CHROMIUM, REPO, launch_chromium, login, start_server

SIGMOID = REPO / "reference_kernels" / "sigmoid" / "vector"


def upload(server, who: str, folder: Path) -> int:  # noqa: ANN001
    r = server.submit(who, folder, mode="final")
    assert r.status_code == 201, r.text
    return r.json()["id"]


def test_live_pages_code_and_similarity(redis_url: str, tmp_path) -> None:  # noqa: ANN001
    if importlib.util.find_spec("playwright") is None or not Path(CHROMIUM).exists():
        pytest.skip(f"needs playwright (pip install -e .[dev]) and {CHROMIUM} (Debian chromium)")
    from playwright.sync_api import sync_playwright

    server = start_server(tmp_path / "server", redis_url, ["ann", "bob"])
    copied = tmp_path / "bob"
    shutil.copytree(SIGMOID, copied)
    try:
        with sync_playwright() as pw:
            browser = launch_chromium(pw)
            try:
                errors: list[str] = []
                ann = login(browser, server, "ann", "en", errors)
                teacher = login(browser, server, "teacher", "zh", errors)
                assert ann.locator("#submissions tr[id]").count() == 0
                ann.wait_for_function("document.querySelector('#live') !== null")
                ann.wait_for_timeout(1500)  # the event stream is open and has sent its first stamp
                teacher.wait_for_timeout(100)
                mine = upload(server, "ann", SIGMOID)
                ann.wait_for_selector(f"#sub-{mine}", timeout=20_000)  # no reload: the live part was swapped
                assert ann.evaluate("document.body.dataset.refreshed") is not None
                teacher.wait_for_selector(f"#sub-{mine}", timeout=20_000)
                theirs = upload(server, "bob", copied)
                teacher.wait_for_selector(f"#sub-{theirs}", timeout=20_000)
                ann.wait_for_timeout(2500)
                assert ann.locator(f"#sub-{theirs}").count() == 0  # bob's upload never reaches ann's page
                # her own code; bob's is a 404
                ann.click(f"#sub-{mine} a.code")
                ann.wait_for_load_state()
                assert ann.locator("h2.file").filter(has_text="sigmoid_vector.mlu").count() == 1
                assert "__bang_active_sigmoid" in ann.locator("pre.code").all_inner_texts()[-1] or \
                    "__bang_active_sigmoid" in ann.content()
                assert ann.goto(f"{server.url}/submissions/{theirs}/code").status == 404
                assert ann.goto(f"{server.url}/instructor/similarity/sigmoid").status == 403
                # the instructor's similarity page (zh): ann and bob handed in the same code
                teacher.click("#assignment-sigmoid a.similarity")
                teacher.wait_for_load_state()
                assert teacher.locator("h1").inner_text().startswith("相似度")
                pair = teacher.locator("#pairs tr.pair").first.inner_text()
                assert "ann" in pair and "bob" in pair and "100%" in pair, pair
                assert not errors, errors
            finally:
                browser.close()
        done = subprocess.run([sys.executable, "-m", "grader.cli", "serve", "--data", str(server.data), "-a", "sigmoid",
                               "--similarity", str(tmp_path / "similarity.csv")], cwd=REPO, capture_output=True,
                              text=True)
        assert done.returncode == 0, done.stdout + done.stderr
        rows = list(csv.DictReader((tmp_path / "similarity.csv").open()))
        assert [(r["student_a"], r["student_b"], r["identical"]) for r in rows] == [("ann", "bob", "yes")], rows
    finally:
        server.stop()


@pytest.fixture
def chromium():  # noqa: ANN201 - playwright's Browser
    """Debian's Chromium under Playwright, closed after the test; skipped visibly without them."""
    if importlib.util.find_spec("playwright") is None or not Path(CHROMIUM).exists():
        pytest.skip(f"needs playwright (pip install -e .[dev]) and {CHROMIUM} (Debian chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = launch_chromium(pw)
        try:
            yield browser
        finally:
            browser.close()


def test_hidden_cases_notice_waiting_type_and_the_release_button(redis_url: str, tmp_path, chromium) -> None:  # noqa: ANN001
    """In Chromium: a student's page says (zh, en) that sigmoid hides cases until the instructor releases them
    (no deadline is set); the dashboard shows a submission for a device type whose worker went away as waiting for it;
    the instructor's Release button (a CSRF form) releases them and the students' open pages lose the notice
    (live refresh)."""
    server = start_server(tmp_path / "server", redis_url, ["ann", "bob"])
    try:
        errors: list[str] = []
        ann = login(chromium, server, "ann", "zh", errors)
        bob = login(chromium, server, "bob", "en", errors)
        teacher = login(chromium, server, "teacher", "en", errors)
        assert "sigmoid 的部分用例已隐藏" in ann.locator("p.hidden-cases").inner_text()
        ann.wait_for_timeout(1500)  # the pages' event streams are open and have sent their first stamp
        assert bob.locator("p.hidden-cases").inner_text().startswith("Some cases of sigmoid are hidden")
        assert teacher.locator("#assignment-sigmoid td.hidden-state").inner_text() == "hidden from students"
        x4 = server.stand_by("mlu370-x4")  # a live X4 worker takes the upload, then goes away
        r = server.submit("bob", SIGMOID, device="mlu370-x4")
        assert r.status_code == 201, r.text
        server.leave(x4)
        teacher.reload()
        row = teacher.locator("#queue-emu-mlu370-x4.unserved")
        assert "no live worker serves mlu370-x4" in row.inner_text(), teacher.content()
        teacher.click("#assignment-sigmoid button.release")
        teacher.wait_for_url(f"{server.url}/instructor")
        assert teacher.locator("#assignment-sigmoid td.hidden-state").inner_text().startswith("released")
        assert teacher.locator("#assignment-sigmoid button.release").count() == 0
        for page in (ann, bob):  # the open pages lose the notice without a reload (live refresh)
            page.wait_for_selector("p.hidden-cases", state="detached", timeout=20_000)
            assert page.evaluate("document.body.dataset.refreshed") is not None
        assert not errors, errors
    finally:
        server.stop()
