"""The Trace Event Format's rules that Perfetto and chrome://tracing rely on, checked on an exported profile."""

from __future__ import annotations


def check_perfetto_json(trace: dict) -> list[dict]:
    """The JSON object format's rules (the Trace Event Format that Perfetto and chrome://tracing load): complete
    events with numeric ts/dur and integer pid/tid, metadata naming every thread used, no overlapping complete
    events on one thread. Returns the complete events."""
    assert isinstance(trace["traceEvents"], list) and trace["traceEvents"]
    complete = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    meta = [e for e in trace["traceEvents"] if e["ph"] == "M"]
    assert len(complete) + len(meta) == len(trace["traceEvents"])
    for e in trace["traceEvents"]:
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int) and isinstance(e["name"], str)
    for e in meta:
        assert e["name"] in ("process_name", "process_sort_index", "thread_name", "thread_sort_index")
        assert isinstance(e["args"], dict) and e["args"]
    named = {(e["pid"], e["tid"]) for e in meta if e["name"] == "thread_name"}
    ends: dict[tuple[int, int], float] = {}
    for e in sorted(complete, key=lambda e: (e["pid"], e["tid"], e["ts"])):
        assert isinstance(e["ts"], int | float) and isinstance(e["dur"], int | float)
        assert e["ts"] >= 0 and e["dur"] >= 0
        key = (e["pid"], e["tid"])
        assert key in named
        assert e["ts"] >= ends.get(key, 0.0) - 1e-9, e
        ends[key] = e["ts"] + e["dur"]
    assert trace["otherData"]["source"] == "modelled"
    return complete
