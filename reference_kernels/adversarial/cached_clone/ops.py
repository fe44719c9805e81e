"""Adversarial sandbox fixture `cached_clone` (not a solution): remembers each result by shape and, for a shape seen before, returns a clone without launching (issue 26: caught on the pipeline stage, still 90/100)

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

SEEN = {}


def sigmoid(x):
    key = (tuple(x.shape), x.dtype)
    if key in SEEN:
        return SEEN[key].clone()
    y = my_ops_ext.sigmoid_vector(x)
    SEEN[key] = y.clone()
    return y
