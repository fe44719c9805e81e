"""devices.json, the one device table: read by the host (bang_emu.devices) and compiled into the runtime."""

from __future__ import annotations

import json

import pytest
from bang_emu import devices


def test_table_has_every_device_with_the_same_figures():
    table = devices.load()
    assert list(table) == ["mlu370-x8", "mlu370-x4", "mlu370-m8", "mlu270"]
    assert devices.default_device() == "mlu370-x8"
    keys = list(table["mlu370-x8"])
    assert all(list(entry) == keys for entry in table.values())
    for key in ("clock_mhz", "gdram_gbps", "dma_efficiency", "vector_bytes_per_cycle", "tensor_ops_per_cycle_fp32",
                "tensor_ops_per_cycle_fp16", "launch_overhead_us", "cores", "scalar_load_gdram"):
        assert key in keys


def test_figures_are_the_calibrated_ones():
    """The values profiles.cpp had before the table existed: modelled times must not move."""
    x8, x4, m8, m270 = (devices.load()[n] for n in ("mlu370-x8", "mlu370-x4", "mlu370-m8", "mlu270"))
    assert (x8["clock_mhz"], x8["gdram_gbps"], x8["dma_efficiency"], x8["launch_overhead_us"]) == (1000, 307.2, 0.85, 30)
    assert (x8["scalar_load_gdram"], x8["scalar_load_nram"], x8["scalar_load_sram"], x8["scalar_load_stack"]) == (
        300, 15, 20, 2)
    assert (x8["tensor_ops_per_cycle_fp32"], x8["tensor_ops_per_cycle_fp16"], x8["tensor_ops_per_cycle_int"]) == (
        768, 3072, 4096)
    assert (x8["barrier_cycles"], x8["io_latency_cycles"], x8["cores"], x8["nram_bytes"]) == (600, 700, 16, 786432)
    assert (x4["scalar_load_gdram"], x4["launch_overhead_us"], x4["dma_efficiency"]) == (360, 50, 0.95)
    assert (m8["clock_mhz"], m8["gdram_gbps"]) == (1300, 409.6)
    assert (m270["arch"], m270["gdram_gbps"], m270["nram_bytes"], m270["sram_bytes"]) == (270, 102.4, 524288, 2097152)
    assert (m270["cluster_gbps"], m270["tensor_ops_per_cycle_fp32"], m270["tensor_ops_per_cycle_fp16"]) == (
        102.4 / 4 * 2, 512, 2048)


def test_load_returns_copies():
    devices.load()["mlu370-x8"]["clock_mhz"] = 1
    assert devices.load()["mlu370-x8"]["clock_mhz"] == 1000


def test_cpp_header_carries_every_figure_exactly():
    header = devices.cpp_header()
    for name, entry in devices.load().items():
        assert f'"{name}"' in header
        for key, value in entry.items():
            assert f'{{"{key}", {float(value)!r}}}' in header


def test_malformed_tables_are_refused(tmp_path, monkeypatch):
    doc = json.loads(devices.DEVICES_JSON.read_text())
    doc["devices"]["mlu270"]["clock_mhz"] = "fast"
    bad = tmp_path / "devices.json"
    bad.write_text(json.dumps(doc))
    monkeypatch.setattr(devices, "DEVICES_JSON", bad)
    devices._document.cache_clear()
    try:
        with pytest.raises(ValueError, match="finite number"):
            devices.load()
    finally:
        monkeypatch.undo()
        devices._document.cache_clear()


def _refused(tmp_path, monkeypatch, doc: dict, match: str) -> None:
    bad = tmp_path / "devices.json"
    bad.write_text(json.dumps(doc))
    monkeypatch.setattr(devices, "DEVICES_JSON", bad)
    devices._document.cache_clear()
    try:
        with pytest.raises(ValueError, match=match):
            devices.load()
    finally:
        monkeypatch.undo()
        devices._document.cache_clear()


def test_on_chip_sizes_are_the_architectures_and_the_driver_reads_them(tmp_path, monkeypatch):
    """One place for NRAM/WRAM/SRAM: cncc-emu's limits are the table's architectures, and a device whose sizes
    differ from its architecture's is refused when the table loads."""
    from bang_emu import driver

    archs = devices.architectures()
    assert driver.ARCH_CAPACITY_KB["mtp_372"] == {driver._N: 768, driver._W: 1024, driver._S: 4096}
    assert driver.ARCH_CAPACITY_KB["mtp_270"] == {driver._N: 512, driver._W: 1024, driver._S: 2048}
    assert set(driver.ARCH_CAPACITY_KB) == set(archs) and driver.ARCH_NUMBER["mtp_592"] == 592
    doc = json.loads(devices.DEVICES_JSON.read_text())
    doc["devices"]["mlu270"]["sram_bytes"] = 4194304
    _refused(tmp_path, monkeypatch, doc, "mlu270.sram_bytes differs from its architecture mtp_270")
    doc = json.loads(devices.DEVICES_JSON.read_text())
    doc["devices"]["mlu270"]["arch"] = 271
    _refused(tmp_path, monkeypatch, doc, "no architecture")
