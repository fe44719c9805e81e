"""BwrapRunner specifics: the sandboxed uid is never host root, and rlimits are in force."""

from __future__ import annotations

import os

import pytest

from grader.sandbox.bwrap_runner import BwrapRunner, bwrap_available
from tests.sandbox.conftest import SMALL, run_code

pytestmark = pytest.mark.skipif(not bwrap_available(), reason="bwrap/prlimit/setpriv not installed")


def test_files_written_are_not_owned_by_host_root(mounts):
    out = run_code(BwrapRunner(), mounts, "open('/io/outputs/mine', 'w').write('x')")
    assert out.ok, out
    owner = (mounts.io / "outputs" / "mine").stat().st_uid
    assert owner == (10001 if os.geteuid() == 0 else os.getuid())
    assert owner != 0


def test_rlimits_are_in_force(mounts):
    out = run_code(BwrapRunner(), mounts, """
import resource
print(*(resource.getrlimit(r)[0] for r in (resource.RLIMIT_NOFILE, resource.RLIMIT_FSIZE, resource.RLIMIT_CORE)))
""")
    assert out.ok, out
    assert out.stdout_tail.split() == [str(SMALL.open_files), str(SMALL.file_size_bytes), "0"]


def test_environment_is_cleared(mounts, monkeypatch):
    monkeypatch.setenv("BANG_GRADER_TEST_LEAK", "leaked")
    out = run_code(BwrapRunner(), mounts, "import os\nprint(sorted(os.environ))")
    assert out.ok, out
    assert "BANG_GRADER_TEST_LEAK" not in out.stdout_tail and "BANG_GRADER_IO" in out.stdout_tail
