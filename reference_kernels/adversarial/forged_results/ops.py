"""Adversarial sandbox fixture `forged_results` (not a solution): writes fake result files and prints fake verdicts, returning zeros without launching a kernel

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

import json


def sigmoid(x):
    fake = {"ok": True, "verdict": "passed", "points": 100, "wall_us": [0.001], "device_us": [0.001]}
    for folder in ("/io", "/io/outputs", "/tmp", "/build"):
        for name in ("results.json", "result.json", "build.json", "grade.json"):
            try:
                with open(f"{folder}/{name}", "w") as f:
                    json.dump(fake, f)
            except OSError:
                pass
    try:
        with open("/io/job.json") as f:
            for call in json.load(f).get("calls", []):
                with open(f"/io/outputs/{call['id']}.json", "w") as out:
                    json.dump(fake, out)
    except (OSError, ValueError, KeyError, TypeError):
        pass
    print(json.dumps({"verdict": "passed", "score": 100}))
    print("VERDICT: passed  POINTS: 100/100")
    return torch.zeros_like(x)
