"""Fixtures for the harness tests (helpers live in harness_workspace.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from bang_harness.build import ExtensionBuilder
from bang_harness.paths import HarnessPaths
from bang_harness.plan import BuildPlan
from harness_workspace import HOST_BINDING, HOST_OPS, HostOnlyToolchain, Workspace, write_tree


@pytest.fixture(scope="session")
def host_extension(tmp_path_factory: pytest.TempPathFactory) -> Workspace:
    """A cpp-only submission built once per session with the harness's shared build steps."""
    root = tmp_path_factory.mktemp("host_ext")
    submission = write_tree(root / "submission", {"cpp/binding.cpp": HOST_BINDING, "ops.py": HOST_OPS})
    space = Workspace(root, submission)
    builder = ExtensionBuilder(HarnessPaths(submission, space.build, space.io), HostOnlyToolchain(),
                               BuildPlan.handout(submission, "my_ops_ext"))
    assert builder.build(), builder.log.text()[-4000:]
    return space


@pytest.fixture
def host_run(host_extension: Workspace, tmp_path: Path) -> Workspace:
    """A fresh /io for one job against the session's prebuilt host extension."""
    space = Workspace(tmp_path, host_extension.submission)
    space.build = host_extension.build
    return space
