"""Adversarial sandbox fixture `csv_formula_name` (not a solution): puts a spreadsheet formula in grade.toml's student name (=HYPERLINK(...)), which used to reach gradebook.csv and canvas.csv unescaped

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
