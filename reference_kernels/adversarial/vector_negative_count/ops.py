"""Adversarial sandbox fixture `vector_negative_count` (not a solution): __bang_active_sigmoid and __bang_add with a negative and an overflowing element count

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
