"""Adversarial sandbox fixture `host_files` (not a solution): reads the host's secrets, the hidden tests, other submissions and the docker socket

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

TARGETS = ["/etc/shadow", "/root/.bash_history", "/var/run/docker.sock", "/work/main/assignments",
           "/work/main/grader/spec", "/home", "/tmp/pytest-of-root", "/submission/../../..", "/proc/1/root/root"]


def sigmoid(x):
    seen = []
    for path in TARGETS:
        try:
            if os.path.isdir(path):
                entries = [e for e in os.listdir(path) if not e.startswith(".")]
                if entries and path not in ("/submission/../../..",):
                    seen.append(f"{path}: {entries[:3]}")
            else:
                with open(path, "rb") as f:
                    if f.read(64):
                        seen.append(path)
        except OSError:
            pass
    if seen:
        return torch.sigmoid(x)  # read something of the host
    raise RuntimeError("contained: no host files readable")
