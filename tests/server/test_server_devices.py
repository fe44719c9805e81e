"""Routing by device type (issue 31): one server, emulator worker slots of two device types (MLU370-X8 and
MLU370-X4, keys of the device table), each consuming its type's queue. A submission asking for a type is graded
by a worker of that type, on that type's profile (the phase record's worker and device, and the result's
device); one asking for a type no live worker serves is refused (naming the types served); one whose worker
went away waits, shown as such to the student and on the dashboard, until a worker of that type joins. Real parts: `grade serve`, redis-server, Celery worker nodes grading in the
Docker sandbox."""

from __future__ import annotations

import os
import re
import signal
import time

import pytest
from cluster import REPO, start_server

from tests.sandbox_ready import emu_image_ready

pytestmark = [pytest.mark.slow, pytest.mark.docker]
SIGMOID = REPO / "reference_kernels" / "sigmoid" / "vector"


def graded(server, sub_id: int) -> dict:  # noqa: ANN001
    """The instructor's view of a graded submission, its result document under "result"."""
    state = server.graded("teacher", sub_id)
    with server.client("teacher") as t:
        return {**state, "result": t.get(f"/api/submissions/{sub_id}/result").json()}


def queues(server) -> dict[str, dict]:  # noqa: ANN001
    with server.client("teacher") as t:
        return {q["device_type"]: q for q in t.get("/api/dashboard").json()["queues"]}


def test_jobs_go_to_a_worker_of_the_device_type_they_ask_for(redis_url: str, tmp_path) -> None:  # noqa: ANN001
    if not emu_image_ready():
        pytest.skip("needs a running Docker daemon and the emulation image (grade setup)")
    server = start_server(tmp_path / "server", redis_url, ["ann", "bob", "cid"])
    try:
        server.add_worker("x8", "mlu370-x8")
        server.add_worker("x4", "MLU370-X4")  # spelled as the card's name: the table's key is mlu370-x4
        deadline = time.monotonic() + 120
        while not {"mlu370-x8", "mlu370-x4"} <= {t for t, q in queues(server).items() if q["workers"]}:
            assert time.monotonic() < deadline, queues(server)  # each slot's heartbeat lists it
            time.sleep(0.5)
        # mlu270: nobody serves it; an upload for it is refused, naming the types served now
        r = server.submit("cid", SIGMOID, device="mlu270")
        assert r.status_code == 409 and "served now: mlu370-x4, mlu370-x8" in r.json()["error"], r.text
        m270 = server.stand_by("mlu270")  # a live mlu270 worker: taken; then it goes away, the job still queued
        ids = {}
        for who, kind in (("ann", "mlu370-x4"), ("bob", "mlu370-x8"), ("cid", "mlu270")):
            r = server.submit(who, SIGMOID, device=kind)
            assert r.status_code == 201, r.text
            ids[who] = r.json()["id"]
        server.leave(m270)
        for who, kind in (("ann", "mlu370-x4"), ("bob", "mlu370-x8")):
            state = graded(server, ids[who])
            assert state["verdict"] == "passed", state
            # the phase record: the worker of that type graded it, on that type's profile
            assert state["worker"].startswith("x4@" if kind == "mlu370-x4" else "x8@"), state["worker"]
            assert (state["device_type"], state["graded_type"], state["graded_device"]) == (kind, kind, kind), state
            assert state["result"]["device_profile"] == kind, state["result"]["device_profile"]
        # mlu270: nobody serves it now; the job waits, and says so, to its student and to the instructor
        with server.client("cid") as c:
            state = c.get(f"/api/submissions/{ids['cid']}").json()
        assert (state["status"], state["waiting_for"]) == ("queued", "mlu270"), state
        waiting = queues(server)
        assert waiting["mlu270"]["unserved"] and waiting["mlu270"]["queued"] == 1, waiting
        assert not waiting["mlu370-x4"]["unserved"] and not waiting["mlu370-x8"]["unserved"], waiting
        with server.page_session("teacher", "zh") as page:
            html = page.get("/instructor").text
        row = re.search(r'<tr id="queue-emu-mlu270" class="unserved">(.*?)</tr>', html, re.S)
        assert row is not None and "mlu270" in row.group(1), html
        # a worker of that type joins: the waiting job is graded by it
        server.add_worker("m270", "mlu270")
        state = graded(server, ids["cid"])
        assert state["worker"].startswith("m270@") and state["result"]["device_profile"] == "mlu270", state
        assert state["verdict"] == "passed", state
        assert not queues(server)["mlu270"]["unserved"]
        # the x4 node killed outright (no goodbye): its heartbeat stops, and once stale the type shows unserved
        x4 = server.workers[1]
        os.killpg(x4.pid, signal.SIGKILL)
        x4.wait()
        killed = time.monotonic()
        while queues(server).get("mlu370-x4", {}).get("workers"):  # (no jobs, no worker: not listed)
            assert time.monotonic() - killed < 90, queues(server)
            time.sleep(1)
        stale = time.monotonic() - killed
        r = server.submit("ann", SIGMOID, device="mlu370-x4")  # refused now: no live x4 worker
        assert r.status_code == 409 and "served now: mlu270, mlu370-x8" in r.json()["error"], r.text
        print(f"x4 killed: shown without a live worker after {stale:.1f} s")
    finally:
        server.stop()
