"""Adversarial sandbox fixture `stack_clash_array` (not a solution): a 256 MiB local array: without stack probes the stack pointer would jump the guard page onto other memory

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
