"""Instructor batch grading: intake of a class, a resumable result store, worker processes, exports.

Entry point: `grader.orchestration.batch.run_batch` (the `grade batch` command).
"""
