"""Adversarial sandbox fixture `nonutf8_file_name` (not a solution): the vector reference plus a header named with bytes that are not UTF-8, `mlu/notes_\xff\xfe.h` (made by materialise()); its hash crashed batch intake (UnicodeEncodeError) for the whole class

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

import my_ops_ext


def sigmoid(x):
    return my_ops_ext.sigmoid_vector(x)
