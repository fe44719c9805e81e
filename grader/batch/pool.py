"""A local pool of worker processes, one per device slot (an MLU card, or a CPU slot on the emulator).

Each job runs in a fresh `python -m grader.batch.worker` process; whatever happens to that process becomes
a result. Jobs whose content equals one already in flight wait for it, so identical resubmissions and
renamed copies are graded after their twin has filled the build cache instead of building it twice.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from grader.batch.jobs import GradeJob, failure_result
from grader.batch.store import ResultStore
from grader.results import GradeResult, Verdict

LOG_TAIL_BYTES = 3000


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
    def run_one(self, job: GradeJob, slot: Slot) -> GradeResult:
        """Runs `job` in a worker process on `slot` and returns its (committed) result."""
        log_path = self.logs_dir / f"{job.key}.log"
        argv = [sys.executable, "-m", "grader.batch.worker", "--parent", str(os.getpid())]
        if slot.device is not None:
            argv += ["--device", slot.device]
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=log, stderr=log,
                                    start_new_session=True)  # its own group: killed as a whole
        with self._cond:
            if self._stopping:
                os.killpg(proc.pid, signal.SIGKILL)
            self._procs[proc.pid] = proc
        try:
            assert proc.stdin is not None
            try:
                proc.stdin.write(job.to_json().encode())
                proc.stdin.close()
            except BrokenPipeError:
                pass  # the worker died at start; its exit status tells why
            try:
                proc.wait(timeout=self.job_timeout)
                timed_out = False
            except subprocess.TimeoutExpired:
                timed_out = True
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        finally:
            with self._cond:
                self._procs.pop(proc.pid, None)
        if self._stopping:
            raise InterruptedError("batch stopping")
        result = self.store.load(job.key)
        if result is not None and not timed_out:
            return result
        if timed_out:
            why = f"the grading worker took longer than {self.job_timeout:.0f} s and was stopped"
        elif proc.returncode < 0:
            why = f"the grading worker was killed by {signal.Signals(-proc.returncode).name}"
        else:
            why = f"the grading worker exited with status {proc.returncode} without a result"
        # Half-written artefacts of the dead worker would pass for a report; its log stays in logs/.
        shutil.rmtree(self.store.run_dir(job.key).with_name(f"{job.key}.partial-{proc.pid}"), ignore_errors=True)
        result = failure_result(job, Verdict.INTERNAL_ERROR, f"{why}\n{_tail(log_path)}")
        self.store.save(job.key, result)
        self.store.log("worker_failed", key=job.key, student=job.student_id, reason=why)
        return result

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
