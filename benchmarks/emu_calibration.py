"""Calibration benchmark of the BANG emulator's cost model.

Builds the six lab-style MatMul programs in reference_kernels/calibration/ with cncc-emu, runs them, and
prints per stage: modelled ms (labelled with the device profile), the published MLU370 ms, their ratio
(target within [0.67, 1.5], stage order preserved) and the emulator's own wall time.

    .venv/bin/python benchmarks/emu_calibration.py [--device mlu370-x8|mlu370-x4|...] [--stages 01,03]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sandbox"))

from bang_emu.calibration import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
