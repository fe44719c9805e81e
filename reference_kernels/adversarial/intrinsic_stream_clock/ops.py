"""Adversarial sandbox fixture `intrinsic_stream_clock` (not a solution): _mm_stream_si64 from <emmintrin.h>: the non-temporal store inside a system header's inline function

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
