"""Drivers of many submissions, above orchestration (which grades one): `grade batch` over a class (batch.py),
`grade calibrate` over an assignment's reference kernels (calibrate.py), and the reference-seed guard the batch
and the course server run before anyone is graded on a seed (reference_check.py)."""
