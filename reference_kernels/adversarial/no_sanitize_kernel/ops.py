"""Adversarial sandbox fixture `no_sanitize_kernel` (not a solution): the kernel's loop lives in a helper marked no_sanitize("kernel-address"), so its GDRAM loads and stores are invisible to the emulator (no checks, no counts, no provenance)

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
    return my_ops_ext.sigmoid_vector(x)
