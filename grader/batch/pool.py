"""A local pool of worker processes, one per device slot (an MLU card, or a CPU slot on the emulator).

Each slot keeps one `python -m grader.batch.worker --serve` process and hands it jobs one at a time: a job goes
in on its stdin as a JSON line, and the worker answers with a line on its stdout once the result is committed.
A worker that crashes, hangs past the job's timeout or answers nothing is killed with its process group; that
job's result says why, and the slot starts a fresh worker for its next job -- whatever happens to a worker costs
one submission. Keeping the worker saves its start-up (imports: ~1 CPU-s per submission) and lets the cases a
batch's seed draws, the same for every student, be drawn once per worker (spec.cases._Drawn).
Jobs whose content equals one already in flight wait for it, so identical resubmissions and renamed copies are
graded after their twin has filled the build cache instead of building it twice.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from grader.batch.jobs import JOB_DONE, GradeJob, failure_result
from grader.batch.store import ResultStore
from grader.results import GradeResult, Verdict

LOG_TAIL_BYTES = 3000
# Set: a fresh worker process per job, as before workers served a slot's jobs in turn (benchmarks compare).
FRESH_WORKERS_ENV = "BANG_GRADER_FRESH_WORKERS"


@dataclass(frozen=True)
class Slot:
    index: int
    device: str | None  # passed to the worker; None: the job's own device


OnFinish = Callable[[GradeJob, GradeResult, float], None]
OnStart = Callable[[GradeJob, Slot], None]


def _tail(path: Path, limit: int = LOG_TAIL_BYTES) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(max(0, path.stat().st_size - limit))
            return fh.read().decode(errors="replace")
    except OSError:
        return ""


class WorkerPool:
    def __init__(self, store: ResultStore, slots: list[Slot], *, job_timeout: float = 1800.0) -> None:
        if not slots:
            raise ValueError("a worker pool needs at least one slot")
        self.store = store
        self.slots = slots
        self.job_timeout = job_timeout
        self.logs_dir = store.root / "logs"
        self.logs_dir.mkdir(exist_ok=True)
        self._cond = threading.Condition()
        self._pending: list[GradeJob] = []
        self._in_flight: set[str] = set()
        self._procs: dict[int, subprocess.Popen] = {}
        self._workers: dict[int, subprocess.Popen] = {}  # slot index -> its serving worker
        self._stopping = False

    # ----------------------------------------------------------------------------------- scheduling
    def _next_job(self) -> GradeJob | None:
        with self._cond:
            while not self._stopping:
                if not self._pending:
                    return None
                for i, job in enumerate(self._pending):
                    if job.content_hash not in self._in_flight:
                        self._in_flight.add(job.content_hash)
                        return self._pending.pop(i)
                self._cond.wait()  # only twins of running jobs are left: wait for their build
            return None

    def _finished(self, job: GradeJob) -> None:
        with self._cond:
            self._in_flight.discard(job.content_hash)
            self._cond.notify_all()

    # ------------------------------------------------------------------------------------- running
    def _worker(self, slot: Slot) -> subprocess.Popen:
        """The slot's serving worker, started when the slot has none (first job, or the last one died)."""
        proc = self._workers.get(slot.index)
        if proc is not None:
            if proc.poll() is None:
                return proc
            self._retire(slot, proc)  # ended between jobs: reaped, and anything it left is killed
        argv = [sys.executable, "-m", "grader.batch.worker", "--serve", "--parent", str(os.getpid())]
        if slot.device is not None:
            argv += ["--device", slot.device]
        # Until its first job the worker writes here (an import that fails says so in this file).
        with open(self.logs_dir / f"slot-{slot.index}.log", "ab") as log:
            proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                                    start_new_session=True)  # its own group: killed as a whole
        with self._cond:
            if self._stopping:
                os.killpg(proc.pid, signal.SIGKILL)
            self._procs[proc.pid] = proc
        self._workers[slot.index] = proc
        return proc

    def _answer(self, proc: subprocess.Popen) -> tuple[str | None, bool]:
        """The worker's answer to the job just sent (None: it ended without one), and whether the job's
        timeout passed first."""
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], self.job_timeout)
        if not ready:
            return None, True
        line = proc.stdout.readline()
        return (line.decode(errors="replace").strip() if line else None), False

    def _retire(self, slot: Slot, proc: subprocess.Popen) -> None:
        """Kills a worker that failed a job (with anything it started) and forgets it."""
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
        with self._cond:
            self._procs.pop(proc.pid, None)
        self._workers.pop(slot.index, None)

    def run_one(self, job: GradeJob, slot: Slot) -> GradeResult:
        """Runs `job` on the slot's worker and returns its (committed) result."""
        log_path = self.logs_dir / f"{job.key}.log"
        log_path.write_bytes(b"")
        proc = self._worker(slot)
        assert proc.stdin is not None
        try:
            proc.stdin.write((json.dumps({"job": job.to_json(), "log": str(log_path)}) + "\n").encode())
            proc.stdin.flush()
            answer, timed_out = self._answer(proc)
        except (BrokenPipeError, ValueError):
            answer, timed_out = None, False  # the worker died at start, or stop() killed it: its status tells why
        if self._stopping:
            raise InterruptedError("batch stopping")
        result = self.store.load(job.key)
        if answer == JOB_DONE and result is not None:
            if os.environ.get(FRESH_WORKERS_ENV):
                self._close_workers([slot.index])
            return result
        self._retire(slot, proc)
        if timed_out:
            why = f"the grading worker took longer than {self.job_timeout:.0f} s and was stopped"
        elif proc.returncode < 0:
            why = f"the grading worker was killed by {signal.Signals(-proc.returncode).name}"
        else:
            why = f"the grading worker exited with status {proc.returncode} without a result"
        # Half-written artefacts of the dead worker would pass for a report; its log stays in logs/.
        shutil.rmtree(self.store.run_dir(job.key).with_name(f"{job.key}.partial-{proc.pid}"), ignore_errors=True)
        tail = _tail(log_path) or _tail(self.logs_dir / f"slot-{slot.index}.log")
        result = failure_result(job, Verdict.INTERNAL_ERROR, f"{why}\n{tail}")
        self.store.save(job.key, result)
        self.store.log("worker_failed", key=job.key, student=job.student_id, reason=why)
        return result

    def _close_workers(self, slots: list[int] | None = None) -> None:
        """Ends serving workers (all, or those of `slots`): end of input, then a kill for any that lingers."""
        procs = [self._workers.pop(i) for i in (list(self._workers) if slots is None else slots) if i in self._workers]
        for proc in procs:
            try:
                assert proc.stdin is not None
                proc.stdin.close()
            except OSError:
                pass
        deadline = time.monotonic() + 10
        for proc in procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            with self._cond:
                self._procs.pop(proc.pid, None)

    def _slot_loop(self, slot: Slot, on_start: OnStart | None, on_finish: OnFinish | None,
                   errors: list[BaseException]) -> None:
        while (job := self._next_job()) is not None:
            try:
                if on_start:
                    on_start(job, slot)
                started = time.monotonic()
                result = self.run_one(job, slot)
                if on_finish:
                    on_finish(job, result, time.monotonic() - started)
            except InterruptedError:
                return
            except BaseException as exc:  # a bug here must not hang the other slots
                errors.append(exc)
                self.stop()
                return
            finally:
                self._finished(job)

    def run(self, jobs: list[GradeJob], *, on_start: OnStart | None = None,
            on_finish: OnFinish | None = None) -> None:
        """Grades `jobs` on all slots; returns when all are done. Ctrl-C stops the workers (their
        submissions are regraded next time) and re-raises."""
        with self._cond:
            self._pending = list(jobs)
            self._stopping = False
        errors: list[BaseException] = []
        threads = [threading.Thread(target=self._slot_loop, args=(slot, on_start, on_finish, errors),
                                    name=f"batch-slot-{slot.index}", daemon=True) for slot in self.slots]
        for thread in threads:
            thread.start()
        try:
            for thread in threads:
                while thread.is_alive():
                    thread.join(timeout=0.5)  # short joins keep Ctrl-C responsive
        except BaseException:
            self.stop()
            raise
        finally:
            self._close_workers()
        if errors:
            raise errors[0]

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            for proc in list(self._procs.values()):
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            self._cond.notify_all()
