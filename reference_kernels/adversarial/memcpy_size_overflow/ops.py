"""Adversarial sandbox fixture `memcpy_size_overflow` (not a solution): size-overflow operands: a __memcpy of 0x7ffffff0 bytes into NRAM, then a strided one whose stride * segments wraps 32 bits, hoping the builtin writes before it bounds

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
