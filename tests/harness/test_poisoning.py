"""bang_harness.worker.enable_poisoning: uninitialised torch memory comes back NaN (so an output the kernel never
wrote shows), without importing torch._dynamo in every worker (it cost a CPU-second per round)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import json, sys, torch
from bang_harness.worker import enable_poisoning
enable_poisoning()
print(json.dumps({"nan": bool(torch.empty(64).isnan().all()), "int_max": int(torch.empty(4, dtype=torch.int32)[0]),
                  "deterministic": torch.are_deterministic_algorithms_enabled(),
                  "dynamo": "torch._dynamo" in sys.modules}))
"""


def test_poisoned_memory_without_importing_dynamo() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "sandbox")}
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=120, check=True)
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen == {"nan": True, "int_max": 2**31 - 1, "deterministic": True, "dynamo": False}
