"""Adversarial sandbox fixture `endless_output` (not a solution): prints without end to stdout and stderr

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
    line = "spam " * 2000 + "\n"
    while True:
        sys.stdout.write(line)
        sys.stderr.write(line)
