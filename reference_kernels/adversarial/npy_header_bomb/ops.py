"""Adversarial sandbox fixture `npy_header_bomb` (not a solution): runs the real kernel, then makes the harness save the output as a .npy whose header claims shape (2**40,) (the host's reader used to allocate it: MemoryError)

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

import numpy

_real_save = numpy.save


def _bomb(file, arr, *args, **kwargs):
    if not str(file).endswith(".npy"):
        return _real_save(file, arr, *args, **kwargs)
    header = "{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627776,), }"
    header += " " * (63 - (10 + len(header)) % 64) + "\n"
    with open(file, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode("latin1"))
        f.write(b"\0" * 64)


numpy.save = _bomb


def sigmoid(x):
    return my_ops_ext.sigmoid_vector(x)
