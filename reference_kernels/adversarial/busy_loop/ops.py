"""Adversarial sandbox fixture `busy_loop` (not a solution): spins the CPU inside the entry call

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
    while True:
        pass
