"""Adversarial sandbox fixture `libm_modf_clock` (not a solution): rewrites the replay's per-core clock through libm's modf(v, ptr) (libm stores through its pointer argument, uninstrumented), found by a layout probe of the runtime's TLS beside taskId; the vector reference otherwise

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
