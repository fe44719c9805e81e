"""The per-launch JSON Lines trace: exactly the fields of DESIGN.md, with consistent values."""

from __future__ import annotations

from emu_helpers import PROGRAMS, read_trace, run

FIELDS = {"kernel", "dim", "func_type", "device", "modelled_time_us", "time_split_us", "bytes_moved",
          "onchip_peak_bytes", "onchip_capacity_bytes", "builtin_counts", "cores_used", "diagnostics",
          "written_bytes"}


def test_trace_fields_and_values(build, tmp_path):
    trace = tmp_path / "t.jsonl"
    n = 100000
    proc = run(build(PROGRAMS / "sigmoid_lab.mlu"), n, 4, env={"BANG_EMU_TRACE": str(trace)})
    assert "PASSED" in proc.stdout
    (launch,) = read_trace(trace)
    assert set(launch) == FIELDS
    assert launch["kernel"] == "bang_sigmoid_kernel<T>"
    assert launch["dim"] == [4, 1, 1] and launch["func_type"] == "BLOCK" and launch["device"] == "mlu370-x8"
    assert set(launch["time_split_us"]) == {"scalar", "vector", "tensor", "io", "wait"}
    assert launch["modelled_time_us"] > launch["time_split_us"]["vector"] > 0
    assert launch["bytes_moved"] == {"GDRAM2NRAM": 4 * n, "NRAM2GDRAM": 4 * n}
    assert launch["onchip_peak_bytes"] == {"nram": 4 * 64 * 1024, "wram": 0, "sram": 0}
    assert launch["onchip_capacity_bytes"] == {"nram": 786432, "wram": 1048576, "sram": 4194304}
    assert launch["builtin_counts"]["__bang_active_sigmoid"] == 4 and launch["builtin_counts"]["__memcpy"] == 8
    assert launch["cores_used"] == 4 and launch["diagnostics"] == []
    sizes = sorted((w["size"], w["written"]) for w in launch["written_bytes"])
    assert sizes == [(4 * n, 0), (4 * n, 4 * n)]


def test_union_launch_trace(build, tmp_path):
    trace = tmp_path / "t.jsonl"
    run(build(PROGRAMS / "features.mlu"), env={"BANG_EMU_TRACE": str(trace)})
    union = [t for t in read_trace(trace) if t["func_type"] == "UNION2"]
    assert union and union[0]["kernel"] == "cluster_sum" and union[0]["cores_used"] == 8
    assert union[0]["builtin_counts"]["__sync_cluster"] == 10  # 4 cores + the memory core, 2 clusters


def test_verbose_launch_lines_are_labelled_modelled(build):
    proc = run(build(PROGRAMS / "sigmoid_lab.mlu"), 4096, 1, env={"BANG_EMU_VERBOSE": "1"})
    assert "us modelled (mlu370-x8)" in proc.stderr and "s wall" in proc.stderr
