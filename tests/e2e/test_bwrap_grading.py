"""A whole self-check in the bubblewrap sandbox (the fallback where Docker does not run): the same grade as the
default sandbox gives -- every case, every stage's verdict, points and modelled time. Until stop 52 every call
failed there as root ("Permission denied: 'c++'": bwrap made /etc 0700 under the dropped uid), and then on any
machine ("Read-only file system": the emulator's device library was prebuilt on the host under paths the sandbox
did not show, so its cache key differed inside). Skipped visibly where bwrap cannot run."""

from __future__ import annotations

import pytest

from grader.orchestration import GradeEnvironment, GradeRequest, grade_submission
from grader.orchestration.environment import bwrap_works
from grader.results import Verdict
from tests.e2e.conftest import BUILD_CACHE, ROOT, e2e_sandbox, graded

VECTOR = "reference_kernels/sigmoid/vector"


def test_a_self_check_in_bwrap_grades_as_the_default_sandbox_does():
    works, why = bwrap_works()
    if not works:
        pytest.skip(f"bubblewrap cannot run here: {why}")
    bwrap = grade_submission(ROOT / VECTOR, GradeRequest(), GradeEnvironment(sandbox="bwrap", build_cache=BUILD_CACHE))
    assert bwrap.sandbox == "bwrap"
    failing = [(c.name, c.verdict, c.message[:300]) for c in bwrap.cases if not c.passed]
    assert not failing, failing
    reference = graded(VECTOR)  # docker where its image is built, else the process runner
    assert reference.sandbox == e2e_sandbox() != "bwrap"
    assert [(c.name, c.verdict) for c in bwrap.cases] == [(c.name, c.verdict) for c in reference.cases]

    def stages(result):
        return [(s.name, s.verdict, s.points, s.timing and (s.timing.source, round(s.timing.median_us, 1)))
                for s in result.stages]

    assert stages(bwrap) == stages(reference)
    assert (bwrap.score, bwrap.verdict) == (reference.score, reference.verdict)
    assert bwrap.stages[0].verdict == Verdict.PASSED  # vector: not a grade of nothing that happens to agree
