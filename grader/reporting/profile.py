"""`grade submit --profile`: the stages' modelled timelines as a Chrome / Perfetto trace (JSON object format,
loadable in ui.perfetto.dev or chrome://tracing), like cnperf's timechart.

Rendered from the results document only (each stage's `trace.timeline`, itself read from the grader's replay,
never from the student's process): one process per stage, one thread per core and unit (issue stream, compute
queue, IO-DMA, Move-DMA), a complete event ("ph": "X") per busy interval. Times are microseconds of modelled
device time (cycles / clock), the launch overhead left out.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from grader.i18n import _
from grader.reporting.charts import core_name
from grader.results import TIMELINE_LANES, GradeResult, StageResult, Timeline

# Event categories: what a student filters on in the viewer.
_CATEGORY = {"load": "dma", "store": "dma", "move": "dma", "vector": "compute", "tensor": "compute",
             "scalar": "scalar", "sync": "wait", "barrier": "wait"}


def lane_name(lane: str) -> str:
    return {"issue": _("scalar stream"), "compute": _("compute"), "io": _("IO-DMA"), "move": _("Move-DMA")}[lane]


def _stage_events(pid: int, stage: StageResult, timeline: Timeline, device: str) -> list[dict[str, Any]]:
    clock = timeline.clock_mhz
    name = _("stage {name}: {kernel} (modelled, {device})").format(name=stage.name, kernel=timeline.kernel,
                                                                 device=device)
    events: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": name}},
        {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": pid}},
    ]
    threads = sorted({(ev.core, ev.lane) for ev in timeline.events},
                     key=lambda cl: (cl[0], TIMELINE_LANES.index(cl[1])))
    for core, lane in threads:
        tid = core * len(TIMELINE_LANES) + TIMELINE_LANES.index(lane) + 1
        events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
                       "args": {"name": f"{core_name(timeline, core)} · {lane_name(lane)}"}})
        events.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid, "args": {"sort_index": tid}})
    # A unit's work is sequential (its queue is in order): complete events on one thread must not overlap, so
    # a start rounded before the previous end is moved up to it.
    ends: dict[int, int] = {}
    for ev in sorted(timeline.events, key=lambda ev: (ev.core, ev.lane, ev.start)):
        tid = ev.core * len(TIMELINE_LANES) + TIMELINE_LANES.index(ev.lane) + 1
        start = max(ev.start, ends.get(tid, 0))
        end = max(ev.end, start)
        ends[tid] = end
        events.append({"ph": "X", "name": ev.kind, "cat": _CATEGORY.get(ev.kind, "other"), "pid": pid, "tid": tid,
                       "ts": round(start / clock, 3), "dur": round(round(end / clock, 3) - round(start / clock, 3), 3)})
    return events + _torch_op_events(pid, stage)


def _torch_op_events(pid: int, stage: StageResult) -> list[dict[str, Any]]:
    """The torch operators the replay ran around the kernels (issue 36), one after another on a thread of their
    own after the launch: their order against the launches is not recorded, their modelled time is."""
    ops = stage.trace.torch_ops if stage.trace else []
    if not ops:
        return []
    tid = 0x7000  # after every core's threads
    events: list[dict[str, Any]] = [
        {"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": _("torch operators")}},
        {"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid, "args": {"sort_index": tid}}]
    start = 0.0
    for op in ops:
        events.append({"ph": "X", "name": op.op, "cat": "torch_ops", "pid": pid, "tid": tid, "ts": round(start, 3),
                       "dur": round(op.modelled_us, 3),
                       "args": {"where": op.where, "runs": op.count, "allowed": op.allowed}})
        start += op.modelled_us
    return events


def chrome_trace(result: GradeResult) -> dict[str, Any]:
    """The trace object: traceEvents plus what the figures are (modelled, which device, which stages)."""
    events: list[dict[str, Any]] = []
    stages = []
    for pid, stage in enumerate(result.stages, start=1):
        timeline = stage.trace.timeline if stage.trace else None
        if timeline is None:
            continue
        events += _stage_events(pid, stage, timeline, result.device_profile)
        stages.append({"pid": pid, "stage": stage.name, "kernel": timeline.kernel,
                       "merged_within_cycles": timeline.merged_within_cycles})
    return {"traceEvents": events, "displayTimeUnit": "ns",
            "otherData": {"source": "modelled" if result.time_is_modelled else result.time_source,
                          "device": result.device_profile, "submission": result.submission_hash,
                          "stages": stages}}


def write_profile(result: GradeResult, path: Path) -> Path | None:
    """Writes the trace; None (nothing written) when no stage has a timeline."""
    trace = chrome_trace(result)
    if not trace["otherData"]["stages"]:
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(trace, ensure_ascii=False, separators=(",", ":")), encoding="utf-8")
    return path
