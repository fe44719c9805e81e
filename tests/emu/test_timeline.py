"""The cost model's per-core timeline (a launch record's "timeline"): it adds up to the modelled time, a
load-compute-store kernel never overlaps its DMA with its compute while the same work as an async pipeline
does, and it is read on the host into the results model under the emulator's cap."""

from __future__ import annotations

import pytest
from emu_helpers import PROGRAMS, read_trace, run

from grader.orchestration.trace_summary import read_timeline
from grader.reporting.charts import dma_compute_overlap
from grader.results import TIMELINE_MAX_EVENTS, Timeline


def timeline_of(build, tmp_path, which: str, tasks: int) -> tuple[dict, Timeline]:
    trace = tmp_path / f"{which}.jsonl"
    proc = run(build(PROGRAMS / "costs.mlu"), which, tasks, env={"BANG_EMU_TRACE": str(trace)})
    assert proc.returncode == 0, proc.stderr
    launch = read_trace(trace)[0]
    timeline = read_timeline(launch["timeline"], launch["kernel"])
    assert timeline is not None
    return launch, timeline


@pytest.mark.parametrize("which", ["serial", "pipelined"])
def test_the_timeline_spans_the_modelled_time_on_the_cores_in_use(build, tmp_path, which):
    launch, timeline = timeline_of(build, tmp_path, which, 3)
    overhead = launch["profile"]["launch_overhead_us"]
    assert timeline.makespan_cycles / timeline.clock_mhz + overhead == pytest.approx(launch["modelled_time_us"],
                                                                                     rel=1e-3)
    assert {ev.core for ev in timeline.events} == {0, 1, 2}
    assert max(ev.end for ev in timeline.events) == pytest.approx(timeline.makespan_cycles, abs=1)
    kinds = {ev.kind for ev in timeline.events}
    assert {"load", "store", "vector"} <= kinds
    assert all(ev.lane == "io" for ev in timeline.events if ev.kind in ("load", "store"))
    for core in range(3):  # one unit's work is sequential: its queue is in order
        for lane in ("issue", "compute", "io", "move"):
            mine = sorted((ev.start, ev.end) for ev in timeline.events if ev.core == core and ev.lane == lane)
            assert all(a[1] <= b[0] + 1 for a, b in zip(mine, mine[1:], strict=False)), (core, lane)


def test_a_pipeline_overlaps_dma_and_compute_and_a_serial_kernel_does_not(build, tmp_path):
    _, serial = timeline_of(build, tmp_path, "serial", 2)
    _, piped = timeline_of(build, tmp_path, "pipelined", 2)
    assert dma_compute_overlap(serial) == 0.0
    assert dma_compute_overlap(piped) > 0.4


def test_many_tasks_stay_under_the_cap(build, tmp_path):
    launch, timeline = timeline_of(build, tmp_path, "many_copies", 32)  # 1200 events a task, 2 per core
    assert len(launch["timeline"]["events"]) <= TIMELINE_MAX_EVENTS
    assert launch["timeline"]["merged_within"] > 0  # merged to fit
    assert {ev.core for ev in timeline.events} == set(range(16))
    assert len(str(launch["timeline"])) < 100_000


UNION_STOPPED = r"""
#include <bang.h>
__mlu_global__ void hazard(float *x) {
  __nram__ float a[64];
  if (__is_ipu()) {
    __memcpy_async(a, x, 64 * sizeof(float), GDRAM2NRAM);
    __memcpy_async(x + 64 * (taskId + 1), a, 64 * sizeof(float), NRAM2GDRAM);  // reads a while it is filling
  }
  __sync_io();
}
int main() {
  float *x;
  cnrtMalloc((void **)&x, 64 * 9 * sizeof(float));
  cnrtQueue_t queue;
  cnrtQueueCreate(&queue);
  cnrtDim3_t dim = {8, 1, 1};  // UNION1: two jobs of one cluster, run one after another until one fails
  hazard<<<dim, CNRT_FUNC_TYPE_UNION1, queue>>>(x);
  return cnrtQueueSync(queue) == cnrtSuccess ? 0 : 3;
}
"""


def test_a_union_launch_stopped_by_an_error_keeps_its_timeline(build, tmp_path):
    """The first job's error stops the launch before the second runs: the timeline covers the job that ran (it
    read past it and the process died of SIGSEGV right after the error, as kolp323's lab 06 did)."""
    source = tmp_path / "union_stopped.mlu"
    source.write_text(UNION_STOPPED)
    trace = tmp_path / "trace.jsonl"
    proc = run(build(source), env={"BANG_EMU_TRACE": str(trace)})
    assert proc.returncode == 3, (proc.returncode, proc.stderr[-2000:])
    launch = read_trace(trace)[0]
    assert [d["kind"] for d in launch["diagnostics"] if d["severity"] == "error"] == ["async-hazard"]
    timeline = read_timeline(launch["timeline"], launch["kernel"])
    assert timeline is not None and timeline.events
