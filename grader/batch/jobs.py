"""The unit of batch work: one self-contained, JSON-serialisable grading job, and the results the batch
makes itself when a job cannot produce one (intake problem, worker crash).

A job names everything a worker needs (paths on storage the worker shares with the batch directory, and
the grading function by name), so the same job runs in a local worker process, a Ray task or a Kubernetes
pod (README, "Batch grading"). This package grades nothing itself: whoever plans the jobs (the
orchestration layer, or a test) names the GradeFn in `entry`, and grader.batch.worker resolves it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

import grader
from grader.backends import get_backend
from grader.results import GradeResult, Seeds, Student, Verdict, Versions

# A serving worker's answer on its stdout once a job's result is committed (grader.batch.worker --serve).
JOB_DONE = "done"


@dataclass
class GradeJob:
    key: str
    student_id: str
    student_name: str
    submission: str  # folder to grade
    assignment: str
    backend: str  # a name of grader.backends.BACKENDS
    device: str | None  # emu: device profile; mlu: card index. None: backend default / the slot's device
    sandbox: str
    seed_mode: Literal["public", "secret"]
    batch_dir: str
    entry: str  # "module:function", a GradeFn: how this job is graded (resolved by grader.batch.worker)
    build_cache: str | None = None
    seed: str | None = None  # None: read from batch.json in batch_dir (plan files never carry the seed)
    content_hash: str = ""
    lang: str = "en"  # the language of the feedback (grader/i18n.py)

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> GradeJob:
        return cls(**json.loads(text))

    def without_seed(self) -> GradeJob:
        return GradeJob(**{**asdict(self), "seed": None})


# Grades `job` (its device may be the slot's, its seed filled in), writing artefacts such as report.html
# and results.json under the given folder; returns the result. Raising is fine: the worker records it.
GradeFn = Callable[[GradeJob, Path], GradeResult]


def seeds_for(mode: str, seed: str | None) -> Seeds:
    digest = hashlib.sha256((seed or "").encode()).hexdigest()[:16]
    return Seeds(mode="public" if mode == "public" else "secret",
                 master=seed if mode == "public" else None, master_digest=digest)


def failure_result(job: GradeJob, verdict: Verdict, message: str, *, max_score: float = 0.0) -> GradeResult:
    """A result for a submission no grading run produced one for; scores nothing."""
    return GradeResult(
        student=Student(id=job.student_id, name=job.student_name),
        assignment=job.assignment,
        submission_path=job.submission,
        submission_hash=job.content_hash,
        backend=job.backend,
        device_profile=job.device or "",
        time_source=get_backend(job.backend).timing_source,
        sandbox=job.sandbox,
        verdict=verdict,
        message=message,
        score=0.0,
        max_score=max_score,
        seeds=seeds_for(job.seed_mode, job.seed),
        versions=Versions(grader=grader.__version__),
        lang=job.lang,
    )
