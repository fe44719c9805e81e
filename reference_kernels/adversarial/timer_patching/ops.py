"""Adversarial sandbox fixture `timer_patching` (not a solution): patches every clock the harness could read to report near-zero times

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

_real_perf = time.perf_counter
_real_perf_ns = time.perf_counter_ns
time.perf_counter = lambda: _real_perf() / 1000.0
time.perf_counter_ns = lambda: _real_perf_ns() // 1000
time.monotonic = lambda: _real_perf() / 1000.0
time.monotonic_ns = lambda: _real_perf_ns() // 1000
time.time = lambda: 0.0
if hasattr(torch, "mlu") and hasattr(torch.mlu, "Event"):
    torch.mlu.Event.elapsed_time = lambda self, other: 1e-6
    torch.mlu.synchronize = lambda *args, **kwargs: None


def sigmoid(x):
    return my_ops_ext.sigmoid_vector(x)
