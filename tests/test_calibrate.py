"""`grade calibrate` refuses to write thresholds from missing or broken references (the happy path, which
builds and times real kernels, is in tests/e2e/test_submit_e2e.py)."""

from __future__ import annotations

import pytest

from grader.drivers.calibrate import CalibrationError, calibrate
from grader.orchestration import GradeEnvironment


def test_a_missing_reference_stops_calibration_before_anything_runs(tmp_path):
    with pytest.raises(CalibrationError, match=r"no reference kernel for stage scalar_gdram: .*does not exist"):
        calibrate("matmul", GradeEnvironment(), reference_root=tmp_path, thresholds_root=tmp_path, log=lambda _: None)
    assert not list(tmp_path.rglob("*.toml"))


def test_a_reference_that_cannot_be_graded_writes_no_thresholds(tmp_path):
    broken = tmp_path / "ref"
    broken.mkdir()
    (broken / "ops.py").write_text("def sigmoid(x):\n    return x\n")
    with pytest.raises(CalibrationError, match="ungradable_layout"):
        calibrate("sigmoid", GradeEnvironment(), stages=("vector",), reference=broken, thresholds_root=tmp_path,
                  log=lambda _: None)
    assert not (tmp_path / "sigmoid").exists()
