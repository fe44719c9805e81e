"""Adversarial sandbox fixture `line_directive_blame` (not a solution): `#line 212 "/opt/bang_emu/include/bang_emu/builtins_vector.h"` before a real syntax error: g++ prints the emulator's header as the place, which the report called "not your mistake ... a grader limitation"

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
