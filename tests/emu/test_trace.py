"""The per-launch JSON Lines trace: exactly the fields of DESIGN.md, with consistent values (the signing itself:
test_signed_trace.py)."""

from __future__ import annotations

from emu_helpers import PROGRAMS, read_trace, run

FIELDS = {"record", "call", "seq", "profile", "work", "kernel", "dim", "func_type", "device", "modelled_time_us", "time_split_us", "bytes_moved",
          "onchip_peak_bytes", "onchip_capacity_bytes", "builtin_counts", "cores_used", "diagnostics",
          "written_bytes", "timeline"}  # timeline: the first two launches of a call (test_timeline.py)


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
    assert (launch["record"], launch["call"], launch["seq"]) == ("launch", "", 0)  # standalone: no call
    # the counted work the host checks against the output (sigmoid: n in, n out, n through the activation)
    work = launch["work"]
    assert work["gdram_read_bytes"] == work["gdram_write_bytes"] == 4 * n
    assert work["vector_elements"] == {"__bang_active_sigmoid": n} and work["tensor_macs"] == 0
    assert work["scalar_loads"]["gdram"] == work["scalar_stores"]["gdram"] == 0 and work["cores_used"] == 4


def test_profile_is_the_device_table_entry(build, tmp_path):
    from bang_emu import devices

    for device in devices.names():
        trace = tmp_path / f"{device}.jsonl"
        run(build(PROGRAMS / "sigmoid_lab.mlu"), 4096, 1, env={"BANG_EMU_TRACE": str(trace), "BANG_EMU_DEVICE": device})
        (launch,) = read_trace(trace)
        assert launch["device"] == device
        assert list(launch["profile"]) == list(devices.load()[device])  # key for key, in file order
        assert launch["profile"] == devices.load()[device]


def test_scalar_gdram_accesses_and_tensor_macs_are_counted(tmp_path):
    from emu_helpers import cncc

    src = tmp_path / "work.mlu"
    src.write_text(
        "#include <bang.h>\n"
        "__mlu_entry__ void scalar_copy(float *dst, const float *src, int n) {\n"
        "  for (int i = 0; i < n; ++i) dst[i] = src[i] * 2.0f;\n"
        "}\n"
        "__mlu_entry__ void mm(float *dst) {\n"
        "  __nram__ float a[16 * 64]; __nram__ float c[16 * 32]; __wram__ float w[64 * 32];\n"
        "  __bang_write_zero(a, 16 * 64);\n"
        "  __bang_matmul(c, a, w, 16, 64, 32);\n"
        "  __memcpy(dst, c, sizeof(c), NRAM2GDRAM);\n"
        "}\n"
        "int main() { float *s, *d; cnrtMalloc((void **)&s, 400); cnrtMalloc((void **)&d, 4096);\n"
        "  cnrtDim3_t one = {1, 1, 1};\n"
        "  scalar_copy<<<one, CNRT_FUNC_TYPE_BLOCK, NULL>>>(d, s, 100); mm<<<one, CNRT_FUNC_TYPE_BLOCK, NULL>>>(d);\n"
        "  return (int)cnrtQueueSync(NULL); }\n")
    assert cncc(src, "-o", tmp_path / "work").returncode == 0
    trace = tmp_path / "t.jsonl"
    assert run(tmp_path / "work", env={"BANG_EMU_TRACE": str(trace)}).returncode == 0
    scalar, mm = read_trace(trace)
    w = scalar["work"]
    assert w["scalar_loads"]["gdram"] == w["scalar_stores"]["gdram"] == 100
    assert w["gdram_read_bytes"] == w["gdram_write_bytes"] == 400 and w["gdram_dma_read_bytes"] == 0
    assert scalar["builtin_counts"]["scalar_load_gdram"] == 100
    assert mm["work"]["tensor_macs"] == 16 * 64 * 32 and mm["work"]["gdram_write_bytes"] == 16 * 32 * 4
    assert mm["work"]["vector_elements"] == {"__bang_write_zero": 16 * 64}
    assert [r["seq"] for r in (scalar, mm)] == [0, 1]


def test_union_launch_trace(build, tmp_path):
    trace = tmp_path / "t.jsonl"
    run(build(PROGRAMS / "features.mlu"), env={"BANG_EMU_TRACE": str(trace)})
    union = [t for t in read_trace(trace) if t["func_type"] == "UNION2"]
    assert union and union[0]["kernel"] == "cluster_sum" and union[0]["cores_used"] == 8
    assert union[0]["builtin_counts"]["__sync_cluster"] == 10  # 4 cores + the memory core, 2 clusters


def test_verbose_launch_lines_are_labelled_modelled(build):
    proc = run(build(PROGRAMS / "sigmoid_lab.mlu"), 4096, 1, env={"BANG_EMU_VERBOSE": "1"})
    assert "us modelled (mlu370-x8)" in proc.stderr and "s wall" in proc.stderr
