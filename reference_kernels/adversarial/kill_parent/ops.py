"""Adversarial sandbox fixture `kill_parent` (not a solution): SIGKILLs its parent (the harness), pid 1 and its whole process group

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
    for target in (os.getppid(), 1):
        try:
            os.kill(target, signal.SIGKILL)
        except OSError:
            pass
    os.killpg(0, signal.SIGKILL)
    return torch.sigmoid(x)
