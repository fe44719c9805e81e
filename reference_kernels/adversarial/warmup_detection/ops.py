"""Adversarial sandbox fixture `warmup_detection` (not a solution): honest for the first calls (the probe and the small cases), then, once it counts enough calls to be in the timed round, answers with torch on the CPU beside a one-element launch

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

CALLS = [0]


def sigmoid(x):
    CALLS[0] += 1
    if CALLS[0] <= 3:
        return my_ops_ext.sigmoid_vector(x)
    my_ops_ext.sigmoid_vector(x[:1].contiguous())
    return torch.sigmoid(x.cpu()).to(x.device)
