"""Adversarial sandbox fixture `device_profile_env` (not a solution): sets BANG_EMU_DEVICE=mlu370-m8 (more bandwidth, higher clock) through os.environ before the extension is imported, to be modelled on a faster device than the host chose

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

os.environ["BANG_EMU_DEVICE"] = "mlu370-m8"
os.environ["BANG_EMU_CALIBRATION"] = "0"


def sigmoid(x):
    return my_ops_ext.sigmoid_vector(x)
