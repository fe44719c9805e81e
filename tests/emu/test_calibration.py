"""The six lab MatMul stages, built and run through cncc-emu: correct results, modelled times within the
calibration band of the published MLU370-X8 figures, stage order preserved."""

from __future__ import annotations

import pytest
from bang_emu import calibration as cal


@pytest.fixture(scope="module")
def out_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("calibration")


def _run(number: str, out_dir) -> cal.StageResult:
    stage = next(s for s in cal.STAGES if s.number == number)
    result = cal.run_stage(stage, cal.build_stage(stage, out_dir))
    assert result.passed, result.output
    lo, hi = cal.RATIO_BAND
    assert lo <= result.ratio <= hi, f"stage {number}: {result.modelled_ms:.3f} ms modelled"
    return result


@pytest.mark.parametrize("number", ["01", "02", "03"])
def test_small_stages(number, out_dir):
    _run(number, out_dir)


@pytest.mark.slow
def test_large_stages_keep_the_published_order(out_dir):
    results = [_run(n, out_dir) for n in ("04", "05", "06")]
    assert cal.order_preserved(results)
    for r in results:
        assert r.kernel_wall_s < 30  # 524288x256x128 emulates in seconds


def test_table_format():
    stage = cal.STAGES[2]
    r = cal.StageResult(stage, "mlu370-x8", 0.055, 0.050, 0.01, 0.2, True, "")
    table = cal.format_table([r])
    assert "modelled (mlu370-x8)" in table and "1.10" in table and "PASSED" in table
