"""The calibration benchmark's lab mode (`benchmarks/emu_calibration.py --lab`): the lab's own unchanged MatMul
programs, read from a fetched mirror as tests/emu/test_cncc_compat.py reads them (skipped visibly without it).

The table must carry the cost model's figures: the modelled time is the trace's launch record, which the
program's own notifier line (an independent path through the runtime) must agree with; a ratio only where the
program runs at the published shape; a kernel the emulator stops is shown stopped, with its diagnostic.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bang_emu import calibration as cal
from emu_helpers import read_trace
from test_cncc_compat import KOLP, mirror

SMALL = ["02", "03"]  # the copy's fastest stages (seconds each); 01 and 04-06 are the benchmark's business


@pytest.fixture(scope="module")
def kolp_lab(tmp_path_factory) -> tuple[Path, list[cal.LabResult]]:
    if not mirror(KOLP).is_dir():
        pytest.skip(f"no mirror of {KOLP} at {mirror(KOLP)} (fetch it to run this test)")
    work = tmp_path_factory.mktemp("lab-calibration")
    folder = cal.lab_folder(mirror(KOLP).parent, work)  # the mirror folder, as the command line takes it
    return work, cal.run_lab(folder, SMALL, work)


def _row(table: str, number: str) -> str:
    return next(line for line in table.splitlines() if line.startswith(f"{number} "))


def test_lab_table_shows_the_models_times(kolp_lab):
    work, results = kolp_lab
    assert [r.stage.number for r in results] == SMALL
    table = cal.format_lab_table(results, KOLP)
    for r in results:
        (launch,) = read_trace(work / f"{r.stage.number}.trace.jsonl")
        assert r.modelled_ms == launch["modelled_time_us"] / 1000.0
        # the program's own "MLU Time taken: %.3f ms" (cnrtNotifierElapsedTime) says the same
        assert r.printed_ms == pytest.approx(r.modelled_ms, abs=6e-4)
        assert r.verdict == f"{r.stage.number}PASSED", r.emu.stdout[-2000:]
        assert r.native.returncode == 0 and r.native_host_s >= 0
        row = _row(table, r.stage.number).split()
        assert row[1] == "128,256,256"  # this copy's own size: K = 256, not the published 128 ...
        assert float(row[2]) == pytest.approx(r.modelled_ms, abs=6e-4)
        assert row[4] == f"{r.published_ms:.3f}" and row[5] == "-"  # ... so no ratio against the published time
        assert float(row[6]) == pytest.approx(r.emu.wall_s, abs=0.006)
    # 02 and 03 run at one shape, as published: their order compares (03 faster)
    assert cal.order_pairs(results) == (1, 1)
    assert results[1].modelled_ms < results[0].modelled_ms


def test_command_line_lab_mode_writes_the_same_figures(kolp_lab, tmp_path, capsys):
    _, results = kolp_lab
    out = tmp_path / "lab.json"
    assert cal.main(["--lab", str(mirror(KOLP).parent), "--stages", "03", "--json", str(out)]) == 0
    (row,) = json.loads(out.read_text())
    assert row["stage"] == "03" and row["verdict"] == "03PASSED" and row["shape"] == [128, 256, 256]
    assert row["modelled_ms"] == results[1].modelled_ms  # the model is deterministic: same launch, same time
    assert "The lab's unchanged programs" in capsys.readouterr().out


def _fake(tmp_path: Path, number: str, stdout: str, launch: dict, source_text: str) -> cal.LabResult:
    stage = next(s for s in cal.STAGES if s.number == number)
    src = tmp_path / f"{number}_lab.mlu"
    src.write_text(source_text)
    emu = cal.ProgramRun(0, stdout, "", 3.0, 1.0, [launch])
    native = cal.ProgramRun(0, stdout, "", 2.5, 0.5)
    return cal.LabResult(stage, src, "mlu370-x8", emu, native, cal.prints_microseconds(src))


def test_ratio_at_the_published_shape_and_notifier_microseconds(tmp_path):
    # the 2024 answers time 02-06 with cnrtNotifierDuration and print its microseconds under an "ms" label
    r = _fake(tmp_path, "03", "M = 128, N = 256, K = 128\nMLU Time taken: 48.257 ms\n03PASSED\n",
              {"modelled_time_us": 48.256667, "diagnostics": []}, "cnrtNotifierDuration(st, et, &t);")
    assert r.printed_ms == pytest.approx(0.048257)
    assert r.ratio == pytest.approx(0.048256667 / 0.050)
    assert r.native_host_s == 2.0
    row = _row(cal.format_lab_table([r], "lab"), "03").split()
    assert row[2:6] == ["0.048", "0.048", "0.050", "0.97"]


def test_stopped_kernel_is_shown_with_its_diagnostic(tmp_path):
    race = {"severity": "error", "kind": "async-hazard", "message": "__memcpy_async reads ... still in flight",
            "file": "/x/06_vector_sram_unions_pipe5.mlu", "line": 92}
    r = _fake(tmp_path, "06", "M = 8192, N = 512, K = 512\n", {"modelled_time_us": 56.19, "diagnostics": [race]}, "")
    assert r.modelled_ms is None and r.ratio is None
    assert r.verdict == "stopped: async-hazard at line 92"
    table = cal.format_lab_table([r], "lab")
    assert _row(table, "06").split()[2] == "(0.056)"
    assert "06: the emulator stopped the kernel: async-hazard: __memcpy_async reads" in table
    assert "06_vector_sram_unions_pipe5.mlu:92" in table
