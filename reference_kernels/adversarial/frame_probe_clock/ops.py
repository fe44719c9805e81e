"""Adversarial sandbox fixture `frame_probe_clock` (not a solution): the layout probe through the kernel's own stack (walks up from a local to the core's context), then a plain store into its clock

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
