"""Adversarial sandbox fixture `got_patching` (not a solution): the C++ binding walks dl_iterate_phdr to the emulator runtime, makes its GOT writable with mprotect and points its mprotect and clock_gettime entries at its own (device memory stays host-writable, the clock runs 1000x slow), then writes the whole answer into the output's device memory with a host loop beside a one-element launch

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

PATCHED = [my_ops_ext.patch_runtime()]


def sigmoid(x):
    if not PATCHED[0]:
        PATCHED[0] = my_ops_ext.patch_runtime()
    return my_ops_ext.sigmoid_vector(x)
