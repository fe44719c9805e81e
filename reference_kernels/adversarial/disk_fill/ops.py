"""Adversarial sandbox fixture `disk_fill` (not a solution): writes 4 MiB files into the writable /io mount (host disk) without end

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
    chunk = os.urandom(1 << 20) * 4
    written = 0
    try:
        for i in range(1_000_000):
            with open(f"/io/outputs/junk_{i}.bin", "wb") as f:
                f.write(chunk)
            written += len(chunk)
    except OSError as exc:
        raise RuntimeError(f"contained: disk full after {written >> 20} MiB ({exc.strerror})")
    return torch.sigmoid(x)
