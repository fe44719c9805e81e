"""Intake that cannot be used to stall the server (issue 40): the real app under uvicorn on loopback (a thread of
this process), SQLite, a live worker row for the default device type (workers.worker_seen, as a slot's heartbeat
writes it). A gzip bomb (4 MB that inflate to about 4 GB) is inspected off the event loop: GET /login stays fast
while it is, timed here. An upload past the cap is refused from its Content-Length (the true size said) or where
streaming stops (without one), never read whole; refused uploads count against the rate, and a 429 says when to
come back (Retry-After)."""

from __future__ import annotations

import gzip
import statistics
import tarfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import uvicorn

from grader.i18n import use_language
from grader.server.accounts import add_account
from grader.server.admin import ensure_assignment, set_open, set_policy
from grader.server.app import create_app
from grader.server.db import Database, migrate, sqlite_url
from grader.server.devices import device_type, queue_name
from grader.server.policy import REFUSED_PER_HOUR
from grader.server.run import free_port, wait_for_port
from grader.server.uploads import MAX_UPLOAD_BYTES
from grader.server.workers import worker_seen

MB = 1 << 20


def gzip_bomb(inflated_mb: int) -> bytes:
    """A .tar.gz whose one member declares `inflated_mb` MB of zeros: gzip members of 1 MB of zeros each (about
    1 KB apiece), so reading past the member inflates all of it."""
    header = tarfile.TarInfo("my_ops/zeros.bin")
    header.size = inflated_mb * MB
    zero = gzip.compress(bytes(MB), compresslevel=9, mtime=0)
    return gzip.compress(header.tobuf(format=tarfile.GNU_FORMAT), mtime=0) + zero * inflated_mb


@pytest.fixture
def live(tmp_path: Path) -> Iterator[tuple[str, Database, str]]:
    """(URL, database, a student's token) of the app served by uvicorn on loopback."""
    url = sqlite_url(tmp_path)
    migrate(url)
    db = Database(url)
    token = add_account(db, "ann", "Ann")
    ensure_assignment(db, "sigmoid")
    set_open(db, "sigmoid", True)
    kind = device_type(None)
    worker_seen(db, "slot0@here", queue=queue_name("emu", kind), device_type=kind, device=kind)
    taken: list[int] = []
    app = create_app(db, lambda submission_id, _queue: taken.append(submission_id), "k" * 32)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_for_port(port)
    try:
        yield f"http://127.0.0.1:{port}", db, token
    finally:
        server.should_exit = True
        thread.join(10)
    assert taken == []  # nothing here was queued


def test_a_bomb_is_inspected_off_the_event_loop(live) -> None:  # noqa: ANN001
    url, db, token = live
    bomb = gzip_bomb(MAX_UPLOAD_BYTES // 1075)  # as many 1 MB gzip members as the cap holds
    assert len(bomb) <= MAX_UPLOAD_BYTES, len(bomb)
    latencies: list[float] = []
    done = threading.Event()

    def poll_login() -> None:
        with httpx.Client(base_url=url, timeout=60) as c:
            while not done.is_set():
                started = time.monotonic()
                assert c.get("/login").status_code == 200
                latencies.append(time.monotonic() - started)
                time.sleep(0.05)

    with httpx.Client(base_url=url, timeout=120, headers={"Authorization": f"Bearer {token}"}) as c:
        alone = time.monotonic()
        assert c.get("/login").status_code == 200
        alone = time.monotonic() - alone
        poller = threading.Thread(target=poll_login)
        poller.start()
        time.sleep(0.3)
        started = time.monotonic()
        r = c.post("/api/submissions", data={"assignment": "sigmoid", "mode": "test"},
                   files={"archive": ("s.tar.gz", bomb, "application/gzip")})
        inspected = time.monotonic() - started
        time.sleep(0.3)
        done.set()
        poller.join()
    assert r.status_code in (400, 413), r.text
    during = latencies[3:-3] or latencies  # the polls around the bomb's inspection
    print(f"\nbomb ({len(bomb) / MB:.1f} MB, {MAX_UPLOAD_BYTES // 1075} MB inflated) refused in {inspected:.2f} s "
          f"({r.json()['error']!r}); GET /login alone {alone * 1000:.0f} ms, meanwhile {len(latencies)} requests: "
          f"median {statistics.median(during) * 1000:.0f} ms, max {max(latencies) * 1000:.0f} ms")
    assert inspected > 1.0, "the bomb was refused too fast to tell whether the event loop was free meanwhile"
    assert len(latencies) >= 5 and max(latencies) < 0.5, latencies  # on the loop it would wait for the bomb


def test_an_oversized_upload_is_refused_before_it_is_read_whole(live) -> None:  # noqa: ANN001
    url, db, token = live
    headers = {"Authorization": f"Bearer {token}"}
    size = 200 * MB

    head = (b'--x\r\nContent-Disposition: form-data; name="archive"; filename="s.tar.gz"\r\n'
            b"Content-Type: application/gzip\r\n\r\n")

    def body() -> Iterator[bytes]:  # a 200 MB archive in a well-formed form, never held in memory here either
        yield head
        chunk = bytes(MB)
        for _ in range(size // MB):
            yield chunk

    with use_language("en"), httpx.Client(base_url=url, timeout=120, headers=headers) as c:
        started = time.monotonic()
        r = c.post("/api/submissions", content=body(), headers={
            "Content-Type": "multipart/form-data; boundary=x", "Content-Length": str(len(head) + size)})
        declared = time.monotonic() - started
        assert r.status_code == 413, r.text
        assert r.json()["error"] == "the upload is 200.0 MB; the server accepts at most 4.0 MB", r.text
        started = time.monotonic()
        r = c.post("/api/submissions", content=body(),  # no Content-Length: chunked, stopped at the cap
                   headers={"Content-Type": "multipart/form-data; boundary=x"})
        streamed = time.monotonic() - started
        assert r.status_code == 413, r.text
        assert r.json()["error"] == "the upload is more than 4.0 MB; the server accepts at most 4.0 MB", r.text
    print(f"\n200 MB upload refused in {declared * 1000:.0f} ms by its Content-Length, "
          f"{streamed * 1000:.0f} ms streamed without one")
    assert declared < 5 and streamed < 10  # reading 200 MB through the form parser would take far longer


def test_refused_uploads_count_against_the_rate_and_429_says_when(live) -> None:  # noqa: ANN001
    url, db, token = live
    set_policy(db, "sigmoid", per_hour=3)
    headers = {"Authorization": f"Bearer {token}"}
    junk = {"archive": ("s.tar.gz", b"not an archive", "application/gzip")}
    form = {"assignment": "sigmoid", "mode": "test"}
    with use_language("en"), httpx.Client(base_url=url, timeout=30, headers=headers) as c:
        for _ in range(3):
            r = c.post("/api/submissions", data=form, files=junk)
            assert r.status_code == 400 and "not a readable" in r.json()["error"], r.text
        r = c.post("/api/submissions", data=form, files=junk)  # the assignment's rate: refused ones count
        assert r.status_code == 429 and "at most 3 uploads an hour" in r.json()["error"], r.text
        assert 3500 <= int(r.headers["Retry-After"]) <= 3600, r.headers
        # past REFUSED_PER_HOUR refused uploads (any assignment), nothing more of theirs is read for the hour
        for _ in range(REFUSED_PER_HOUR - 3):
            assert c.post("/api/submissions", data={**form, "assignment": "nope"}, files=junk).status_code == 404
        r = c.post("/api/submissions", data=form, files=junk)
        assert r.status_code == 429 and "of your uploads were refused in the last hour" in r.json()["error"], r.text
        assert 3500 <= int(r.headers["Retry-After"]) <= 3600, r.headers
