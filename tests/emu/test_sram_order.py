"""Cluster-shared SRAM is ordered by the cluster's barriers, not by the order the host runs the cluster's threads
in (sandbox/bang_emu/runtime/sram.cpp). The program delays one core in real time only (usleep: no modelled
cycles), which used to decide what the others read."""

from __future__ import annotations

from emu_helpers import PROGRAMS, read_trace, run


def test_a_store_issued_before_another_cores_refill_reads_the_old_tile(build) -> None:
    # mlu-ops' 5-stage pipelines: every core stores the shared tile and refills it right behind; a core that the
    # host runs late must still store the tile of this step (on the card the refill lands after the stores)
    proc = run(build(PROGRAMS / "sram_order.mlu"), "refill")
    assert "sync=0 mismatches=0 of 4096" in proc.stdout, proc.stdout + proc.stderr
    assert "sram-race" not in proc.stderr


def test_reads_after_sync_cluster_see_the_tile_core_0_loaded(build) -> None:
    proc = run(build(PROGRAMS / "sram_order.mlu"), "synced")
    assert "sync=0 mismatches=0 of 1024" in proc.stdout, proc.stdout + proc.stderr


def test_reading_another_cores_sram_write_without_sync_cluster_is_a_race(build, tmp_path) -> None:
    # the readers run after core 0's load in real time and in modelled time, but nothing orders them: reported,
    # and the reads saw the SRAM as the last barrier left it, not core 0's tile
    trace = tmp_path / "t.jsonl"
    proc = run(build(PROGRAMS / "sram_order.mlu"), "unsynced", env={"BANG_EMU_TRACE": str(trace)})
    assert "sync=0 " not in proc.stdout and "mismatches=0 " not in proc.stdout, proc.stdout
    [diag] = read_trace(trace)[0]["diagnostics"]
    assert (diag["severity"], diag["kind"]) == ("error", "sram-race")
    assert "SRAM2NRAM" in diag["message"] and "GDRAM2SRAM on core 0 of cluster 0" in diag["message"]
    assert diag["file"].endswith("sram_order.mlu")
    src = (PROGRAMS / "sram_order.mlu").read_text().splitlines()
    assert "SRAM2NRAM" in src[diag["line"] - 1]


def test_a_core_streaming_its_own_sram_without_barriers_sees_its_writes(build) -> None:
    # 1200 writes per core and no barrier: beyond the writes the emulator holds per interval (it lands them
    # early); every read still sees its own core's write right before it
    proc = run(build(PROGRAMS / "sram_order.mlu"), "stream")
    assert "sync=0 mismatches=0 of 1228800" in proc.stdout, proc.stdout + proc.stderr
    assert "sram-race" not in proc.stderr


def test_scalar_reads_of_sram_after_a_copy_into_it_see_the_copy(build) -> None:
    # the SRAM range scalar code used is kept among the recently classified ranges while it reads GDRAM; every
    # copy into SRAM drops it, so the next read lands the held tile first (1200 steps per core, each one checked)
    proc = run(build(PROGRAMS / "sram_order.mlu"), "scalar")
    assert "sync=0 mismatches=0 of 4800" in proc.stdout, proc.stdout + proc.stderr
    assert "sram-race" not in proc.stderr
