"""run_batch end to end on the orchestration side: skip/regrade decisions, exports, the distributed plan.

These use a quick grading entry (tests/batch/entries.py) in real worker processes, so they test the batch
machinery in seconds; test_batch_real.py runs the real grade_submission on real kernels.
"""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
import zipfile

import pytest
from conftest import HERE
from entries import EXPLODE, QUICK

from grader.drivers.batch import BatchError, run_batch

ASSIGNMENT = "matmul"
ASSIGNMENT_TITLE = "MatMul on the MLU: from scalar loops to a pipelined multi-core __bang_matmul"


@pytest.fixture
def quick_env(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(HERE), str(HERE.parent), os.environ.get("PYTHONPATH", "")]))
    log = tmp_path / "graded.jsonl"
    log.touch()
    monkeypatch.setenv("BATCH_TEST_LOG", str(log))
    return log


def make_class(root, scores: dict[str, float]):
    for sid, score in scores.items():
        (root / sid).mkdir(parents=True)
        (root / sid / "score.txt").write_text(f"{score} 0")
    return root


def started_students(out):
    return sorted(json.loads(line)["student"] for line in (out / "journal.jsonl").read_text().splitlines()
                  if json.loads(line)["event"] == "started")


def test_rerun_skips_changed_regrades_force_regrades_all(tmp_path, quick_env):
    subs = make_class(tmp_path / "class", {"ann": 10, "ben": 4, "cat": 7})
    with zipfile.ZipFile(subs / "dan.zip", "w") as zf:
        zf.writestr("../../escape.txt", "x")  # a hostile archive: becomes dan's result, not a crash
    out = tmp_path / "out"
    first = run_batch(subs, ASSIGNMENT, out, workers=2, progress=False, grading=QUICK)
    assert (first.total, first.graded, first.skipped) == (4, 3, 0)
    assert first.verdicts == {"passed": 1, "wrong_answer": 2}  # dan.zip is listed apart: not graded
    book = {r["student_id"]: r for r in csv.DictReader(open(out / "gradebook.csv"))}
    assert book["ben"]["total"] == "4" and book["dan"]["verdict"] == "not_graded" and book["dan"]["total"] == ""
    assert "traversal" in book["dan"]["message"] and "traversal" in first.not_graded["dan.zip"]
    assert not first.complete  # an entry not graded: the command's exit status is not 0
    canvas = {r["SIS User ID"]: r for r in csv.DictReader(open(out / "canvas.csv"))}
    assert canvas["dan"][ASSIGNMENT_TITLE] == "" and canvas["ben"][ASSIGNMENT_TITLE] == "4"
    assert not (out / "gradescope" / "dan").joinpath("results.json").exists()
    assert any("dan.zip" in line for line in first.lines())
    assert json.loads((out / "gradescope" / "cat" / "results.json").read_text())["score"] == 7
    assert (out / "reports" / "ann.html").read_text() == "<p>10.0</p>"  # the report grading wrote
    assert (out / "dashboard.html").is_file() and json.loads((out / "summary.json").read_text())["graded"] == 3
    dashboard = (out / "dashboard.html").read_text()
    assert "dan.zip" in dashboard and "<b>7.0 / " in dashboard  # listed apart; the mean is of the three graded

    ann_report = (out / "reports" / "ann.html").stat().st_mtime_ns
    again = run_batch(subs, ASSIGNMENT, out, workers=2, progress=False, grading=QUICK)
    assert (again.graded, again.skipped) == (0, 4)
    assert (out / "reports" / "ann.html").stat().st_mtime_ns == ann_report  # not redrawn
    assert len(quick_env.read_text().splitlines()) == 3  # nothing graded twice

    (subs / "ben" / "score.txt").write_text("9 0")  # ben resubmits
    changed = run_batch(subs, ASSIGNMENT, out, workers=2, progress=False, grading=QUICK)
    assert (changed.graded, changed.skipped) == (1, 3)
    assert started_students(out) == ["ann", "ben", "ben", "cat"]
    book = {r["student_id"]: r for r in csv.DictReader(open(out / "gradebook.csv"))}
    assert book["ben"]["total"] == "9"
    assert (out / "reports" / "ben.html").read_text() == "<p>9.0</p>"  # redrawn from the new result

    forced = run_batch(subs, ASSIGNMENT, out, workers=2, progress=False, force=True, grading=QUICK)
    assert forced.graded == 3 and forced.per_minute > 0


def test_secret_seed_is_kept_for_the_resume_and_never_written_into_results(tmp_path, quick_env):
    subs = make_class(tmp_path / "class", {"ann": 10})
    out = tmp_path / "out"
    run_batch(subs, ASSIGNMENT, out, workers=1, progress=False, grading=QUICK)
    manifest = json.loads((out / "batch.json").read_text())
    assert manifest["seed_mode"] == "secret"
    for path in list((out / "results").glob("*.json")) + list((out / "gradescope").rglob("*.json")):
        assert manifest["seed"] not in path.read_text()


def test_batch_refuses_to_run_unsandboxed(tmp_path):
    with pytest.raises(BatchError, match="docker sandbox"):
        run_batch(tmp_path, ASSIGNMENT, tmp_path / "out", sandbox="none", progress=False)


def test_unknown_assignment_and_empty_class_are_clear_errors(tmp_path):
    with pytest.raises(BatchError, match="no assignment"):
        run_batch(tmp_path, "no-such-assignment", tmp_path / "out", progress=False)
    (tmp_path / "empty").mkdir()
    with pytest.raises(BatchError, match="no student folders"):
        run_batch(tmp_path / "empty", ASSIGNMENT, tmp_path / "out", progress=False)


def test_plan_only_then_indexed_workers_then_collect(tmp_path, quick_env):
    """The Kubernetes path without Kubernetes: each 'pod' is a worker process given its completion index."""
    subs = make_class(tmp_path / "class", {"ann": 10, "ben": 3, "cat": 10})
    out = tmp_path / "out"
    planned = run_batch(subs, ASSIGNMENT, out, workers=2, progress=False, plan_only=True, image="reg/grader:1",
                        grading=QUICK)
    assert planned.graded == 0 and planned.planned == 3
    # No grade exists yet, so no export of one: nothing an LMS could import as a class of zeros.
    for export in ("gradebook.csv", "canvas.csv", "gradescope", "dashboard.html", "summary.json", "reports"):
        assert not (out / export).exists(), export
    assert "nothing was graded or exported here" in planned.lines()[0] and "mean" not in " ".join(planned.lines())
    plan_lines = (out / "plan.jsonl").read_text().splitlines()
    assert len(plan_lines) == 3 and all(json.loads(line)["seed"] is None for line in plan_lines)
    manifests = json.loads((out / "k8s-job.json").read_text())
    assert manifests["kind"] == "List"
    (k8s,) = [item for item in manifests["items"] if item["kind"] == "Job"]
    assert k8s["spec"]["completionMode"] == "Indexed" and k8s["spec"]["completions"] == 3
    container = k8s["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "reg/grader:1" and "--plan" in container["command"]
    for line in plan_lines:  # submissions were copied into the batch directory: one volume is enough
        assert json.loads(line)["submission"].startswith(str(out.resolve()))
    for index in range(3):
        subprocess.run([sys.executable, "-m", "grader.batch.worker", "--plan", str(out / "plan.jsonl")],
                       env={**os.environ, "JOB_COMPLETION_INDEX": str(index)}, check=True, timeout=120)
    # A retried pod whose first attempt committed does nothing.
    subprocess.run([sys.executable, "-m", "grader.batch.worker", "--plan", str(out / "plan.jsonl"), "--index", "0"],
                   check=True, timeout=120)
    assert len(quick_env.read_text().splitlines()) == 3
    collected = run_batch(subs, ASSIGNMENT, out, workers=2, progress=False, grading=QUICK)
    assert (collected.graded, collected.skipped) == (0, 3)
    assert collected.verdicts == {"passed": 2, "wrong_answer": 1}


def test_a_grader_failing_on_everything_stops_the_batch_early(tmp_path, quick_env):
    subs = make_class(tmp_path / "class", {f"s{i}": 10 for i in range(5)})
    out = tmp_path / "out"
    with pytest.raises(BatchError, match="first 4 submissions all failed inside the grader"):
        run_batch(subs, ASSIGNMENT, out, workers=1, progress=False, grading=EXPLODE)
    assert started_students(out) == ["s0", "s1", "s2", "s3"]
    # Once the grader is fixed, the rerun regrades the internal errors and grades the rest.
    fixed = run_batch(subs, ASSIGNMENT, out, workers=1, progress=False, grading=QUICK)
    assert (fixed.graded, fixed.skipped, fixed.verdicts) == (5, 0, {"passed": 5})


def test_sigkill_midway_then_resume_with_quick_grading(tmp_path, quick_env):
    """The kill-and-resume invariants on every CI run, docker or not (test_batch_real.py repeats them with
    the real grader): results committed before the kill are neither lost nor regraded."""
    subs = make_class(tmp_path / "class", {})
    for i in range(6):
        (subs / f"s{i}").mkdir(parents=True)
        (subs / f"s{i}" / "score.txt").write_text("10 0.6")
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "grader.cli", "batch", str(subs), "--assignment", ASSIGNMENT, "--out", str(out),
           "--workers", "1", "--no-progress", "--grading", "entries:QUICK"]
    batch = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while len(list((out / "results").glob("*.json"))) < 2:
        assert batch.poll() is None and time.monotonic() < deadline
        time.sleep(0.02)
    batch.kill()
    batch.wait()
    before = {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in (out / "results").glob("*.json")}
    assert 2 <= len(before) < 6
    resumed = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=True)
    assert f"graded {6 - len(before)} now, {len(before)} already done" in resumed.stdout
    after = {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in (out / "results").glob("*.json")}
    assert len(after) == 6 and {k: after[k] for k in before} == before
    graded = [json.loads(line)["submission"] for line in quick_env.read_text().splitlines()]
    assert sorted(set(graded)) == [f"s{i}" for i in range(6)]
    assert len(graded) <= 7  # at most the one in flight at the kill was graded twice


def test_the_batch_language_reaches_workers_results_and_summary(tmp_path, quick_env):
    """--lang zh: the worker grades in Chinese (here its own failure message), the summary is Chinese, and a
    rerun in English regrades instead of keeping the Chinese texts."""
    subs = make_class(tmp_path / "class", {"ann": 10, "ben": 4})
    out = tmp_path / "out"
    zh = run_batch(subs, ASSIGNMENT, out, workers=1, progress=False, grading=EXPLODE, lang="zh")
    stored = [json.loads(p.read_text()) for p in (out / "results").glob("*.json")]
    assert [r["lang"] for r in stored] == ["zh", "zh"], stored
    assert all(r["message"].startswith("评分程序自身出错") for r in stored)
    lines = "\n".join(zh.lines())
    assert "共 2 名学生" in lines and "评测系统内部错误 2" in lines, lines
    en = run_batch(subs, ASSIGNMENT, out, workers=1, progress=False, grading=EXPLODE, lang="en")
    assert (en.graded, en.skipped) == (2, 0)
    assert "2 students; graded 2 now" in "\n".join(en.lines())


def test_ctrl_c_says_what_is_committed_and_how_to_resume(tmp_path, quick_env):
    subs = tmp_path / "class"
    for sid, delay in (("ann", 0), ("ben", 600), ("cat", 600)):
        (subs / sid).mkdir(parents=True)
        (subs / sid / "score.txt").write_text(f"10 {delay}")
    out = tmp_path / "out"
    argv = [sys.executable, "-m", "grader.cli", "batch", str(subs), "-a", ASSIGNMENT, "-o", str(out), "--workers",
            "1", "--no-progress", "--grading", "entries:QUICK"]
    # The batch starts with SIGINT as a terminal leaves it (default, unblocked), whatever an earlier test did to
    # this worker process: a full suite once handed it on ignored or blocked (both survive exec), and the batch
    # sat in its join loop for 60 s with no KeyboardInterrupt (its stacks, dumped on SIGABRT, showed it).
    inherited = (signal.getsignal(signal.SIGINT), signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, []))

    def as_from_a_terminal() -> None:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})

    batch = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONFAULTHANDLER": "1"}, preexec_fn=as_from_a_terminal)
    deadline = time.monotonic() + 120
    while len(started_students(out) if (out / "journal.jsonl").exists() else []) < 2:
        assert batch.poll() is None and time.monotonic() < deadline, batch.communicate()
        time.sleep(0.1)
    batch.send_signal(signal.SIGINT)
    try:
        stdout, stderr = batch.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        batch.send_signal(signal.SIGABRT)
        pytest.fail(f"grade batch did not exit within 60 s of SIGINT (this process's SIGINT handler, blocked: "
                    f"{inherited}); its threads then:\n" + batch.communicate(timeout=30)[1][-8000:])
    assert batch.returncode == 130, stdout + stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert "interrupted: 1 of 3 results committed (1 graded in this run)" in lines[0]
    assert "run the same command again to grade the other 2" in lines[0] and f"grade batch {subs}" in lines[0]
