"""`grade submit --profile` from a results document: a valid Chrome/Perfetto trace, named in the grading's
language, and nothing written when no stage has a timeline."""

from __future__ import annotations

import json

from grader.i18n import use_language
from grader.reporting.profile import chrome_trace, write_profile

from . import samples
from .perfetto import check_perfetto_json


def test_a_stage_timeline_becomes_one_process_with_a_thread_per_unit(tmp_path):
    result = samples.slow_sigmoid()
    path = write_profile(result, tmp_path / "profile.json")
    assert path is not None
    trace = json.loads(path.read_text())
    events = check_perfetto_json(trace)
    assert {e["name"] for e in events} == {"load", "vector", "store", "sync"}
    assert {e["pid"] for e in events} == {1}
    threads = {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"}
    assert threads == {"core 0 · scalar stream", "core 0 · compute", "core 0 · IO-DMA"}
    timeline = result.stages[0].trace.timeline  # type: ignore[union-attr]
    assert max(e["ts"] + e["dur"] for e in events) == timeline.makespan_cycles / timeline.clock_mhz


def test_names_follow_the_grading_language():
    with use_language("zh"):
        trace = chrome_trace(samples.slow_sigmoid())
    names = [e["args"]["name"] for e in trace["traceEvents"] if e["name"] in ("thread_name", "process_name")]
    assert any("核 0" in n for n in names) and any("模型估计" in n for n in names)


def test_no_timeline_no_file(tmp_path):
    assert write_profile(samples.passing_matmul(), tmp_path / "profile.json") is None
    assert not (tmp_path / "profile.json").exists()


def test_torch_operators_have_a_thread_of_their_own(tmp_path):
    """Issue 36: the device operators around the kernels are on the profile, named, with their modelled time."""
    from grader.results import TorchOp

    result = samples.slow_sigmoid()
    trace_summary = result.stages[0].trace
    assert trace_summary is not None
    trace_summary.torch_ops = [TorchOp(op="aten::copy_", where="ops.py:7", modelled_us=40.5),
                               TorchOp(op="aten::cat", where="ops.py:8", count=2, modelled_us=71.25)]
    trace = json.loads(write_profile(result, tmp_path / "profile.json").read_text())  # type: ignore[union-attr]
    events = check_perfetto_json(trace)
    ops = [e for e in events if e.get("cat") == "torch_ops"]
    assert [(e["name"], e["ts"], e["dur"], e["args"]["where"]) for e in ops] == [
        ("aten::copy_", 0.0, 40.5, "ops.py:7"), ("aten::cat", 40.5, 71.25, "ops.py:8")]
    threads = {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"}
    assert "torch operators" in threads
