"""The emulator runtime's side of the trust contract (DESIGN.md "Threat model: what the host believes"): the key
handed over on a pipe, signed records numbered per call, output records with provenance and digest, device
memory closed to host code, a device profile fixed at load time, hidden runtime symbols."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import struct
import subprocess
from pathlib import Path

import pytest
from emu_helpers import PROGRAMS

N = 1000
FILL = struct.pack(f"<{N}f", *(i * 0.5 for i in range(N)))  # what the `fill` kernel writes
IOTA = struct.pack(f"<{N}f", *range(N))  # what the host copies into `in`


def call_key(master: bytes, call_id: str) -> bytes:
    return hmac.new(master, b"bang-emu-call:" + call_id.encode(), hashlib.sha256).digest()


def run_prog(exe: Path, *args, key: bytes | None = None, env: dict | None = None):
    full = {k: v for k, v in os.environ.items() if not k.startswith("BANG_EMU_")}
    full.update(env or {})
    fds = ()
    if key is not None:
        r, w = os.pipe()
        os.write(w, key)
        os.close(w)
        full["BANG_EMU_KEY_FD"] = str(r)
        fds = (r,)
        args = (*args, r)
    try:
        return subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True, env=full, pass_fds=fds,
                              timeout=120)
    finally:
        for fd in fds:
            os.close(fd)


def verified_records(trace: Path, master: bytes) -> list[dict]:
    """Every line verified with Python's hmac against key_call of the call it names."""
    records = []
    for line in trace.read_bytes().splitlines():
        mac, payload = line[:64], line[65:]
        assert line[64:65] == b" " and re.fullmatch(rb"[0-9a-f]{64}", mac)
        record = json.loads(payload)
        expected = hmac.new(call_key(master, record["call"]), payload, hashlib.sha256).hexdigest().encode()
        assert hmac.compare_digest(mac, expected), record
        records.append(record)
    return records


@pytest.fixture(scope="module")
def prog(build):
    return build(PROGRAMS / "provenance.mlu", "-g")


def test_calls_are_signed_numbered_and_sealed(prog, tmp_path):
    key = os.urandom(32)
    trace = tmp_path / "trace.jsonl"
    proc = run_prog(prog, "calls", trace, key=key)
    assert proc.returncode == 0, proc.stderr
    out = dict(line.split("=", 1) for line in proc.stdout.split() if "=" in line)
    assert out["key_env"] == "unset" and out["key_fd_open"] == "0"  # read, closed, unset before main
    assert out["seal_host"] == out["seal_straddle"] == "-1"  # not inside one device buffer
    records = verified_records(trace, key)
    for call in ("c0", "c1"):
        seqs = [r["seq"] for r in records if r["call"] == call]
        assert seqs == list(range(len(seqs)))  # 0..n-1, launches and outputs share the numbering
    outputs = [(r["call"], r["bytes"], r["kernel_written"], r["sha256"]) for r in records if r["record"] == "output"]
    fill, iota = hashlib.sha256(FILL).hexdigest(), hashlib.sha256(IOTA).hexdigest()
    assert outputs == [
        ("c0", 4 * N, 4 * N, fill),  # written by the kernel in this call
        ("c0", 4 * N, 0, iota),  # H2D-copied input
        ("c1", 4 * N, 0, fill),  # written in the previous call: nothing in this one
        ("c1", 4 * N, 2 * N, fill),  # the kernel rewrote half of it
        ("c1", 4 * N, 4 * N, iota),  # DMA'd by a kernel
        ("c1", 0, 0, hashlib.sha256(b"").hexdigest()),
    ]
    launch = next(r for r in records if r["record"] == "launch")
    assert launch["device"] == "mlu370-x8" and launch["work"]["scalar_stores"]["gdram"] == N


def test_records_do_not_verify_under_another_key_or_call(prog, tmp_path):
    key = os.urandom(32)
    trace = tmp_path / "trace.jsonl"
    run_prog(prog, "calls", trace, key=key)
    line = trace.read_bytes().splitlines()[0]
    payload = line[65:]
    assert hmac.new(call_key(os.urandom(32), "c0"), payload, hashlib.sha256).hexdigest().encode() != line[:64]
    assert hmac.new(call_key(key, "c1"), payload, hashlib.sha256).hexdigest().encode() != line[:64]


def test_standalone_programs_sign_with_the_zero_key(prog, tmp_path):
    trace = tmp_path / "standalone.jsonl"
    proc = run_prog(prog, "near", "unused", env={"BANG_EMU_TRACE": str(trace)})
    assert proc.returncode == 0
    (launch,) = verified_records(trace, bytes(32))
    assert (launch["record"], launch["call"], launch["seq"]) == ("launch", "", 0)


def test_copies_carry_and_clear_provenance(prog, tmp_path):
    key = os.urandom(32)
    trace = tmp_path / "trace.jsonl"
    proc = run_prog(prog, "copies", trace, key=key)
    assert proc.returncode == 0, proc.stderr
    assert "back=1.5,2,499.5" in proc.stdout  # D2H after an H2D into part of a kernel-written buffer
    written = [r["kernel_written"] for r in verified_records(trace, key) if r["record"] == "output"]
    assert written == [4 * N, 4 * N - 40, 4 * N - 100]  # D2D carries; H2D of 40 B and memset of 100 B clear


def test_device_to_device_copies_carry_marks_at_any_offset(prog, tmp_path):
    key = os.urandom(32)
    trace = tmp_path / "trace.jsonl"
    assert run_prog(prog, "unaligned", trace, key=key).returncode == 0
    written = [r["kernel_written"] for r in verified_records(trace, key) if r["record"] == "output"]
    assert written == [1997, 1997, 1997]


def test_host_access_windows_lend_no_marks_and_read_windows_stay_read_only(prog, tmp_path):
    key = os.urandom(32)
    trace = tmp_path / "trace.jsonl"
    proc = run_prog(prog, "window_abuse", trace, key=key)
    assert "in7=7" in proc.stdout and "wrote" not in proc.stdout
    assert proc.returncode == 86 and "host-access: host code wrote device memory" in proc.stderr
    (output,) = [r for r in verified_records(trace, key) if r["record"] == "output"]
    assert output["kernel_written"] == 0


@pytest.mark.parametrize(("mode", "verb", "offset"), [("host_write", "wrote", 12), ("host_read", "read", 28),
                                                       ("host_read_after_launch", "read", 8)])
def test_host_access_to_device_memory_is_an_error(prog, mode, verb, offset):
    proc = run_prog(prog, mode, "unused")
    assert proc.returncode == 86  # BANG_EMU_EXIT_HOST_ACCESS
    assert re.search(rf"bang-emu: error: host-access: host code {verb} device memory at 0x[0-9a-f]+ "
                     rf"\({offset} bytes into buffer cnrtMalloc#\d \(4000 B\)\): the host cannot dereference a "
                     r"device pointer; copy with cnrtMemcpy", proc.stderr), proc.stderr
    assert "after" not in proc.stdout and "read " not in proc.stdout


@pytest.mark.parametrize("with_key", [True, False])
def test_device_changed_after_load_has_no_effect(prog, tmp_path, with_key):
    key = os.urandom(32) if with_key else bytes(32)
    trace = tmp_path / "trace.jsonl"
    env = {"BANG_EMU_DEVICE": "mlu370-x4"} | ({} if with_key else {"BANG_EMU_TRACE": str(trace)})
    proc = run_prog(prog, "device_env", trace, key=key if with_key else None, env=env)
    assert proc.returncode == 0, proc.stderr
    (launch,) = verified_records(trace, key)
    assert launch["device"] == "mlu370-x4" and launch["profile"]["launch_overhead_us"] == 50  # not mlu270


def test_address_near_a_tensor_names_it(prog):
    proc = run_prog(prog, "near_tensor", "unused")
    assert ("is outside every device buffer: it starts 16356 B past the end of tensor float[7] on mlu (28 B); "
            "task 1 (of 2) starts at element 4096 of it") in proc.stderr, proc.stderr
    assert "host or stack memory" not in proc.stderr and "sync=100700" in proc.stdout


def test_out_of_bounds_names_where_the_buffer_was_allocated(prog):
    proc = run_prog(prog, "near", "unused")
    src = (PROGRAMS / "provenance.mlu").read_text().splitlines()
    line = next(i for i, text in enumerate(src, 1) if "cnrtMalloc((void **)&small" in text)
    assert re.search(rf"past its end of GDRAM buffer cnrtMalloc#4 \(28 B\), cnrtMalloc'd at \S*provenance.mlu:{line}; "
                     r"task 1 \(of 2\) starts at byte 16384 of it", proc.stderr), proc.stderr


def test_runtime_exports_only_the_documented_interface():
    from bang_emu import toolchain

    lib = toolchain.runtime_dir() / toolchain.LIB_NAME
    names = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True, text=True).stdout.split()
    ours = {n for n in names if n.startswith("_ZN8bang_emu") or n.startswith("bang_emu")}
    demangled = subprocess.run(["c++filt", *sorted(ours)], capture_output=True, text=True).stdout.split("\n")
    internal = [d for d in demangled if d and re.match(r"bang_emu::(profile|find_profile|hmac|trace_record|"
                                                       r"g_master|call_generation|find_gdram|mark_written)", d)]
    assert not internal
    assert {"bang_emu_begin_call", "bang_emu_seal_output", "bang_emu_register_gdram"} <= ours


def test_sha256_and_hmac_agree_with_python_on_odd_lengths(build, tmp_path):
    """Lengths around the 55/56/64-byte padding edges, through seal_output and a signed line."""
    src = tmp_path / "digest.mlu"
    src.write_text("#include <bang.h>\n#include <bang_emu/external.h>\n#include <stdlib.h>\n"
                   "int main(int argc, char **argv) { unsigned char h[200]; for (int i = 0; i < 200; ++i) h[i] = i * 7 + 1;\n"
                   "  void *d; cnrtMalloc(&d, 200); cnrtMemcpy(d, h, 200, cnrtMemcpyHostToDev);\n"
                   "  bang_emu_begin_call(argv[2], argv[1]);\n"
                   "  int lens[] = {1, 55, 56, 63, 64, 65, 119, 120, 128, 200};\n"
                   "  for (int i = 0; i < 10; ++i) bang_emu_seal_output(d, lens[i]); return 0; }\n")
    from emu_helpers import cncc

    assert cncc(src, "-o", tmp_path / "digest").returncode == 0
    key, trace = os.urandom(32), tmp_path / "t.jsonl"
    call_id = "call-\u00e9\"x"  # escaped in JSON, signed as UTF-8 bytes of the id
    assert run_prog(tmp_path / "digest", trace, call_id, key=key).returncode == 0
    data = bytes((i * 7 + 1) & 0xFF for i in range(200))
    records = verified_records(trace, key)
    assert [r["sha256"] for r in records] == [hashlib.sha256(data[:n]).hexdigest()
                                             for n in (1, 55, 56, 63, 64, 65, 119, 120, 128, 200)]
    assert {r["call"] for r in records} == {call_id}
