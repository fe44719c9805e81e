"""Grading functions (grader.batch.jobs.GradeFn) that misbehave on purpose, run by real worker processes to exercise the pool's
fault handling (a grader that crashes, hangs or raises must cost one submission, never the batch).

`quick` stands in for grading where the test is about scheduling, not grading: it returns a result made
from the submission's `score.txt` and records which process graded it and when. Jobs name them as
"entries:<name>" (this folder and tests/, for factories.py, are put on PYTHONPATH); a batch runs them as QUICK or
EXPLODE (OnNoMachine).
"""

from __future__ import annotations

import json
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from factories import grade_result

from grader.batch.jobs import GradeJob
from grader.drivers.batch import BatchGrading
from grader.orchestration.environment import Prepared
from grader.orchestration.options import GradeEnvironment
from grader.results import GradeResult, Seeds, Verdict


@dataclass(frozen=True)
class OnNoMachine(BatchGrading):
    """A batch grading with one of the functions below, on no machine: nothing set up, checked or swept (no
    sandbox runs student code), no reference kernels graded. Injected into run_batch (`grading=`) or named on
    the command line (`grade batch --grading entries:QUICK`)."""

    def prepare(self, environment: GradeEnvironment, log: object) -> Prepared:  # noqa: ARG002
        return Prepared(environment.sandbox, [])

    def preflight(self, environment: GradeEnvironment) -> None:
        pass

    def sweep(self) -> list[str]:
        return []

    def check_references(self, *args: object) -> None:
        pass


def crash(job: GradeJob, work_dir: Path) -> GradeResult:  # noqa: ARG001
    os.kill(os.getpid(), signal.SIGSEGV)
    raise AssertionError("unreachable")


def hang(job: GradeJob, work_dir: Path) -> GradeResult:  # noqa: ARG001
    time.sleep(3600)
    raise AssertionError("unreachable")


def explode(job: GradeJob, work_dir: Path) -> GradeResult:  # noqa: ARG001
    raise RuntimeError("grader bug for the test")


def quick(job: GradeJob, work_dir: Path) -> GradeResult:
    started = time.time()
    submission = Path(job.submission)
    text = (submission / "score.txt").read_text().split()
    score, delay = float(text[0]), float(text[1]) if len(text) > 1 else 0.0
    time.sleep(delay)
    (work_dir / "report.html").write_text(f"<p>{score}</p>")
    with open(os.environ["BATCH_TEST_LOG"], "a") as fh:  # who graded what, when: for the scheduling tests
        fh.write(json.dumps({"submission": submission.name, "pid": os.getpid(), "start": started,
                             "end": time.time(), "device": job.device}) + "\n")
    return grade_result(assignment=job.assignment, submission_path=str(submission), submission_hash="",
                        backend=job.backend, device_profile=job.device or "",
                        verdict=Verdict.PASSED if score >= 10 else Verdict.WRONG_ANSWER, score=score, max_score=10,
                        seeds=Seeds(mode=job.seed_mode, master_digest="x"))


def nosy(job: GradeJob, work_dir: Path) -> GradeResult:
    """Reads what a child process of the worker would find on fd 0 and writes to fd 1, as a child could: neither
    may be the pool's job channel (the next job, the answers)."""
    import subprocess

    seen = subprocess.run(["sh", "-c", "cat; echo done; echo done >&2"], capture_output=False, timeout=10,
                          stdout=None, stderr=None, stdin=None).returncode
    (work_dir / "report.html").write_text(f"<p>{seen}</p>")
    return quick(job, work_dir)


QUICK = OnNoMachine("entries:quick")
EXPLODE = OnNoMachine("entries:explode")
