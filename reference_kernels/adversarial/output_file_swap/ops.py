"""Adversarial sandbox fixture `output_file_swap` (not a solution): returns zeros and, from a thread, overwrites the call's output file with torch's answer once the harness has written it

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

import threading

import numpy as np


def swap_outputs():
    for _ in range(2000):
        for name in os.listdir("/io/outputs") if os.path.isdir("/io/outputs") else []:
            if name.endswith(".npy"):
                try:
                    answer = np.load(os.path.join("/io/outputs", name))
                    np.save(os.path.join("/io/outputs", name), 1.0 / (1.0 + np.exp(-answer.astype(np.float64))).astype(answer.dtype))
                except Exception:
                    pass
        time.sleep(0.01)


threading.Thread(target=swap_outputs, daemon=True).start()


def sigmoid(x):
    my_ops_ext.sigmoid_vector(x[:1].contiguous())
    return torch.zeros_like(x)
