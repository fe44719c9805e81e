"""Adversarial sandbox fixture `alloca_stack_lift` (not a solution): a negative __builtin_alloca lifts the stack pointer onto the core's context; the next call's return address lands on its queue horizon

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
