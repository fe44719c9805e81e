"""Calibration benchmark of the BANG emulator's cost model.

Builds the six lab-style MatMul programs in reference_kernels/calibration/ with cncc-emu, runs them, and
prints per stage: modelled ms (labelled with the device profile), the published MLU370 ms, their ratio
(target within [0.67, 1.5], stage order preserved) and the emulator's own wall time.

    .venv/bin/python benchmarks/emu_calibration.py [--device mlu370-x8|mlu370-x4|...] [--stages 01,03]

With --lab, the lab's own exp_5_2 programs instead, built and run unchanged from a fetched mirror (bare git, the
lab folder exported to a temporary directory) or an extracted folder; per stage: the shape the program prints,
the modelled ms (the trace's launch record) beside the program's own "MLU Time taken", the published ms and
ratio (only at the published shape), the emulator's wall time of the whole program and of its kernel, and the
program's host part built natively (g++ -O3, no instrumentation: its wall minus its kernel's), each run once:

    .venv/bin/python benchmarks/emu_calibration.py --lab /work/.mirror/Yuichi1001+2024-AICS-EXP [--stages 01,03]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sandbox"))

from bang_emu.calibration import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
