"""Orchestration: one grading job (job.run_job: request -> grade -> result -> results.json -> report), the
pipeline that grades one submission (pipeline.grade_submission) and the grader kinds it chooses between
(kinds.py); the drivers of many submissions (batch, calibrate, reference check) are in grader.drivers."""

from grader.orchestration.options import GradeEnvironment, GradeObserver, GradeRequest
from grader.orchestration.pipeline import grade_submission

__all__ = ["GradeEnvironment", "GradeObserver", "GradeRequest", "grade_submission"]
