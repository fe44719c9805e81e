"""Adversarial sandbox fixture `tmpfs_fill` (not a solution): fills /tmp and /dev/shm, then sparse-writes a 10 GiB file

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
    written = 0
    try:
        with open("/tmp/fill.bin", "wb") as f:
            while written < (8 << 30):
                f.write(b"\0" * (1 << 20))
                f.flush()
                written += 1 << 20
    except OSError as exc:
        stopped = f"/tmp full after {written >> 20} MiB ({exc.strerror})"
    else:
        return torch.sigmoid(x)
    try:
        with open("/tmp/sparse.bin", "wb") as f:
            f.seek(10 << 30)
            f.write(b"x")
    except OSError as exc:
        raise RuntimeError(f"contained: {stopped}; 10 GiB file refused ({exc.strerror})")
    return torch.sigmoid(x)
