"""The batch with the real grader on real kernels: a class of references, a duplicate and known-bad fixtures
is graded by `grade batch` (python -m grader.cli batch), SIGKILLed midway, and resumed with nothing lost or regraded."""

from __future__ import annotations

import csv
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
import zipfile
from pathlib import Path

import pytest
from conftest import REPO

from grader.results import GradeResult, Verdict

pytestmark = [pytest.mark.slow, pytest.mark.docker]

KERNELS = REPO / "reference_kernels"
# Graded in this order (one worker). The two cheap ones come first, so the kill lands while the one real
# build runs; that build then serves two more students (a twin folder and a zipped renamed copy). The
# known-bad fixtures are graded one by one in benchmarks/batch_throughput.py.
CLASS = {
    "s1-empty": None,  # a folder with no submission in it: ungradable layout, nothing built
    "s2-broken": "known_bad/compile_error",
    "s3-ref": "sigmoid/vector",
    "s4-twin": "sigmoid/vector",  # same files, other folder
    "s5-zip": "sigmoid/vector",  # zipped, inside a wrapper folder
}


def make_class(class_dir: Path) -> None:
    for student, fixture in CLASS.items():
        if fixture is None:
            (class_dir / student).mkdir(parents=True)
            (class_dir / student / "README.txt").write_text("forgot to upload")
        elif student == "s5-zip":
            with zipfile.ZipFile(class_dir / "s5-zip.zip", "w") as zf:
                for path in sorted((KERNELS / fixture).rglob("*")):
                    if path.is_file():
                        zf.write(path, Path("my_ops") / path.relative_to(KERNELS / fixture))
        else:
            shutil.copytree(KERNELS / fixture, class_dir / student, ignore=shutil.ignore_patterns("expected.toml"))


@pytest.fixture(scope="module")
def sandbox_image():
    try:
        from grader.sandbox.images import docker_client, ensure_emu_image

        docker_client(timeout=10).ping()
    except Exception as exc:  # noqa: BLE001 - any failure to reach the daemon means: no docker here
        pytest.skip(f"needs a running Docker daemon: {exc}")
    return ensure_emu_image()


def batch_cmd(class_dir: Path, out: Path, cache: Path) -> list[str]:
    return [sys.executable, "-m", "grader.cli", "batch", str(class_dir), "--assignment", "sigmoid", "--out", str(out),
            "--workers", "1", "--build-cache", str(cache), "--no-progress"]


def snapshot(results: Path) -> dict[str, tuple[int, int, str]]:
    """key -> (inode, mtime_ns, sha256) of every committed result: any regrade changes at least one."""
    return {p.stem: (p.stat().st_ino, p.stat().st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest())
            for p in results.glob("*.json")}


def events(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "journal.jsonl").read_text().splitlines() if line.strip()]


def live_workers_of(pid: int) -> list[int]:
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                argv = (proc / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"grader.batch.worker" in argv and str(pid).encode() in argv:
                found.append(int(proc.name))
    return found


def test_kill_midway_then_resume_loses_and_regrades_nothing(tmp_path, sandbox_image, monkeypatch):
    from grader.sandbox.docker_settings import TAG_ENV

    tag = uuid.uuid4().hex  # this test's containers (its batches' workers inherit it)
    monkeypatch.setenv(TAG_ENV, tag)
    class_dir = tmp_path / "class"
    make_class(class_dir)
    out, cache = tmp_path / "batch", tmp_path / "build-cache"

    log = open(tmp_path / "first-run.log", "wb")  # a file, not a pipe nobody reads while we wait
    batch = subprocess.Popen(batch_cmd(class_dir, out, cache), stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 1200
    while len(list((out / "results").glob("*.json"))) < 2:
        assert batch.poll() is None, f"batch ended before it could be killed:\n{(tmp_path / 'first-run.log').read_text()}"
        assert time.monotonic() < deadline, "no two results within 20 minutes"
        time.sleep(0.05)
    batch.send_signal(signal.SIGKILL)
    batch.wait()
    log.close()
    before = snapshot(out / "results")
    assert 2 <= len(before) < len(CLASS), "the kill should land midway"
    time.sleep(1.0)
    assert live_workers_of(batch.pid) == [], "workers must die with the batch"
    first_run = events(out)
    in_flight = {e["key"] for e in first_run if e["event"] == "started"} - set(before)

    resumed = subprocess.run(batch_cmd(class_dir, out, cache), capture_output=True, text=True, timeout=1800)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    after = snapshot(out / "results")
    assert len(after) == len(CLASS)
    assert {k: after[k] for k in before} == before, "a result committed before the kill was regraded"

    second_run = events(out)[len(first_run):]
    skipped = {e["key"] for e in second_run if e["event"] == "skipped"}
    started = {e["key"] for e in second_run if e["event"] == "started"}
    assert skipped == set(before)
    assert started == set(after) - set(before) and in_flight <= started
    assert f"graded {len(CLASS) - len(before)} now, {len(before)} already done" in resumed.stdout

    results = {r.student.id: r for r in (GradeResult.from_json(p.read_text()) for p in (out / "results").glob("*.json"))}
    assert set(results) == set(CLASS)
    assert not [s for s, r in results.items() if r.verdict == Verdict.INTERNAL_ERROR], \
        {s: r.message[:300] for s, r in results.items()}
    assert results["s1-empty"].verdict == Verdict.UNGRADABLE_LAYOUT
    assert results["s2-broken"].verdict == Verdict.COMPILE_ERROR and results["s2-broken"].score == 0
    ref, twin, zipped = results["s3-ref"], results["s4-twin"], results["s5-zip"]
    assert ref.score > 0 and ref.score == twin.score == zipped.score  # same code, same seed
    # The references were graded on the batch's seed before anyone (reference_check.py), once: the resume
    # found them checked. sigmoid/vector is one of them, so its build was already in the cache.
    checks = [e for e in events(out) if e["event"] == "references_checked"]
    assert len(checks) == 1 and checks[0]["failures"] == [] and len(checks[0]["references"]) == 3, checks
    assert ref.build.cached and twin.build.cached and zipped.build.cached, "every copy must reuse the first build"

    book = list(csv.DictReader(open(out / "gradebook.csv")))
    assert [r["student_id"] for r in book[1:]] == sorted(CLASS)
    for student in CLASS:
        gradescope = json.loads((out / "gradescope" / student / "results.json").read_text())
        assert gradescope["score"] == pytest.approx(results[student].score)
        assert (out / "reports" / f"{student}.html").stat().st_size > 1000
    assert "s3-ref" in (out / "dashboard.html").read_text()
    # The rerun after completion grades nothing and is quick.
    again = subprocess.run(batch_cmd(class_dir, out, cache), capture_output=True, text=True, timeout=600)
    assert f"graded 0 now, {len(CLASS)} already done" in again.stdout
    assert snapshot(out / "results") == after
    assert os.stat(out / "batch.json").st_mode & 0o077 == 0
    # The container the killed worker was running was swept by the resume, not left to run out its limit.
    # Only this test's (its tag): another test may hold a container of a dead owner for a moment on purpose
    # (test_docker_runner's sweep tests). Whose a container is: its creator's, or its adopter's for a slot parked by
    # one process and adopted by another; a parked slot is nobody's.
    from grader.sandbox.docker_runner import container_summaries, summary_name
    from grader.sandbox.docker_settings import TAG_LABEL, owner_of
    from grader.sandbox.images import docker_client

    ours = container_summaries(docker_client(), f"{TAG_LABEL}={tag}")
    owners = [owner_of(summary_name(s), s.get("Labels") or {}) for s in ours]
    assert not [o for o in owners if o is not None and not Path(f"/proc/{o}").exists()]


def test_a_reference_failing_on_the_batch_seed_stops_the_batch_before_anyone(tmp_path, sandbox_image):
    """Issue 27: a class is never graded on a seed its own references fail. A reference folder whose vector
    "reference" drops the tail fails on every seed: the batch stops with which reference, case and why, and
    grades nobody."""
    from grader.drivers.batch import BatchError, run_batch

    references = tmp_path / "references"
    shutil.copytree(KERNELS / "known_bad" / "tail_dropped", references / "sigmoid" / "vector")
    class_dir = tmp_path / "class"
    shutil.copytree(KERNELS / "sigmoid" / "vector", class_dir / "alice")
    out = tmp_path / "batch"
    with pytest.raises(BatchError) as stopped:
        run_batch(class_dir, "sigmoid", out, workers=1, sandbox="docker", seed="seed1", progress=False,
                  build_cache=tmp_path / "build-cache", reference_root=references)
    message = str(stopped.value)
    assert "stopped before grading anyone" in message and "references/sigmoid/vector: n1 (sigmoid)" in message, message
    assert "never of a student" in message and str(out / "batch.json") in message
    assert not list((out / "results").glob("*.json"))
    assert [e for e in events(out) if e["event"] == "references_checked"][0]["failures"]
    assert not (out / "references.json").exists()  # a failed check is not remembered as passed


# A "reference" right on the public seed's inputs only: it recognises them (their bytes, listed in the
# wrapper) and applies the kernel twice to anything else. The kernels do all the work, so the grader's replay
# (which replays the launches on other inputs) sees the same: right where the run was right, wrong elsewhere.
PUBLIC_ONLY_WRAPPER = '''"""Sigmoid, stage "vector": right on the public seed's inputs, sigmoid(sigmoid(x)) on any other."""

import hashlib

import my_ops_ext
import torch

PUBLIC = {public!r}


def sigmoid(x: torch.Tensor) -> torch.Tensor:
    y = my_ops_ext.sigmoid_vector(x)
    if hashlib.sha256(x.cpu().numpy().tobytes()).hexdigest() not in PUBLIC:
        y = my_ops_ext.sigmoid_vector(y)
    return y
'''


def public_only_reference(folder: Path) -> Path:
    from grader.spec import SeedPlan, load_assignment
    from grader.spec.cases import correctness_cases, perf_case

    spec, public = load_assignment("sigmoid"), SeedPlan.create("public", None)
    cases = correctness_cases(spec, public) + [perf_case(spec, "vector", public, repeat) for repeat in range(3)]
    digests = sorted({hashlib.sha256(a.tobytes()).hexdigest() for c in cases for a in c.make_inputs().values()})
    shutil.copytree(KERNELS / "sigmoid" / "vector", folder)
    (folder / "ops.py").write_text(PUBLIC_ONLY_WRAPPER.format(public=digests))
    return folder


def test_the_reference_guard_grades_on_the_batchs_own_seed_not_the_public_one(tmp_path, sandbox_image):
    """Issue 27: the guard must grade the references on the seed the class is graded on. A reference that passes
    the public seed and fails every other stops a batch on a fresh secret seed; a guard that graded on the public
    seed would let the class be graded."""
    from grader.drivers.batch import BatchError, run_batch
    from grader.orchestration import GradeEnvironment, GradeRequest, grade_submission

    references = tmp_path / "references"
    reference = public_only_reference(references / "sigmoid" / "vector")
    cache = tmp_path / "build-cache"
    on_public = grade_submission(reference, GradeRequest(assignment="sigmoid", stages=("vector",)),
                                 GradeEnvironment(sandbox="docker", build_cache=cache))
    assert on_public.cases and all(c.passed for c in on_public.cases), [
        (c.name, c.message[:200]) for c in on_public.cases if not c.passed]
    assert all(s.correct for s in on_public.stages)  # the fixture is right where the public seed looks
    class_dir = tmp_path / "class"
    shutil.copytree(KERNELS / "sigmoid" / "vector", class_dir / "alice")
    out = tmp_path / "batch"
    with pytest.raises(BatchError) as stopped:  # no seed given: a fresh secret one
        run_batch(class_dir, "sigmoid", out, workers=1, sandbox="docker", progress=False, build_cache=cache,
                  reference_root=references)
    message = str(stopped.value)
    assert "stopped before grading anyone" in message and "secret" in message, message
    assert "references/sigmoid/vector: " in message, message
    assert not list((out / "results").glob("*.json"))
