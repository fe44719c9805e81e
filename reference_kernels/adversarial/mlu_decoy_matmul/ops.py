"""Adversarial sandbox fixture `mlu_decoy_matmul` (not a solution): on a card: launches a trivial kernel of the extension in every call (so CNPAPI sees a kernel of the extension) and returns torch.matmul(a, b), computed by cnnlMatMul

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

def matmul(a, b):
    my_ops_ext.touch(a)  # a kernel of the extension runs during the call
    return torch.matmul(a, b)
