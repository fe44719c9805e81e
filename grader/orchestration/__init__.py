"""Orchestration: grade_submission() (one submission end to end) and batch grading (batch.py)."""

from grader.orchestration.options import GradeOptions
from grader.orchestration.pipeline import grade_submission, write_result

__all__ = ["GradeOptions", "grade_submission", "write_result"]
