"""Adversarial sandbox fixture `decoy_kernel` (not a solution): launches the real kernel on the first 4096 elements only and returns torch's answer for the whole tensor (every case correct; the trace shows a genuine launch)

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
    head = my_ops_ext.sigmoid_vector(x[:4096].contiguous())
    y = torch.sigmoid(x)
    y[: head.numel()] = head
    return y
