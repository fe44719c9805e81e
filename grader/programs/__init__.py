"""Standalone lab programs (a folder of NN_*.mlu with their own main()): their spec (spec.py) and the host's
reading of their runs (captures.py). The grading flow that uses them is grader.orchestration.programs; nothing
here imports orchestration."""
