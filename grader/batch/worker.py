"""The batch worker process: grades jobs and commits each result to the batch directory.

    python -m grader.batch.worker --serve < jobs            # local pool: one JSON line per job, answered on stdout
    python -m grader.batch.worker < job.json                # one job on stdin
    python -m grader.batch.worker --plan DIR/plan.jsonl --index N   # Kubernetes indexed job / array task

The grading function is the job's `entry`, resolved here (resolve_entry) and handed to grade_job; this
package never imports the grading pipeline, so the orchestration layer above it decides what grading is.

A worker is a separate process so that anything going wrong while grading (a grader bug, an out-of-memory
kill, a hung toolchain) costs one submission, never the batch: the pool kills a worker that fails a job and
starts another. Student code never runs in it (only in sandboxes), so one worker serves a slot's jobs in turn.
It dies with the process that started it (PR_SET_PDEATHSIG), so a killed batch leaves no worker writing
results behind its back.
"""

from __future__ import annotations

import argparse
import ctypes
import importlib
import json
import os
import shutil
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import IO

from grader.batch.jobs import JOB_DONE, GradeFn, GradeJob, failure_result
from grader.batch.store import ResultStore
from grader.i18n import _, use_language
from grader.results import GradeResult, Student, Verdict

_PR_SET_PDEATHSIG = 1


def die_with_parent(expected_parent: int | None) -> None:
    """Linux: SIGKILL this process when its parent dies; exits at once if the parent is already gone."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        return
    if expected_parent is not None and os.getppid() != expected_parent:
        os._exit(3)


def resolve_entry(entry: str) -> GradeFn:
    """The grading function a job names ("module:function"): the one place a name becomes a function."""
    module, _, name = entry.partition(":")
    return getattr(importlib.import_module(module), name)


def grade_job(job: GradeJob, grade: GradeFn) -> GradeResult:
    """Grades `job` with `grade` in this process and commits the result; returns it. Never raises for what
    the submission or the grader did: those become results."""
    store = ResultStore(Path(job.batch_dir))
    if job.seed is None:
        job.seed = json.loads(store.manifest_path.read_text())["seed"]
    final_dir = store.run_dir(job.key)
    work_dir = final_dir.with_name(f"{job.key}.partial-{os.getpid()}")
    shutil.rmtree(work_dir, ignore_errors=True)
    work_dir.mkdir(parents=True)
    started = time.monotonic()
    with use_language(job.lang):  # the job's messages, and ours if the grader fails, in the batch's language
        try:
            result = grade(job, work_dir)
            if not isinstance(result, GradeResult):
                raise TypeError(f"{job.entry} returned {type(result).__name__}, not GradeResult")
            # The instructor's roster decides who a submission belongs to, not the student's grade.toml (the
            # grading function wrote its files with it: drivers.batch.grade_batch_job).
            result.student = Student(id=job.student_id, name=job.student_name or job.student_id)
        except Exception as exc:  # the grader itself failed: record it as ours, never the student's
            tail = "".join(traceback.format_exception(exc))[-4000:]
            result = failure_result(job, Verdict.INTERNAL_ERROR,
                                    _("the grader failed: {error}").format(error=repr(exc)) + "\n" + tail)
    if final_dir.exists():
        shutil.rmtree(final_dir)  # --force regrade of the same key
    os.replace(work_dir, final_dir)
    store.save(job.key, result)  # the commit point: after this the submission counts as graded
    store.log("graded", key=job.key, student=job.student_id, verdict=str(result.verdict),
              seconds=round(time.monotonic() - started, 2), pid=os.getpid())
    return result


def _job_from_plan(plan: Path, index: int) -> GradeJob:
    with open(plan, encoding="utf-8") as fh:
        for i, line in enumerate(fh):
            if i == index:
                return GradeJob.from_json(line)
    raise SystemExit(f"{plan} has no job {index}")


def _private_fd(fd: int, mode: str) -> IO[str]:
    """`fd` moved to a descriptor no child process inherits (fd itself then reads /dev/null or writes to
    stderr): what the sandboxes and compilers this worker starts could read or write is never the job channel."""
    private = os.fdopen(os.dup(fd), mode, buffering=1, encoding="utf-8")  # os.dup: not inheritable
    os.dup2(os.open(os.devnull, os.O_RDONLY) if fd == 0 else sys.stderr.fileno(), fd)
    return private


def _log_to(path: str) -> None:
    """This job's output (ours and every child's) goes to its log in the batch's logs/."""
    sys.stdout.flush()
    sys.stderr.flush()
    log = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)


def serve(device: str | None) -> int:
    """Grades the jobs the pool sends, one JSON line each ({"job": GradeJob JSON, "log": path}), answering JOB_DONE after each commit;
    returns at the end of input."""
    jobs, answers = _private_fd(0, "r"), _private_fd(1, "w")
    for line in jobs:
        message = json.loads(line)
        _log_to(message["log"])
        job = GradeJob.from_json(message["job"])
        if device is not None:
            job.device = device
        grade_job(job, lambda job, work_dir: resolve_entry(job.entry)(job, work_dir))
        sys.stdout.flush()
        sys.stderr.flush()
        answers.write(JOB_DONE + "\n")
    from grader.sandbox.slot_runner import close_slots

    close_slots()  # this worker's slot containers, before the pool's wait for its exit runs out
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grader.batch.worker")
    parser.add_argument("--plan", type=Path, help="plan.jsonl written by `grade batch --plan-only`")
    parser.add_argument("--index", type=int, default=None,
                        help="job index in the plan (default: $JOB_COMPLETION_INDEX, as Kubernetes sets)")
    parser.add_argument("--parent", type=int, default=None, help="die if this pid is not our parent")
    parser.add_argument("--device", default=None, help="override the job's device (the slot's card)")
    parser.add_argument("--serve", action="store_true", help="grade one job per line of stdin (the local pool)")
    args = parser.parse_args(argv)
    die_with_parent(args.parent)
    if args.serve:
        return serve(args.device)
    if args.plan is not None:
        index = args.index if args.index is not None else int(os.environ.get("JOB_COMPLETION_INDEX", "-1"))
        job = _job_from_plan(args.plan, index)
        if ResultStore(Path(job.batch_dir)).is_done(job.key):
            return 0  # a retried pod whose first attempt committed before dying
    else:
        job = GradeJob.from_json(sys.stdin.read())
    if args.device is not None:
        job.device = args.device
    # Anything the grader prints goes to our log, never into a channel someone parses.
    sys.stdout.flush()
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    # Resolved inside grade_job's guard, so a name that does not load is this job's internal error.
    grade_job(job, lambda job, work_dir: resolve_entry(job.entry)(job, work_dir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
