"""Adversarial sandbox fixture `fork_bomb` (not a solution): forks until refused; every child sleeps forever holding a pid

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
    born = 0
    try:
        while born < 100_000:
            if os.fork() == 0:
                os.closerange(0, 4096)  # so the harness sees the parent's error, not a hang on its pipes
                time.sleep(1e9)
                os._exit(0)
            born += 1
    except OSError as exc:
        raise RuntimeError(f"contained: fork refused after {born} children ({exc.strerror})")
    return torch.sigmoid(x)
