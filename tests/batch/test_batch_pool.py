"""The worker pool with real worker processes: faults stay with one submission, twins wait for each other,
slots pass their device."""

from __future__ import annotations

import json
import os
import time

import pytest
from conftest import HERE

from grader.batch.jobs import GradeJob
from grader.batch.pool import FRESH_WORKERS_ENV, Slot, WorkerPool
from grader.batch.store import ResultStore
from grader.results import Verdict


@pytest.fixture
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(HERE), str(HERE.parent), os.environ.get("PYTHONPATH", "")]))
    log = tmp_path / "graded.jsonl"
    log.touch()
    monkeypatch.setenv("BATCH_TEST_LOG", str(log))
    store = ResultStore(tmp_path / "batch")
    store.load_or_create_manifest("matmul", "emu", "public-seed")
    return store, log


def job_for(store: ResultStore, tmp_path, name: str, entry: str = "entries:quick", score: float = 10,
            delay: float = 0.0, content: str | None = None) -> GradeJob:
    sub = tmp_path / "subs" / name
    sub.mkdir(parents=True, exist_ok=True)
    (sub / "score.txt").write_text(f"{score} {delay}")
    return GradeJob(key=f"key-{name}", student_id=name, student_name=name.title(), submission=str(sub),
                    assignment="matmul", backend="emu", device=None, sandbox="docker", seed_mode="public",
                    batch_dir=str(store.root), seed="public-seed", content_hash=content or name, entry=entry)


def test_a_crashing_hanging_or_raising_grader_costs_one_submission(env, tmp_path):
    store, _ = env
    jobs = [job_for(store, tmp_path, "ok1"), job_for(store, tmp_path, "segv", "entries:crash"),
            job_for(store, tmp_path, "ok2", score=4), job_for(store, tmp_path, "hang", "entries:hang"),
            job_for(store, tmp_path, "bug", "entries:explode"), job_for(store, tmp_path, "ok3")]
    finished = []
    pool = WorkerPool(store, [Slot(0, None), Slot(1, None)], job_timeout=5.0)
    started = time.monotonic()
    pool.run(jobs, on_finish=lambda job, result, seconds: finished.append(job.student_id))
    assert time.monotonic() - started < 60
    assert sorted(finished) == sorted(j.student_id for j in jobs)
    verdicts = {j.student_id: store.load(j.key).verdict for j in jobs}
    assert verdicts == {"ok1": Verdict.PASSED, "ok2": Verdict.WRONG_ANSWER, "ok3": Verdict.PASSED,
                        "segv": Verdict.INTERNAL_ERROR, "hang": Verdict.INTERNAL_ERROR, "bug": Verdict.INTERNAL_ERROR}
    assert "SIGSEGV" in store.load("key-segv").message
    assert "longer than 5 s" in store.load("key-hang").message
    assert "grader bug for the test" in store.load("key-bug").message
    # The batch's identity wins over whatever the grading run said.
    ok1 = store.load("key-ok1")
    assert (ok1.student.id, ok1.student.name) == ("ok1", "Ok1")
    assert (store.run_dir("key-ok1") / "report.html").read_text() == "<p>10.0</p>"
    assert not list(store.runs_dir.glob("*.partial-*"))
    failed = [e for e in store.journal() if e["event"] == "worker_failed"]
    assert sorted(e["student"] for e in failed) == ["hang", "segv"]  # `bug` was caught inside the worker


def test_twins_wait_for_each_other_and_slots_pass_their_device(env, tmp_path):
    store, log = env
    jobs = [job_for(store, tmp_path, f"twin{i}", delay=0.8, content="same") for i in range(3)]
    jobs.append(job_for(store, tmp_path, "other", delay=0.8))
    WorkerPool(store, [Slot(0, "mlu370-x4"), Slot(1, "mlu370-x4")]).run(jobs)
    runs = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(runs) == 4 and {r["device"] for r in runs} == {"mlu370-x4"}
    twins = sorted((r for r in runs if r["submission"].startswith("twin")), key=lambda r: r["start"])
    for a, b in zip(twins, twins[1:], strict=False):
        assert b["start"] >= a["end"] - 0.05, "identical submissions graded at the same time"
    other = next(r for r in runs if r["submission"] == "other")
    assert other["start"] < twins[0]["end"], "the free slot should not idle while twins wait"


def test_a_slot_keeps_its_worker_until_a_job_kills_it(env, tmp_path):
    store, log = env
    jobs = [job_for(store, tmp_path, "a"), job_for(store, tmp_path, "b"), job_for(store, tmp_path, "segv", "entries:crash"),
            job_for(store, tmp_path, "c"), job_for(store, tmp_path, "d")]
    WorkerPool(store, [Slot(0, None)], job_timeout=20.0).run(jobs)
    pids = {r["submission"]: r["pid"] for r in map(json.loads, log.read_text().splitlines())}
    assert pids["a"] == pids["b"], "one worker serves the slot's jobs in turn"
    assert pids["c"] == pids["d"] != pids["a"], "a fresh worker after the one that crashed"
    assert store.load("key-segv").verdict == Verdict.INTERNAL_ERROR and store.load("key-d").verdict == Verdict.PASSED


def test_what_a_worker_starts_cannot_reach_the_job_channel(env, tmp_path):
    """A child reading stdin and writing `done` to stdout/stderr: the next job is not its input (it gets end of
    file at once), its `done` is no answer (the job is still graded) and its output lands in the job's log."""
    store, log = env
    jobs = [job_for(store, tmp_path, "nosy", "entries:nosy"), job_for(store, tmp_path, "after", score=4, delay=0.5)]
    WorkerPool(store, [Slot(0, None)], job_timeout=20.0).run(jobs)
    assert store.load("key-nosy").verdict == Verdict.PASSED
    assert store.load("key-after").verdict == Verdict.WRONG_ANSWER, "the second job was not read by the first's child"
    assert (store.root / "logs" / "key-nosy.log").read_text().count("done") == 2
    assert [r["submission"] for r in map(json.loads, log.read_text().splitlines())] == ["nosy", "after"]


def test_the_benchmarks_switch_gives_each_job_a_fresh_worker(env, tmp_path, monkeypatch):
    store, log = env
    monkeypatch.setenv(FRESH_WORKERS_ENV, "1")
    WorkerPool(store, [Slot(0, None)]).run([job_for(store, tmp_path, "a"), job_for(store, tmp_path, "b")])
    pids = [r["pid"] for r in map(json.loads, log.read_text().splitlines())]
    assert len(pids) == 2 and pids[0] != pids[1]
