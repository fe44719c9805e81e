"""Adversarial sandbox fixture `include_own_stdout` (not a solution): `#include "/proc/self/fd/1"`: the compiler reads its own output pipe and waits forever without using CPU, so the CPU limit never fires (the 900 s wall backstop would)

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
    return torch.sigmoid(x)
