"""Helpers for the emulator tests: run cncc-emu and the programs it builds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PROGRAMS = Path(__file__).resolve().parent / "programs"
CALIBRATION = REPO / "reference_kernels" / "calibration"

# `python -c REPLAY JOURNAL MODULE INPUTS OUTPUTS`: the native trusted replay of a journal against a device module
# (runtime/replay.cpp), in a fresh process; prints its status and message
REPLAY = textwrap.dedent("""
    import ctypes, sys
    from pathlib import Path
    from bang_emu import device_module, toolchain
    lib = ctypes.CDLL(str(toolchain.runtime_dir() / toolchain.LIB_NAME), mode=ctypes.RTLD_GLOBAL)
    journal, module, inputs, outputs = sys.argv[1:5]
    offsets = device_module.site_records(Path(module))
    table = (ctypes.c_uint64 * max(1, len(offsets)))(*offsets)
    message = ctypes.create_string_buffer(1024)
    status = lib.bang_emu_replay(journal.encode(), module.encode(), table, len(offsets), inputs.encode(),
                                 outputs.encode(), message, len(message))
    print(status, message.value.decode())
""")


def cncc(*args: object, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run the cncc-emu driver as the console script does."""
    return subprocess.run([sys.executable, "-m", "bang_emu.driver", *map(str, args)], capture_output=True,
                          text=True, env=env)


def run(exe: Path, *args: object, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    full_env = dict(os.environ)
    for k in ("BANG_EMU_DEVICE", "BANG_EMU_TRACE", "BANG_EMU_POISON", "BANG_EMU_MATMUL_RHS", "BANG_EMU_VERBOSE"):
        full_env.pop(k, None)
    full_env.update(env or {})
    return subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True, env=full_env, timeout=timeout)


def read_trace(path: Path, kind: str = "launch") -> list[dict]:
    """The trace's records of one kind ("launch" / "output"); each line is `<64 hex mac> <json>`."""
    records = [json.loads(line[65:]) for line in path.read_text().splitlines() if line.strip()]
    return [r for r in records if r["record"] == kind]
