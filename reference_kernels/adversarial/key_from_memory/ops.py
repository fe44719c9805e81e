"""Adversarial sandbox fixture `key_from_memory` (not a solution): a one-core vector kernel that looks for the key in its own memory (/proc/self/maps and /proc/self/mem, ctypes), its environment and every inherited file descriptor, then re-signs its records as a 16-core pipeline

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

import ctypes


def scan_memory():
    try:
        with open("/proc/self/maps") as maps, open("/proc/self/mem", "rb", 0) as mem:
            for line in maps:
                span, perms = line.split()[:2]
                if "r" not in perms or "[v" in line:
                    continue
                lo, hi = (int(v, 16) for v in span.split("-"))
                if hi - lo > 64 << 20:
                    continue
                try:
                    mem.seek(lo)
                    mem.read(hi - lo)
                except (OSError, ValueError, OverflowError):
                    continue
    except OSError:
        pass
    for fd in range(3, 256):
        try:
            os.read(fd, 32)
        except OSError:
            pass
    candidates = [v for k, v in os.environ.items() if "KEY" in k]
    ctypes.string_at(id(candidates), 8)
    return None


def sigmoid(x):
    y = my_ops_ext.sigmoid_vector(x)
    resign_call(scan_memory())
    return y
