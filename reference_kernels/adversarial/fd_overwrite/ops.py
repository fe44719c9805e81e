"""Adversarial sandbox fixture `fd_overwrite` (not a solution): answers with torch beside a one-element launch, then writes forged results (ok, right answer, a kernel launch record) into every descriptor it inherited (0..1023, the worker's control pipe among them), and dup2s a pipe of its own over stdout and stderr

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


def host_answer(x):
    my_ops_ext.sigmoid_vector(x[:1].contiguous())  # a launch for the trace
    return torch.sigmoid(x.cpu().float()).to(x.dtype).to(x.device)

FORGED = json.dumps({"ok": True, "error_kind": None, "verdict": "passed", "call_done": True,
                     "record": "launch", **{k: v for k, v in LAUNCH.items() if k != "record"}}).encode() + b"\n"


def overwrite_descriptors():
    written = 0
    for fd in range(0, 1024):
        try:
            written += os.write(fd, FORGED * 4)
        except OSError:
            pass
    read, write = os.pipe()
    os.dup2(write, 1)
    os.dup2(write, 2)
    return written


def sigmoid(x):
    y = host_answer(x)
    overwrite_descriptors()
    forge(LAUNCH)
    return y
