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


def rounds():
    # every folder the harness may use for a round: /io itself, or /io/rounds/<n>
    found = ["/io"]
    if os.path.isdir("/io/rounds"):
        found += [os.path.join("/io/rounds", n) for n in os.listdir("/io/rounds")]
    return found


def swap_outputs():
    import json

    swapped = set()
    for _ in range(20000):
        for folder in rounds():
            try:
                with open(os.path.join(folder, "job.json")) as f:
                    calls = json.load(f)["calls"]
            except (OSError, ValueError, KeyError):
                continue
            for call in calls:
                out = os.path.join(folder, "outputs", call["id"] + ".npy")
                if out in swapped or not os.path.exists(out):
                    continue
                try:
                    x = np.load(os.path.join(folder, "inputs", call["inputs"][0])).astype(np.float64)
                    np.save(out, (1.0 / (1.0 + np.exp(-x))).astype(call["dtype"]))
                    swapped.add(out)
                except Exception:
                    pass
        time.sleep(0.005)


threading.Thread(target=swap_outputs, daemon=True).start()


def sigmoid(x):
    my_ops_ext.sigmoid_vector(x[:1].contiguous())
    return torch.zeros_like(x)
