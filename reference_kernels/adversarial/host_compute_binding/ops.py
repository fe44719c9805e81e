"""Adversarial sandbox fixture `host_compute_binding` (not a solution): the C++ binding launches the kernel on one element, then recomputes every element with a host loop straight into the output's device memory

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
