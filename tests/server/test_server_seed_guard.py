"""The reference-seed guard runs by itself when the server draws an assignment's secret seed (issue 27's batch
guard, drivers.reference_check): `grade serve -a sigmoid` grades the reference kernels on that seed before
the assignment opens, keeps it closed with the instructor's message when one fails, and checks each seed once.
Real parts: `grade serve` (uvicorn, SQLite), redis-server, the references graded in the Docker sandbox."""

from __future__ import annotations

import shutil
import time

import pytest
from cluster import REPO, start_server

from grader.server.uploads import pack_folder
from tests.sandbox_ready import emu_image_ready

pytestmark = [pytest.mark.slow, pytest.mark.docker]
VECTOR = REPO / "reference_kernels" / "sigmoid" / "vector"


def references(root, broken: bool):  # noqa: ANN001, ANN201 - tmp paths
    """A reference root with sigmoid's `vector` stage only (one grading per check); `broken`: the kernel
    copies its input instead of applying the sigmoid, so every case is a wrong answer."""
    folder = root / "sigmoid" / "vector"
    shutil.copytree(VECTOR, folder)
    if broken:
        kernel = folder / "mlu" / "sigmoid_vector.mlu"
        text = kernel.read_text()
        assert "__bang_active_sigmoid(tile, tile" in text
        kernel.write_text("\n".join(line for line in text.splitlines() if "__bang_active_sigmoid(tile" not in line))
    return root


def upload(server) -> object:  # noqa: ANN001
    with server.client("ann") as c:
        return c.post("/api/submissions", data={"assignment": "sigmoid", "mode": "test"},
                      files={"archive": ("s.tar.gz", pack_folder(VECTOR), "application/gzip")})


def test_the_seed_is_checked_before_opening_once(redis_url: str, tmp_path) -> None:  # noqa: ANN001
    if not emu_image_ready():
        pytest.skip("needs a running Docker daemon and the emulation image (grade setup)")
    data = tmp_path / "server"
    bad = references(tmp_path / "bad", broken=True)
    server = start_server(data, redis_url, ["ann"], trust_seed=False, extra=["--references", str(bad)])
    try:
        assert "stays closed: its own reference kernels fail on the secret seed" in server.startup, server.startup
        assert "sigmoid/vector:" in server.startup, server.startup  # which reference, which case
        r = upload(server)
        assert r.status_code == 403 and "your instructor has been told" in r.json()["error"], r.text
        with server.client("teacher") as t:
            (row,) = t.get("/api/assignments").json()
            assert t.get("/api/submissions").json() == []  # refused: no attempt
        assert (row["name"], row["open"], bool(row["seed_failures"])) == ("sigmoid", False, True), row
        tokens = server.tokens
    finally:
        server.stop()
    # The grader fixed (here: the good references), the same seed is checked again and opens.
    good = references(tmp_path / "good", broken=False)
    server = start_server(data, redis_url, [], trust_seed=False, extra=["--references", str(good)])
    try:
        assert "the reference kernels pass on its seed; open" in server.startup, server.startup
        server.tokens = {**tokens, **server.tokens}
        assert upload(server).status_code == 201
    finally:
        server.stop()
    # Recorded: a restart grades nothing, and the assignment is open.
    started = time.monotonic()
    server = start_server(data, redis_url, [], trust_seed=False, extra=["--references", str(bad)])
    try:
        assert "grading its reference kernels" not in server.startup, server.startup
        assert time.monotonic() - started < 60
        with server.client("teacher") as t:
            (row,) = t.get("/api/assignments").json()
        assert (row["open"], row["seed_failures"], row["seed_checked"]) == (True, None, True), row
    finally:
        server.stop()
