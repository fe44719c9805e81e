"""The cost model: notifiers report the modelled time, tasks are scheduled onto the card's cores, async
pipelines overlap, and the device profile changes the figures."""

from __future__ import annotations

import re

import pytest
from emu_helpers import PROGRAMS, cncc, read_trace, run


def modelled_us(exe, *args, env=None) -> float:
    proc = run(exe, *args, env=env)
    assert proc.returncode == 0, proc.stderr
    return float(re.search(r"us=([\d.]+)", proc.stdout).group(1))


def test_block_tasks_are_scheduled_onto_the_16_cores(build):
    exe = build(PROGRAMS / "costs.mlu")
    one, sixteen, thirtytwo = (modelled_us(exe, "vector_only", n) for n in (1, 16, 32))
    assert sixteen == pytest.approx(one, rel=1e-3)  # 16 tasks run side by side
    overhead = 30.0  # launch overhead of mlu370-x8 (README)
    assert thirtytwo - overhead == pytest.approx(2 * (one - overhead), rel=1e-3)  # two rounds


def test_async_pipeline_overlaps_dma_with_compute(build):
    exe = build(PROGRAMS / "costs.mlu")
    serial, piped = modelled_us(exe, "serial", 1), modelled_us(exe, "pipelined", 1)
    assert piped < 0.8 * serial


def test_notifiers_report_the_traced_modelled_time(build, tmp_path):
    trace = tmp_path / "t.jsonl"
    proc = run(build(PROGRAMS / "sigmoid_lab.mlu"), 100000, 4, env={"BANG_EMU_TRACE": str(trace)})
    fields = dict(kv.split("=") for kv in proc.stdout.split()[:4])
    launch = read_trace(trace)[0]
    assert float(fields["duration_us"]) == pytest.approx(launch["modelled_time_us"], rel=1e-5)
    assert float(fields["elapsed_ms"]) == pytest.approx(launch["modelled_time_us"] / 1000, rel=1e-5)


@pytest.mark.parametrize("device", ["mlu370-x8", "mlu370-x4", "mlu370-m8", "mlu270"])
def test_device_profiles_are_selectable(build, tmp_path, device):
    trace = tmp_path / "t.jsonl"
    run(build(PROGRAMS / "sigmoid_lab.mlu"), 1 << 20, 16, env={"BANG_EMU_TRACE": str(trace), "BANG_EMU_DEVICE": device})
    launch = read_trace(trace)[0]
    assert launch["device"] == device
    if device == "mlu270":
        assert launch["onchip_capacity_bytes"]["nram"] == 512 * 1024


def test_io_bound_kernel_is_slower_on_the_narrower_memory_bus(build, tmp_path):
    times = {}
    for device in ("mlu370-x8", "mlu270"):
        trace = tmp_path / f"{device}.jsonl"
        run(build(PROGRAMS / "sigmoid_lab.mlu"), 1 << 22, 16, env={"BANG_EMU_TRACE": str(trace), "BANG_EMU_DEVICE": device})
        times[device] = read_trace(trace)[0]["modelled_time_us"]
    assert times["mlu270"] > 2 * times["mlu370-x8"]  # 102.4 GB/s against 307.2 GB/s


def test_emu_device_flag_sets_the_default_and_the_environment_overrides(tmp_path):
    exe = tmp_path / "s270"
    assert cncc("--emu-device=mlu270", PROGRAMS / "sigmoid_lab.mlu", "-o", exe).returncode == 0
    trace = tmp_path / "t.jsonl"
    run(exe, 4096, 1, env={"BANG_EMU_TRACE": str(trace)})
    run(exe, 4096, 1, env={"BANG_EMU_TRACE": str(trace), "BANG_EMU_DEVICE": "mlu370-x4"})
    assert [t["device"] for t in read_trace(trace)] == ["mlu270", "mlu370-x4"]


def test_unknown_device_falls_back_with_a_warning(build, tmp_path):
    proc = run(build(PROGRAMS / "sigmoid_lab.mlu"), 4096, 1, env={"BANG_EMU_DEVICE": "mlu999"})
    assert "unknown device 'mlu999'" in proc.stderr and "PASSED" in proc.stdout
