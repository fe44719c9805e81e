"""Public student answers graded by the real grader (issue 12). They are read from fetched mirrors of their public
repositories at test time, never copied into this repository; without a mirror each test skips and says which
repository to fetch (`fetch github:<owner>/<name>`, or point $REALCODE_MIRRORS at a folder of mirrors)."""

from __future__ import annotations

import json
import os
import tempfile
from functools import cache
from pathlib import Path

import pytest

from tests.realcode import answers

ROOT = Path(__file__).resolve().parents[2]


def require_mirror(answer: answers.Answer) -> None:
    if not answers.available(answer):
        pytest.skip(f"no mirror of {answer.repo} at {answer.mirror} (fetch github:{answer.repo} to run this)")


def require_grader() -> None:
    if not (ROOT / ".venv" / "bin" / "grade").exists():
        pytest.skip("the grader's .venv is not built (run ./grade once)")


SANDBOX = os.environ.get("REALCODE_SANDBOX")  # passed to `grade submit --sandbox` (default: the grader's choice)
REUSE = os.environ.get("REALCODE_REUSE")  # a work folder of scripts/realcode_table.py: judge its results.json
# Eleven real gradings take about half an hour on 2 cores: more than CI's budget beside the rest of the suite,
# so they run on request (and the byte-for-byte adapter tests always run where the mirrors are).
GRADE = os.environ.get("REALCODE_GRADE") == "1" or bool(REUSE)


@cache
def graded(key: str) -> dict:
    """One grading per answer per session: the answer staged into the handout layout, `grade submit`, results.json."""
    answer = answers.by_key(key)
    if REUSE and (stored := Path(REUSE) / "out" / key / "results.json").exists():
        return json.loads(stored.read_text())
    work = Path(tempfile.mkdtemp(prefix=f"realcode-{key}-"))
    staged = answers.stage(answer, work / "submission")
    result = answers.grade(staged.path, work / "out", assignment=answer.assignment, stages=answer.stages,
                           sandbox=SANDBOX)
    (work / "summary.json").write_text(json.dumps(answers.summary(result), default=sorted, indent=1))
    return result


@pytest.fixture()
def grade_answer():
    def run(answer: answers.Answer) -> dict:
        require_mirror(answer)
        require_grader()
        if not GRADE:
            pytest.skip("real gradings of public answers run with REALCODE_GRADE=1 (about 30 min; "
                        "or REALCODE_REUSE=<work folder of scripts/realcode_table.py>)")
        return graded(answer.key)

    return run
