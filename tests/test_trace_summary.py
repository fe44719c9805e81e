"""Emulator trace -> TraceSummary (host side, untrusted input) and the stage requirements judged from it."""

from __future__ import annotations

import json
from pathlib import Path

from grader.checks.requirements import check_requirements
from grader.orchestration.trace_summary import read_trace, summarise_trace
from grader.spec import load_assignment


def _launch(kernel: str = "matmul_kernel", time_us: float = 10.0, cores: int = 1, func_type: str = "BLOCK",
            builtins: dict | None = None, sram: int = 0, diagnostics: list | None = None) -> dict:
    return {"kernel": kernel, "dim": [cores, 1, 1], "func_type": func_type, "device": "mlu370-x8",
            "modelled_time_us": time_us, "time_split_us": {"io": time_us / 2, "tensor": time_us / 2},
            "bytes_moved": {"GDRAM2NRAM": 4096}, "onchip_peak_bytes": {"nram": 1024, "wram": 512, "sram": sram},
            "onchip_capacity_bytes": {"nram": 786432}, "builtin_counts": builtins or {}, "cores_used": cores,
            "diagnostics": diagnostics or []}


def write_trace(path: Path, records: list, junk: bool = False) -> Path:
    lines = [json.dumps(r) for r in records]
    if junk:
        lines.insert(1, "{not json")
        lines.append('"a string, not an object"')
    path.write_text("\n".join(lines) + "\n")
    return path


def test_summary_is_per_invocation_and_names_the_main_kernel(tmp_path):
    # Two invocations (checked call + one timed repeat), each with a small prologue kernel and the main one.
    records = [_launch("pad", 1.0), _launch("matmul_kernel", 30.0, cores=16, builtins={"__bang_matmul": 8})] * 2
    trace = read_trace(write_trace(tmp_path / "p1.trace.jsonl", records, junk=True))
    assert len(trace) == 4
    summary = summarise_trace(trace, invocations=2, device="mlu370-x8")
    assert summary is not None
    assert summary.kernel.startswith(("matmul_kernel", "pad")) and "(+1 more)" in summary.kernel
    assert summary.modelled_time_us == 31.0 and summary.launches == 2
    assert summary.builtin_counts == {"__bang_matmul": 8} and summary.cores_used == 16
    assert summary.bytes_moved == {"GDRAM2NRAM": 8192} and summary.dim == (16, 1, 1)


def test_diagnostics_are_deduplicated_and_coerced(tmp_path):
    diag = {"severity": "error", "kind": "gdram_oob_write", "message": "write past c", "kernel": "k", "file": "k.mlu",
            "line": 12}
    summary = summarise_trace([_launch(diagnostics=[diag, diag, {"severity": "bogus", "kind": 3}])], 1, "x")
    assert [d.kind for d in summary.diagnostics] == ["gdram_oob_write", "3"]
    assert summary.diagnostics[0].location.line == 12 and summary.diagnostics[1].severity == "error"


def test_no_trace_means_no_summary(tmp_path):
    assert read_trace(tmp_path / "missing.jsonl") == []
    assert summarise_trace([], 1, "mlu370-x8") is None


def test_a_symlinked_trace_is_not_followed(tmp_path):
    (tmp_path / "secret").write_text(json.dumps(_launch()) + "\n")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "c0.trace.jsonl").symlink_to(tmp_path / "secret")
    assert read_trace(tmp_path / "out" / "c0.trace.jsonl", root=tmp_path) == []


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
