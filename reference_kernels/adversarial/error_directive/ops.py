"""Adversarial sandbox fixture `error_directive` (not a solution): stops its own build with `#error internal error in the build harness`, the text the host used to match to call a failed build the grader's fault

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
