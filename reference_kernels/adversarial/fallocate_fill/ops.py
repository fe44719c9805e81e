"""Adversarial sandbox fixture `fallocate_fill` (not a solution): fallocates 256 MiB files in /io/outputs (up to 8 GiB) faster than a 0.2 s disk poll

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
    made = 0
    try:
        for i in range(32):
            fd = os.open(f"/io/outputs/fill_{i}.bin", os.O_WRONLY | os.O_CREAT, 0o600)
            try:
                os.posix_fallocate(fd, 0, 256 << 20)
            finally:
                os.close(fd)
            made += 256
    except OSError as exc:
        for i in range(32):
            try:
                os.unlink(f"/io/outputs/fill_{i}.bin")
            except OSError:
                pass
        raise RuntimeError(f"contained: fallocate refused after {made} MiB ({exc.strerror})")
    return torch.sigmoid(x)
