"""Adversarial sandbox fixture `va_start_clock` (not a solution): __builtin_va_start on a va_list lvalue placed on the clock (24 bytes stored by code the sanitizer never sees)

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
