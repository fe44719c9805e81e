"""The profile view (issue 29): a real grading's stages carry the modelled per-core timeline of the grader's
replay, `grade submit --profile` exports it as a Chrome/Perfetto trace, and the report draws it. The pipelined
reference kernel overlaps its DMA with its compute on every core; the one-core vector kernel does not."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from functools import cache
from pathlib import Path

import pytest

from grader.reporting.charts import dma_compute_overlap
from grader.reporting.profile import chrome_trace
from grader.results import GradeResult, Timeline
from tests.e2e.conftest import BUILD_CACHE, ROOT, e2e_sandbox, graded, submitted_example
from tests.reporting.browser import Chromium, missing
from tests.reporting.perfetto import check_perfetto_json

pytestmark = pytest.mark.slow


@cache
def vector_by_cli() -> tuple[GradeResult, Path]:
    """The vector reference graded by the CLI with --profile (stage vector only)."""
    out = Path(tempfile.mkdtemp(prefix="bang-grader-e2e-profile-"))
    proc = subprocess.run([sys.executable, "-m", "grader.cli", "submit", str(ROOT / "reference_kernels" / "sigmoid" /
                                                                          "vector"),
                           "--stages", "vector", "--profile", "--out", str(out), "--sandbox", e2e_sandbox(),
                           "--build-cache", str(BUILD_CACHE), "--no-setup"],
                          capture_output=True, text=True, timeout=1500, cwd=ROOT)
    assert (out / "results.json").is_file(), proc.stderr[-4000:]
    return GradeResult.from_json((out / "results.json").read_text()), out


def stage_timeline(result: GradeResult, stage: str) -> Timeline:
    found = next(s for s in result.stages if s.name == stage)
    assert found.trace is not None and found.trace.timeline is not None, found
    return found.trace.timeline


def test_the_pipelined_kernel_overlaps_dma_and_compute_on_every_core():
    result = graded("reference_kernels/sigmoid/pipeline", stages=("pipeline",))
    timeline = stage_timeline(result, "pipeline")
    busy = {ev.core for ev in timeline.events}
    assert len(busy) == 16
    assert dma_compute_overlap(timeline) > 0.9
    for core in busy:  # each core on its own: a load runs while the vector unit computes
        loads = [(ev.start, ev.end) for ev in timeline.events if ev.core == core and ev.kind == "load"]
        compute = [(ev.start, ev.end) for ev in timeline.events if ev.core == core and ev.lane == "compute"]
        assert any(a < d and c < b for a, b in loads for c, d in compute), core
    events = check_perfetto_json(chrome_trace(result))
    assert {e["name"] for e in events} >= {"load", "store", "vector"}
    assert len({e["tid"] for e in events if e["cat"] == "dma"}) == 16


def test_the_vector_kernel_runs_load_compute_store_one_after_another_on_one_core():
    result, out = vector_by_cli()
    timeline = stage_timeline(result, "vector")
    assert {ev.core for ev in timeline.events} == {0}
    assert dma_compute_overlap(timeline) == 0.0
    profile = json.loads((out / "profile.json").read_text())
    events = check_perfetto_json(profile)
    assert {e["name"] for e in events} >= {"load", "store", "vector"}
    # the timeline adds up to the stage's modelled time (launch overhead left out of the timeline)
    stage = next(s for s in result.stages if s.name == "vector")
    assert stage.trace is not None
    end_us = max(e["ts"] + e["dur"] for e in events)
    assert end_us == pytest.approx(timeline.makespan_cycles / timeline.clock_mhz, rel=1e-3)
    assert end_us < stage.trace.modelled_time_us


@pytest.mark.browser
@pytest.mark.skipif(missing() is not None, reason=str(missing()))
def test_the_report_draws_the_timeline(tmp_path):
    _, out = vector_by_cli()
    with Chromium() as browser:
        page = browser.open(out / "report.html")
        drawn = page.evaluate("""(() => { const t = document.querySelector('.timeline');
            return t && {label: t.querySelector('h4').textContent,
                         loads: t.querySelectorAll('rect.tl-load').length,
                         vector: t.querySelectorAll('rect.tl-vector').length,
                         idle: t.querySelectorAll('text.tl-idle').length,
                         width: t.querySelector('svg').getBoundingClientRect().width}; })()""")
        assert not page.report.problems
        assert drawn is not None and "modelled" in drawn["label"]
        assert drawn["loads"] > 0 and drawn["vector"] > 0 and drawn["idle"] == 1  # cores 1-15 idle, one row
        assert drawn["width"] > 400
        page.page.query_selector(".timeline").screenshot(path=str(tmp_path / "timeline.png"))
        assert (tmp_path / "timeline.png").stat().st_size > 2000


def test_every_timed_stage_of_the_example_has_a_timeline_and_union_cores_are_clusters():
    """The README's demo grading (shared with test_submit_e2e): a timeline for each of the six matmul stages, the
    UNION1 stage's cores named by cluster, its memory core waiting at the cluster's barriers."""
    _, result, _, out = submitted_example()
    for stage in result.stages:
        assert stage.trace is not None and stage.trace.timeline is not None, stage.name
    union = stage_timeline(result, "sram_union")
    assert union.union == 1
    roles = {union.core_label(ev.core)[1] for ev in union.events}
    assert 4 in roles and {0, 1, 2, 3} <= roles  # the memory core only reaches the barriers; four cores compute
    assert any(ev.kind == "barrier" for ev in union.events)
    assert any(ev.kind == "tensor" for ev in union.events)
    scalar = stage_timeline(result, "scalar_gdram")
    assert {ev.kind for ev in scalar.events} <= {"scalar", "sync", "load", "store"}
    check_perfetto_json(chrome_trace(result))
