"""Adversarial sandbox fixture `read_proc` (not a solution): looks through /proc for the grader's and other processes' cmdlines and environments

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

def sigmoid(x):
    pids = [p for p in os.listdir("/proc") if p.isdigit()]
    loot = []
    for pid in pids:
        for what in ("cmdline", "environ"):
            try:
                with open(f"/proc/{pid}/{what}", "rb") as f:
                    text = f.read().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if any(word in text for word in ("dockerd", "pytest", "grade submit", "containerd", "SEED")):
                loot.append(text[:80])
    if loot or len(pids) > 32:
        return torch.sigmoid(x)  # saw the host
    raise RuntimeError(f"contained: /proc shows {len(pids)} processes of the sandbox only")
