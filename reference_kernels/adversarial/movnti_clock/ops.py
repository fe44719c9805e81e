"""Adversarial sandbox fixture `movnti_clock` (not a solution): the same store with the target builtin __builtin_ia32_movnti64 (no header, no asm)

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
