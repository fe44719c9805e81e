"""Adversarial sandbox fixture `fifo_binding` (not a solution): its C++ binding is a FIFO (made by materialise(): git cannot hold one); whatever opens it to read waits forever (layout detection used to hang `grade submit` for good)

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
