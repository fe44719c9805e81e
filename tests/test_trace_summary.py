"""Emulator trace -> verified, streamed TraceReading -> TraceSummary (host side, untrusted input), and the stage
requirements judged from it. Traces are signed with real keys in the runtime's line format."""

from __future__ import annotations

import json
import resource

from bang_harness.protocol import TRACE_MAX_RECORDS, call_key, sign_line
from signed_trace import new_key, signed_lines, write_signed

from grader.checks.requirements import check_requirements
from grader.orchestration.trace_summary import read_trace, summarise_records
from grader.results import TIMELINE_MAX_EVENTS
from grader.spec import load_assignment

summarise_trace = summarise_records


def _launch(kernel: str = "matmul_kernel", time_us: float = 10.0, cores: int = 1, func_type: str = "BLOCK",
            builtins: dict | None = None, sram: int = 0, diagnostics: list | None = None) -> dict:
    return {"kernel": kernel, "dim": [cores, 1, 1], "func_type": func_type, "device": "mlu370-x8",
            "modelled_time_us": time_us, "time_split_us": {"io": time_us / 2, "tensor": time_us / 2},
            "bytes_moved": {"GDRAM2NRAM": 4096}, "onchip_peak_bytes": {"nram": 1024, "wram": 512, "sram": sram},
            "onchip_capacity_bytes": {"nram": 786432}, "builtin_counts": builtins or {}, "cores_used": cores,
            "diagnostics": diagnostics or []}


def test_summary_is_per_invocation_and_names_the_main_kernel(tmp_path):
    # Two invocations (checked call + one timed repeat), each with a small prologue kernel and the main one.
    key = new_key()
    records = [_launch("pad", 1.0), _launch("matmul_kernel", 30.0, cores=16, builtins={"__bang_matmul": 8})] * 2
    reading = read_trace(write_signed(tmp_path / "p1.trace.jsonl", key, "p1", records), key, "p1")
    assert reading.findings == [] and reading.launch_count == 4
    summary = reading.summary(invocations=2, device="mlu370-x8")
    assert summary is not None
    assert summary.kernel.startswith(("matmul_kernel", "pad")) and "(+1 more)" in summary.kernel
    assert summary.modelled_time_us == 31.0 and summary.launches == 2
    assert summary.builtin_counts == {"__bang_matmul": 8} and summary.cores_used == 16
    assert summary.bytes_moved == {"GDRAM2NRAM": 8192} and summary.dim == (16, 1, 1)


def test_an_unsigned_or_altered_line_is_a_finding_and_ends_the_reading(tmp_path):
    key = new_key()
    lines = signed_lines(key, "c0", [_launch(time_us=500.0), _launch(time_us=500.0)])
    forged = json.dumps({"record": "launch", "call": "c0", "seq": 1, **_launch(time_us=1.0)}).encode()
    path = tmp_path / "c0.trace.jsonl"
    path.write_bytes(lines[0] + b"\n" + forged + b"\n" + lines[1] + b"\n")
    reading = read_trace(path, key, "c0")
    assert reading.launch_count == 1 and len(reading.findings) == 1
    assert reading.findings[0].startswith("trace line 2:") and "signature does not verify" in reading.findings[0]
    altered = lines[1].replace(b"500.0", b"5.0")
    path.write_bytes(lines[0] + b"\n" + altered + b"\n")
    assert "signature" in read_trace(path, key, "c0").findings[0]
    # Signed with another run phase's key, or another call's key: not this call's records.
    write_signed(path, new_key(), "c0", [_launch()])
    assert "signature" in read_trace(path, key, "c0").findings[0]
    write_signed(path, key, "c1", [_launch()])
    assert "signature" in read_trace(path, key, "c0").findings[0]


def test_call_id_and_sequence_are_checked(tmp_path):
    key = new_key()
    path = tmp_path / "c0.trace.jsonl"
    base = {"record": "launch", **_launch()}
    write_signed(path, key, "c0", [{**base, "call": "c1", "seq": 0}], number=False)
    assert "names call 'c1'" in read_trace(path, key, "c0").findings[0]
    write_signed(path, key, "c0", [{**base, "call": "c0", "seq": 0}, {**base, "call": "c0", "seq": 2}], number=False)
    reading = read_trace(path, key, "c0")
    assert reading.launch_count == 1 and "sequence number 2, expected 1" in reading.findings[0]
    write_signed(path, key, "c0", [{**base, "record": "mystery", "call": "c0", "seq": 0}], number=False)
    assert "unknown record kind" in read_trace(path, key, "c0").findings[0]


def test_nan_infinity_and_non_objects_are_findings_not_crashes(tmp_path):
    key = new_key()
    path = tmp_path / "c0.trace.jsonl"
    key_call = call_key(key, "c0")
    for payload in (b'{"record":"launch","call":"c0","seq":0,"modelled_time_us":Infinity}',
                    b'{"record":"launch","call":"c0","seq":0,"modelled_time_us":NaN}', b'"a string"', b"{not json"):
        path.write_bytes(sign_line(key_call, payload) + b"\n")
        reading = read_trace(path, key, "c0")
        assert reading.launch_count == 0 and len(reading.findings) == 1, payload
    path.write_bytes(signed_lines(key, "c0", [_launch()])[0])  # no newline at the end: cut short
    assert "cut short" in read_trace(path, key, "c0").findings[0]


def test_a_trace_flood_is_capped_in_records_and_memory(tmp_path):
    key = new_key()
    path = tmp_path / "c0.trace.jsonl"
    line = signed_lines(key, "c0", [{}], number=False)[0] + b"\n"  # a signed `{}`: still not a valid record
    with path.open("wb") as fh:
        fh.write(line * 200_000)
    reading = read_trace(path, key, "c0")
    assert reading.launch_count == 0 and "names call" in reading.findings[0]
    records = [{"record": "launch", "call": "c0", "seq": i, **_launch()} for i in range(TRACE_MAX_RECORDS + 5)]
    write_signed(path, key, "c0", records, number=False)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    reading = read_trace(path, key, "c0")
    grew_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert reading.launch_count == TRACE_MAX_RECORDS and "more than" in reading.findings[0]
    assert grew_kib < 64 * 1024  # running totals, not a list of records
    big = tmp_path / "big.trace.jsonl"
    with big.open("wb") as fh:
        fh.truncate(65 << 20)  # sparse: over the byte cap
    assert "cap" in read_trace(big, key, "c0").findings[0]


def test_diagnostics_are_deduplicated_and_coerced(tmp_path):
    diag = {"severity": "error", "kind": "gdram_oob_write", "message": "write past c", "kernel": "k", "file": "k.mlu",
            "line": 12}
    summary = summarise_trace([_launch(diagnostics=[diag, diag, {"severity": "bogus", "kind": 3}])], 1, "x")
    assert [d.kind for d in summary.diagnostics] == ["gdram_oob_write", "3"]
    assert summary.diagnostics[0].location.line == 12 and summary.diagnostics[1].severity == "error"


def test_no_trace_means_no_summary(tmp_path):
    reading = read_trace(tmp_path / "missing.jsonl", new_key(), "c0")
    assert not reading.present and reading.findings == [] and reading.summary(1, "mlu370-x8") is None
    assert summarise_trace([], 1, "mlu370-x8") is None


def test_a_symlinked_trace_is_not_followed(tmp_path):
    key = new_key()
    write_signed(tmp_path / "secret", key, "c0", [_launch()])
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "c0.trace.jsonl").symlink_to(tmp_path / "secret")
    reading = read_trace(tmp_path / "out" / "c0.trace.jsonl", key, "c0", root=tmp_path)
    assert reading.launch_count == 0 and "cannot be read" in reading.findings[0]


def test_requirements_of_the_matmul_stages():
    spec = load_assignment("matmul")
    single = summarise_trace([_launch(builtins={"__bang_matmul": 1})], 1, "mlu370-x8")
    multi = summarise_trace([_launch(cores=16, builtins={"__bang_matmul": 4, "__memcpy_async": 8})], 1, "mlu370-x8")
    union = summarise_trace([_launch(cores=16, func_type="UNION1", sram=65536,
                                     builtins={"__bang_matmul": 4})], 1, "mlu370-x8")

    def passed(stage, trace):
        return {r.name: r.passed for r in check_requirements(spec.stage(stage).requirements, trace, True)}

    assert passed("vector", single) == {"uses_bang_matmul": True}
    assert passed("multicore", single) == {"uses_bang_matmul": True, "many_cores": False}
    assert passed("pipeline", multi) == {"uses_bang_matmul": True, "many_cores": True, "async_copies": True}
    assert passed("sram_union", multi) == {"union_launch": False, "uses_sram": False}
    assert passed("sram_union", union) == {"union_launch": True, "uses_sram": True}
    assert passed("vector", None) == {"uses_bang_matmul": False}
    detail = check_requirements(spec.stage("multicore").requirements, single, True)[1].detail
    assert detail == "ran on 1 core(s)"


def test_requirements_are_not_judged_without_a_trace_backend():
    spec = load_assignment("matmul")
    results = check_requirements(spec.stage("multicore").requirements, None, trace_available=False)
    assert all(r.passed and "not checked" in r.detail for r in results)


def _timeline(events: list, lanes: list | None = None, kinds: list | None = None) -> dict:
    return {"unit": "cycles", "clock_mhz": 1000, "makespan": 5000, "merged_within": 0, "union": 0, "cores": 16,
            "lanes": lanes or ["issue", "compute", "io", "move"],
            "kinds": kinds or ["scalar", "load", "store", "move", "vector", "tensor", "sync", "barrier"],
            "events": events}


def test_the_timeline_of_the_longest_launch_is_kept(tmp_path):
    key = new_key()
    short = {**_launch("pad", 1.0), "timeline": _timeline([[0, 2, 1, 0, 100]])}
    main = {**_launch("sigmoid", 9.0), "timeline": _timeline([[0, 2, 1, 0, 700], [0, 1, 4, 700, 900],
                                                              [3, 2, 2, 900, 5000]])}
    repeat = _launch("sigmoid", 9.0)  # later launches of a call carry none
    reading = read_trace(write_signed(tmp_path / "t.trace.jsonl", key, "t", [short, main, repeat]), key, "t")
    summary = reading.summary(invocations=1, device="mlu370-x8")
    assert summary is not None and summary.timeline is not None
    timeline = summary.timeline
    assert timeline.kernel == "sigmoid" and timeline.makespan_cycles == 5000
    assert [(e.core, e.lane, e.kind) for e in timeline.events] == [(0, "io", "load"), (0, "compute", "vector"),
                                                                  (3, "io", "store")]


def test_a_malformed_timeline_is_dropped_and_unknown_names_are_skipped():
    from grader.orchestration.trace_summary import read_timeline

    for bad in ([[0, 9, 1, 0, 10]], [[16, 2, 1, 0, 10]], [[0, 2, 1, 10, 5]], [[0, 2, 1, 0.5, 10]], [[0, 2, 1]],
                [[0, 2, True, 0, 10]], "events"):
        assert read_timeline(_timeline(bad), "k") is None, bad  # type: ignore[arg-type]
    odd = read_timeline(_timeline([[0, 0, 0, 0, 10], [0, 1, 1, 0, 10]], lanes=["warp", "io"], kinds=["x", "load"]),
                        "k")
    assert odd is not None and [(e.lane, e.kind) for e in odd.events] == [("io", "load")]
    capped = read_timeline(_timeline([[0, 2, 1, i, i + 1] for i in range(5000)]), "k")
    assert capped is not None and len(capped.events) == TIMELINE_MAX_EVENTS


def test_torch_operators_count_in_the_stage_time_as_their_own_row(tmp_path):
    """Operators the replay ran on the device (issue 36): their modelled time joins the launches', as the time
    split's torch_ops row, and they are never launches (a call of operators alone launched no kernel)."""
    from grader.checks.integrity import CallIntegrity, HostFacts

    key = new_key()
    op = {"record": "op", "op": "aten::clamp.out", "where": "ops.py:7", "allowed": True, "bytes": 8192,
          "modelled_time_us": 30.03}
    records = [op, {"record": "launch", **_launch(time_us=10.0), "work": {}}, {**op, "op": "aten::copy_"}]
    records = [{**r, "call": "c0", "seq": n} for n, r in enumerate(records)]
    checker = CallIntegrity("c0", HostFacts(device="mlu370-x8", profile=None, symbols=None), None, 4)
    reading = read_trace(write_signed(tmp_path / "c0.trace.jsonl", key, "c0", records, number=False), key, "c0",
                         checker)
    assert reading.findings == [] and checker.findings == [] and reading.launch_count == 1
    summary = reading.summary(invocations=1, device="mlu370-x8")
    assert summary is not None and summary.modelled_time_us == 70.06
    assert summary.time_split_us["torch_ops"] == 60.06 and summary.time_split_us["io"] == 5.0
    assert [(o.op, o.where, o.modelled_us) for o in summary.torch_ops] == [("aten::clamp.out", "ops.py:7", 30.03),
                                                                          ("aten::copy_", "ops.py:7", 30.03)]
    only_ops = read_trace(write_signed(tmp_path / "c1.trace.jsonl", key, "c1", [{**op, "call": "c1", "seq": 0}],
                                       number=False), key, "c1")
    assert only_ops.launch_count == 0 and only_ops.summary(invocations=1, device="mlu370-x8") is None
    forged = [{**op, "call": "c2", "seq": 0, "modelled_time_us": -5.0, "bytes": "lots"}]
    checker = CallIntegrity("c2", HostFacts(device="mlu370-x8", profile=None, symbols=None), None, 4)
    read_trace(write_signed(tmp_path / "c2.trace.jsonl", key, "c2", forged, number=False), key, "c2", checker)
    assert len(checker.findings) == 2
