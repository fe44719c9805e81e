"""Instructor batch grading: intake of a class, a resumable result store, worker processes, exports.

Below orchestration: nothing here imports the grading pipeline. `grader.drivers.batch.run_batch` (the
`grade batch` command) drives it and names the grading function each job runs (GradeJob.entry).
"""
