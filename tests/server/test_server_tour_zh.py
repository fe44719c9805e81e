"""A Chinese-speaking class on the real course server, in Chromium (Playwright) and the real client (issue 40's
"must show"): `grade serve` (uvicorn on loopback, SQLite, a real redis-server) in the course's time zone
(Asia/Shanghai) with one real emulator worker grading in the docker sandbox; the student `ann` uses the light
client in Chinese and her pages in Chinese, the instructor `teacher` the dashboard in Chinese.

Each step is asserted and screenshotted (`BANG_GRADER_TOUR_SHOTS=DIR` keeps the PNGs there, else the test's tmp
folder): the student's assignments with the deadline in the course's time, the policy of what counts; an upload
through `grade submit --server --lang zh` with its summary in Chinese; the graded submission marked as the one that
counts and its report in Chinese; a device type no worker serves refused with the types served; a queued job
(on a type a worker left) cancelled from the page; the leaderboard with her own row marked; the instructor's
dashboard, filters and a student's page. Skipped visibly without docker's emulation image, redis, Playwright or
Chromium."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from cluster import CHROMIUM, REPO, launch_chromium, login, start_server

SIGMOID = REPO / "reference_kernels" / "sigmoid" / "vector"
CJK = re.compile(r"[\u4e00-\u9fff]")


def _need_everything() -> None:
    if importlib.util.find_spec("playwright") is None or not Path(CHROMIUM).exists():
        pytest.skip(f"needs playwright (pip install -e .[dev]) and {CHROMIUM} (Debian chromium)")
    from grader.sandbox.images import emu_image_tag, image_exists
    from grader.sandbox.select import docker_status

    client, why = docker_status()
    if client is None or not image_exists(client, emu_image_tag()):
        pytest.skip(f"the worker grades in the docker sandbox: its image is not built ({why or 'no image'})")


def _shots(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("BANG_GRADER_TOUR_SHOTS") or tmp_path / "shots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def test_a_chinese_speaking_student_and_instructor_through_the_course_server(redis_url: str, tmp_path) -> None:  # noqa: ANN001
    _need_everything()
    from playwright.sync_api import sync_playwright

    shots = _shots(tmp_path)
    server = start_server(tmp_path / "server", redis_url, ["ann", "bob"], extra=["--timezone", "Asia/Shanghai"])
    try:
        server.add_worker("w1")
        env = {**os.environ, "BANG_GRADER_TOKEN": server.tokens["ann"], "LANG": "zh_CN.UTF-8"}
        # the light client, in Chinese: the open assignments, then a final upload followed to its summary
        listed = subprocess.run([sys.executable, "-m", "grader.cli", "submit", "--server", server.url, "--list"],
                                capture_output=True, text=True, env=env, cwd=REPO, timeout=120)
        assert listed.returncode == 0 and "sigmoid" in listed.stdout and CJK.search(listed.stdout), listed
        done = subprocess.run([sys.executable, "-m", "grader.cli", "submit", "--server", server.url, str(SIGMOID),
                               "-a", "sigmoid", "--mode", "final", "--lang", "zh", "--out", str(tmp_path / "ann-out")],
                              capture_output=True, text=True, env=env, cwd=REPO, timeout=1200)
        assert done.returncode in (0, 1), done.stdout + done.stderr  # graded (1: a stage too slow)
        # the summary in Chinese: the points withheld until the deadline said as pending, the counting submission named
        assert "待截止后公布" in done.stdout and "计分的提交" in done.stdout, done.stdout
        (shots / "01-client-zh.txt").write_text(listed.stdout + "\n" + done.stdout)
        # a device type no worker serves: refused, naming what is served
        refused = server.submit("ann", SIGMOID, mode="test", device="mlu370-x4")
        assert refused.status_code == 409 and "mlu370-x8" in refused.text, refused.text
        # a type a (stand-by) worker served when the upload came, then left: queued, said so, cancelled from the page
        standby = server.stand_by("mlu370-x4")
        waiting = server.submit("bob", SIGMOID, mode="test", device="mlu370-x4")
        assert waiting.status_code == 201, waiting.text
        server.leave(standby)
        with sync_playwright() as pw:
            browser = launch_chromium(pw)
            try:
                errors: list[str] = []
                ann = login(browser, server, "ann", "zh", errors)
                ann.set_viewport_size({"width": 1280, "height": 900})
                assert ann.locator("#assignments").count() == 1
                assert "(UTC+08:00)" in ann.locator("body").inner_text() or "UTC+08:00" in ann.content()
                row = ann.locator("#submissions tr.counts")
                assert row.count() == 1 and CJK.search(row.inner_text()), ann.content()[:3000]
                ann.screenshot(path=str(shots / "02-student-page-zh.png"), full_page=True)
                ann.click("#submissions tr.counts a.report, #submissions tr.counts a[href*='report']")
                ann.wait_for_load_state()
                assert CJK.search(ann.locator("body").inner_text()[:2000])
                # the report says the hidden points are pending, not full marks (60 of 60 read as a perfect score)
                assert "待截止后公布" in ann.locator("#pending").inner_text(), ann.content()[:2000]
                assert ann.locator("#date").inner_text().endswith("(UTC+08:00)")  # graded at, in the course's time
                ann.screenshot(path=str(shots / "03-report-zh.png"), full_page=False)
                ann.go_back()
                ann.click("#opt")  # she joins the leaderboard under a pseudonym
                ann.wait_for_load_state()
                ann.goto(f"{server.url}/leaderboard/sigmoid?lang=zh")
                mine = ann.locator("tr.mine")
                assert mine.count() >= 1, ann.content()[:3000]
                ann.screenshot(path=str(shots / "04-leaderboard-zh.png"), full_page=True)

                bob = login(browser, server, "bob", "zh", errors)
                bob.set_viewport_size({"width": 1280, "height": 900})
                queued = bob.locator(f"#sub-{waiting.json()['id']}")
                assert queued.count() == 1 and CJK.search(queued.inner_text())
                bob.screenshot(path=str(shots / "05-queued-no-worker-zh.png"), full_page=True)
                queued.locator("button").filter(has_text=re.compile("取消")).first.click()
                bob.wait_for_load_state()
                bob.wait_for_timeout(1000)
                assert "已取消" in bob.locator(f"#sub-{waiting.json()['id']}").inner_text(), bob.content()[:3000]
                bob.screenshot(path=str(shots / "06-cancelled-zh.png"), full_page=True)

                teacher = login(browser, server, "teacher", "zh", errors)
                teacher.set_viewport_size({"width": 1400, "height": 1000})
                assert teacher.locator("#submissions tr[id^='sub-']").count() >= 2
                teacher.screenshot(path=str(shots / "07-dashboard-zh.png"), full_page=True)
                teacher.click("#submissions a.student >> nth=0")
                teacher.wait_for_load_state()
                teacher.screenshot(path=str(shots / "08-student-view-zh.png"), full_page=True)
                assert errors == [], errors
            finally:
                browser.close()
        print(f"tour screenshots: {shots}")
    finally:
        server.stop()
