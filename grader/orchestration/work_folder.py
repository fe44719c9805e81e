"""A grading's work folder (the sandboxes' /io: inputs, raw outputs, journals, the twins' inputs; ~200 MB for a
sigmoid submission) removed without the grading waiting for it (issue 41: half a second of a `grade submit`).

discard() hands the folder to `rm` in a session of its own, which outlives this process: `grade submit` prints
its answer and exits while the files go. The removal's CPU is spent all the same, beside the answer instead of
before it. `--one-file-system`: a mount left under the folder (a run's capped /io, sandbox/io_cap.py) is never
descended into. Where no such `rm` can start, the folder is removed here, as before.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path


def discard(folder: Path) -> None:
    """`folder` and everything under it removed, in the background when possible (never follows a link)."""
    try:
        # setsid -f forks: the rm is nobody's child here (no zombie in a long-lived batch or server worker).
        done = subprocess.run(["setsid", "-f", "rm", "-rf", "--one-file-system", "--", str(folder)],
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              timeout=30, check=False)
        if done.returncode == 0:
            return
    except (OSError, subprocess.SubprocessError):
        pass
    shutil.rmtree(folder, ignore_errors=True)
