"""What a grading's answer need not wait for (grader/orchestration/afterwards.py): inside run_job's scope its
sandboxes end beside the results.json and report, and nothing is left when the job returns; outside a scope the
tidy is done at once, as before."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from grader.orchestration import GradeEnvironment, GradeRequest, grade_submission
from grader.orchestration.afterwards import tidy, tidy_after
from grader.orchestration.build_cache import default_build_cache
from grader.results import Verdict
from tests.sandbox_ready import emu_image_ready

ROOT = Path(__file__).resolve().parents[1]


def test_inside_a_scope_the_tidy_runs_beside_and_the_scope_waits_for_it():
    go, seen = threading.Event(), []

    def work() -> None:  # blocks until the caller has gone on: it cannot be running on the caller's thread
        seen.append(go.wait(10))
        time.sleep(0.2)
        seen.append("done")

    with tidy_after() as pending:
        tidy(work, "t")
        go.set()
        assert [t.name for t in pending] == ["t"]
    assert seen == [True, "done"]  # the scope's end waited for it


def test_outside_a_scope_the_tidy_is_done_at_once():
    seen = []
    tidy(lambda: seen.append(threading.current_thread().name))
    assert seen == [threading.current_thread().name]


def test_a_failing_tidy_is_logged_and_does_not_end_the_scope_or_the_others(caplog):
    seen = []

    def fails() -> None:
        raise RuntimeError("no daemon")

    with tidy_after():
        tidy(fails)
        tidy(lambda: seen.append(1))
    assert seen == [1] and "tidying after a grading failed" in caplog.text


def test_scopes_on_two_threads_are_their_own():
    release, order = threading.Event(), []

    def slow_job() -> None:
        with tidy_after():
            tidy(lambda: (release.wait(10), order.append("slow tidy")))
        order.append("slow job")

    other = threading.Thread(target=slow_job)
    other.start()
    with tidy_after():
        tidy(lambda: order.append("fast tidy"))
    order.append("fast job")  # never waited for the other thread's tidy
    release.set()
    other.join()
    assert order.index("fast job") < order.index("slow tidy")


def _our_containers() -> set[str]:
    from grader.sandbox.docker_runner import container_summaries, summary_name
    from grader.sandbox.docker_settings import OWNER_LABEL
    from grader.sandbox.select import docker_status

    client, _ = docker_status()
    assert client is not None
    return {summary_name(s) for s in container_summaries(client, f"{OWNER_LABEL}={os.getpid()}")}


def test_a_real_gradings_sandboxes_end_after_its_answer_and_before_the_scope_ends():
    if not emu_image_ready():
        pytest.skip("needs Docker and the sandbox image (`grade setup --tests`): the tidy ends containers")
    before = _our_containers()
    with tidy_after() as pending:
        result = grade_submission(ROOT / "reference_kernels" / "sigmoid" / "vector", GradeRequest(stages=("vector",)),
                                  GradeEnvironment(sandbox="docker", build_cache=default_build_cache()))
        assert result.verdict in (Verdict.PASSED, Verdict.TOO_SLOW) and result.cases, result.message
        assert [t.name for t in pending] == ["grading-tidy"]  # handed over, not done on the grading's way
    assert not any(t.is_alive() for t in pending)
    assert _our_containers() <= before  # the run and replay sandboxes are gone when the scope ends
