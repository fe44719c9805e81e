"""A run whose device journal runs into a budget of the sandbox says which budget (issue 27).

The worker journals what its process did to the device for the grader's replay, in one file. A seed sweep with
10 seeds of the bundled example's six stages sharing a round filled it to the sandbox's 256 MiB file size limit:
the journal ended inside a record, the calls after it were "not reached", and correct kernels were graded
`integrity` ("the sandbox's claims do not add up"). Here a single student run does the same on purpose (a
wrapper uploading 300 MiB of varied bytes once): the calls its journal could not carry are a crash naming the
limit, not an integrity verdict.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from grader.orchestration import grade_submission
from grader.orchestration.build_cache import default_build_cache
from grader.orchestration.options import GradeEnvironment, GradeRequest
from grader.results import Verdict
from grader.sandbox.base import Limits

REPO = Path(__file__).resolve().parents[2]

FLOODING_WRAPPER = '''"""Sigmoid, stage "vector", after one upload of 300 MiB the journal must carry."""

import my_ops_ext
import torch

_uploaded = []


def sigmoid(x: torch.Tensor) -> torch.Tensor:
    if not _uploaded:  # once per worker process
        _uploaded.append(torch.arange(75 << 20, dtype=torch.float32).to(x.device))
    return my_ops_ext.sigmoid_vector(x)
'''


def test_a_journal_past_the_file_size_limit_is_a_crash_that_names_the_limit(emu_image, tmp_path):
    submission = tmp_path / "flood"
    shutil.copytree(REPO / "reference_kernels" / "sigmoid" / "vector", submission)
    (submission / "ops.py").write_text(FLOODING_WRAPPER)
    result = grade_submission(submission, GradeRequest(assignment="sigmoid", stages=("vector",)),
                              GradeEnvironment(sandbox="docker", build_cache=default_build_cache()))
    assert result.cases, result.message
    limit = f"file size limit ({Limits().file_size_bytes >> 20} MiB)"
    cut = [c for c in result.cases if not c.passed]
    # Each round's worker uploads again: the probe's journal, kept for its deferred replay, and the next
    # round's together pass the disk budget, which is named too.
    assert cut and all(c.verdict == Verdict.CRASH and (limit in c.message or "disk_quota_exceeded" in c.message)
                       for c in cut), [(c.name, c.verdict, c.message[:300]) for c in cut]
    assert any(limit in c.message for c in cut)
    assert not any(c.verdict == Verdict.INTEGRITY for c in result.cases)
    assert result.verdict == Verdict.CRASH
