"""A representative subset of the adversarial corpus and the known-bad fixtures submitted through the server
(`grade serve`, redis-server, two Celery workers grading in the Docker sandbox) gets the verdicts local grading
gives (each fixture's expected.toml). benchmarks/server_verdicts.py runs every fixture the same way and reports
the agreement."""

from __future__ import annotations

import threading

import pytest
from cluster import start_server
from corpus import fixtures, through_server

from tests.sandbox_ready import emu_image_ready

pytestmark = [pytest.mark.slow, pytest.mark.docker]
# One of each kind of verdict, all quick: a wrong answer, a build error, a forged trace, a kernel never launched,
# a tail dropped on matmul... (the slow ones, timeouts and hangs, are in the benchmark's full run)
SUBSET = ["known_bad/wrong_task_offset", "adversarial/error_directive", "adversarial/forged_trace",
          "known_bad/kernel_never_launches", "adversarial/read_proc", "known_bad/output_partly_unwritten"]


def test_a_corpus_subset_gets_the_local_verdicts(redis_url: str, tmp_path) -> None:  # noqa: ANN001
    if not emu_image_ready():
        pytest.skip("needs a running Docker daemon and the emulation image (grade setup)")
    chosen = [f for f in fixtures() if f.name in SUBSET]
    assert sorted(f.name for f in chosen) == sorted(SUBSET)
    students = [f"s{i}" for i in range(len(chosen))]
    server = start_server(tmp_path / "server", redis_url, students, extra=["-a", "matmul"])
    try:
        for name in ("w1", "w2"):
            server.add_worker(name)
        verdicts: dict[str, str] = {}

        def one(who: str, fixture) -> None:  # noqa: ANN001
            verdicts[fixture.name] = through_server(server, who, fixture, timeout=900)[0]

        threads = [threading.Thread(target=one, args=pair) for pair in zip(students, chosen, strict=True)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wrong = {f.name: (verdicts[f.name], sorted(f.allowed())) for f in chosen if verdicts[f.name] not in f.allowed()}
        assert not wrong, wrong
    finally:
        server.stop()
