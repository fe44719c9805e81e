"""Adversarial sandbox fixture `kernel_code_in_cpp` (not a solution): the kernel calls a function defined in a .cpp of the binding, compiled by the host compiler without the emulator's instrumentation, which writes the output

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
