"""Checks real hardware never gives: each one triggered by a small faulty kernel, reported clearly, recorded in
the trace, returned by cnrtQueueSync/cnrtGetLastError, and survived by the host process."""

from __future__ import annotations

import re

import pytest
from emu_helpers import PROGRAMS, read_trace, run

ERROR_LINE = re.compile(r"^bang-emu: error: (?P<kind>[a-z-]+): (?P<msg>.*) \(kernel (?P<kernel>\w+), (?P<where>.*)\)$",
                        re.M)


def source_line(needle: str) -> int:
    for i, line in enumerate((PROGRAMS / "faults.mlu").read_text().splitlines(), start=1):
        if needle in line:
            return i
    raise AssertionError(needle)


CASES = [
    ("read_past_end", "gdram-out-of-bounds", "s += src[i]", ["4 B past the end of GDRAM buffer cnrtMalloc#1"]),
    ("dma_write_past_end", "gdram-out-of-bounds", "(n + 64) * sizeof", ["256 B past its end", "__memcpy"]),
    ("nram_index_overflow", "onchip-out-of-bounds", "buf[i] = 1.0f", ["__nram__ array 'buf' of 4096 B"]),
    ("builtin_length_overflow", "onchip-out-of-bounds", "__bang_add(a, a, b, 2 * N)",
     ["__bang_add", "past the end of NRAM array 'a'"]),
    ("wram_scalar", "wram-scalar-access", "dst[0] = w[3]", ["scalar read", "WRAM"]),
    ("read_before_sync", "async-hazard", "__bang_active_sigmoid(buf, buf, n);", ["still in flight", "__sync_io()"]),
    ("scalar_read_before_sync", "async-hazard", "dst[0] = buf[5]", ["scalar code reads"]),
    ("overwrite_source_before_sync", "async-hazard", "__bang_write_zero(buf, N);  // overwrites",
     ["writes", "copy from that memory"]),
    ("mpu_returns_before_barrier", "barrier-deadlock", "__sync_cluster();", ["only 4 arrived", "memory core"]),
    ("strided_wram_copy", "invalid-memcpy-direction", "WRAM2NRAM, 128, 128, 3", ["WRAM2NRAM"]),
    ("wrong_direction", "invalid-address", "__memcpy(buf, src, n * sizeof(float), NRAM2GDRAM)",
     ["is GDRAM buffer", "not NRAM"]),
    ("wild_pointer", "invalid-address", "dst[0] = p[0]", ["unmapped memory at 0x400"]),
    ("divide_by_zero", "arithmetic-exception", "dst[0] = n / zero", ["division by zero"]),
]


@pytest.mark.parametrize(("case", "kind", "line_text", "phrases"), CASES, ids=[c[0] for c in CASES])
def test_faulty_kernel_is_stopped_with_a_clear_error(build, tmp_path, case, kind, line_text, phrases):
    exe = build(PROGRAMS / "faults.mlu")
    trace = tmp_path / "t.jsonl"
    proc = run(exe, case, env={"BANG_EMU_TRACE": str(trace)}, timeout=60)
    assert proc.returncode == 0, proc.stderr  # the host process survives
    errors = list(ERROR_LINE.finditer(proc.stderr))
    assert len(errors) == 1, proc.stderr
    err = errors[0]
    assert err["kind"] == kind and err["kernel"] == case
    assert err["where"] == f"{PROGRAMS / 'faults.mlu'}:{source_line(line_text)}"
    for phrase in phrases:
        assert phrase in err["msg"]
    assert f"case={case} sync=100700 last=100700" in proc.stdout
    assert "recovered=1" in proc.stdout  # the next launch works
    launches = read_trace(trace)
    diag = launches[0]["diagnostics"][0]
    assert (diag["severity"], diag["kind"], diag["kernel"]) == ("error", kind, case)
    assert diag["line"] == source_line(line_text) and diag["file"].endswith("faults.mlu")
    assert launches[1]["diagnostics"] == []


def test_invalid_launch_configuration_is_refused(build):
    proc = run(build(PROGRAMS / "faults.mlu"), "bad_union_dim")
    assert "bang-emu: error: invalid-launch: UNION1 needs dim.x to be a multiple of 4" in proc.stderr
    assert "sync=100701 last=100701" in proc.stdout and "recovered=1" in proc.stdout


def test_written_bytes_are_accounted_per_buffer(build, tmp_path):
    trace = tmp_path / "t.jsonl"
    proc = run(build(PROGRAMS / "faults.mlu"), "half_written", env={"BANG_EMU_TRACE": str(trace)})
    assert "sync=0 last=0" in proc.stdout
    written = {w["buffer"]: w for w in read_trace(trace)[0]["written_bytes"]}
    assert written["cnrtMalloc#2 (4096 B)"] == {"buffer": "cnrtMalloc#2 (4096 B)", "size": 4096, "written": 2048}
    assert written["cnrtMalloc#1 (4096 B)"]["written"] == 0


def test_barrier_that_never_completes_times_out_instead_of_hanging(tmp_path):
    from emu_helpers import cncc

    src = tmp_path / "spin.mlu"
    src.write_text(
        "#include <bang.h>\n#include <stdio.h>\n"
        "__mlu_entry__ void spin(volatile int *flag) {\n"
        "  if (coreId == 1) { while (flag[0] == 0) { __sync_compute(); } }\n"  # waits for a write that never comes
        "  __sync_cluster();\n"
        "}\n"
        "int main() { int *f; cnrtMalloc((void **)&f, 4); cnrtMemset(f, 0, 4);\n"
        "  cnrtDim3_t d = {4, 1, 1}; spin<<<d, CNRT_FUNC_TYPE_UNION1, NULL>>>(f);\n"
        "  printf(\"sync=%d\\n\", (int)cnrtQueueSync(NULL)); return 0; }\n")
    assert cncc(src, "-o", tmp_path / "spin").returncode == 0
    proc = run(tmp_path / "spin", env={"BANG_EMU_BARRIER_TIMEOUT": "1"}, timeout=30)
    assert "bang-emu: error: barrier-timeout: __sync_cluster() still incomplete after 1 s" in proc.stderr
    assert "sync=100700" in proc.stdout, proc.stderr


def test_poison_fills_device_memory(tmp_path):
    from emu_helpers import cncc

    src = tmp_path / "poison.mlu"
    src.write_text("#include <bang.h>\n#include <stdio.h>\n#include <math.h>\n"
                   "int main() { float *d, h[4]; cnrtMalloc((void **)&d, 16);\n"
                   "  cnrtMemcpy(h, d, 16, cnrtMemcpyDevToHost); printf(\"%d %g\\n\", (int)isnan(h[0]), h[1]); }\n")
    assert cncc(src, "-o", tmp_path / "p").returncode == 0
    assert run(tmp_path / "p", env={"BANG_EMU_POISON": "nan"}).stdout.split()[0] == "1"
    assert run(tmp_path / "p", env={"BANG_EMU_POISON": "sentinel"}).stdout.split() == ["0", "-25443.4"]
    assert run(tmp_path / "p").stdout.split() == ["0", "0"]


def test_poison_fills_onchip_arrays(tmp_path):
    from emu_helpers import cncc

    src = tmp_path / "onchip.mlu"
    src.write_text("#include <bang.h>\n#include <stdio.h>\n"
                   "__mlu_entry__ void k(float *out) { __nram__ float b[64]; __memcpy(out, b, 256, NRAM2GDRAM); }\n"
                   "int main() { float *d, h[64]; cnrtMalloc((void **)&d, 256); cnrtDim3_t one = {1, 1, 1};\n"
                   "  k<<<one, CNRT_FUNC_TYPE_BLOCK, NULL>>>(d); cnrtQueueSync(NULL);\n"
                   "  cnrtMemcpy(h, d, 256, cnrtMemcpyDevToHost); printf(\"%g\\n\", h[63]); }\n")
    assert cncc(src, "-o", tmp_path / "o").returncode == 0
    assert run(tmp_path / "o", env={"BANG_EMU_POISON": "sentinel"}).stdout.split() == ["-25443.4"]
