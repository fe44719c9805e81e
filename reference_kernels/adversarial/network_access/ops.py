"""Adversarial sandbox fixture `network_access` (not a solution): connects out (public IP, the docker bridge's daemon port, DNS)

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
    tried = []
    for host, port in (("1.1.1.1", 80), ("172.17.0.1", 2375), ("8.8.8.8", 53)):
        try:
            socket.create_connection((host, port), timeout=3).close()
            return torch.sigmoid(x)  # reached the outside
        except OSError as exc:
            tried.append(f"{host}:{port} {exc.strerror}")
    raise RuntimeError("contained: network unreachable: " + "; ".join(tried))
