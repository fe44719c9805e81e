"""Opening an assignment is a background job (issue 40 item 6): the dashboard's Open button returns at once, the
reference-seed guard grades the reference kernels in the background with its progress on the dashboard, and the
assignment opens when they pass. Real parts: the app in process (SQLite), the references graded in the Docker
sandbox (a reference root with sigmoid's `vector` stage only: one grading)."""

from __future__ import annotations

import re
import shutil
import time
from pathlib import Path

import pytest
from cluster import REPO
from course import course

from grader.i18n import use_language
from grader.server.admin import set_open
from tests.sandbox_ready import emu_image_ready

pytestmark = [pytest.mark.slow, pytest.mark.docker]


def test_the_open_button_returns_at_once_and_the_check_runs_as_a_job(tmp_path: Path) -> None:
    if not emu_image_ready():
        pytest.skip("needs a running Docker daemon and the emulation image (grade setup)")
    root = tmp_path / "references"
    shutil.copytree(REPO / "reference_kernels" / "sigmoid" / "vector", root / "sigmoid" / "vector")
    with use_language("en"), course("sqlite", tmp_path, [], reference_root=root) as c:
        set_open(c.db, "sigmoid", False)
        with c.page("teacher") as page:
            started = time.monotonic()
            r = page.post("/instructor/assignments/sigmoid/open", data={"csrf": page.csrf})
            pressed = time.monotonic() - started
            assert r.status_code == 303 and pressed < 2.0, (r.status_code, pressed)
            html = page.get("/instructor").text
            assert re.search(r'<tr id="job-\d+" class="job (waiting|running)">', html), html
            assert 'class="opening"' in html and 'class="open"' not in html  # no second Open meanwhile
            assert page.post("/instructor/assignments/sigmoid/open", data={"csrf": page.csrf}).status_code == 409
            (job,) = [j for j in c.api("teacher").get("/api/assignments").json() if j["name"] == "sigmoid"]
            assert not job["open"]
            seen = set()
            while True:
                html = page.get("/instructor").text
                state = re.search(r'<tr id="job-(\d+)" class="job (\w+)">', html)
                seen.add(state.group(2))
                if state.group(2) not in ("waiting", "running"):
                    break
                assert time.monotonic() - started < 600, html
                time.sleep(1)
            took = time.monotonic() - started
            job = c.api("teacher").get(f"/api/jobs/{state.group(1)}").json()
            assert (job["state"], job["done"], job["total"]) == ("done", 1, 1), job
            assert "running" in seen, seen
            row = re.search(r'<tr id="assignment-sigmoid">(.*?)</tr>', html, re.S).group(1)
            assert "<td>yes</td>" in row and 'class="close"' in row, row
        print(f"\nOpen pressed: answered in {pressed * 1000:.0f} ms; the reference check ran {took:.1f} s as a job")
