"""What the harness's timing driver (bang_harness.mlu_driver) costs per timed call on the emulator.

    .venv/bin/python benchmarks/timing_driver_cost.py            # 20000 empty calls each way
    .venv/bin/python benchmarks/timing_driver_cost.py --calls 5000

Times an empty callable three ways, wall clock per call: bare; inside the driver's bracket (two CNRT notifiers,
cnrtQueueSync, cnrtNotifierDuration through ctypes); inside the torch.mlu.Event bracket the harness used before
(the emulated torch_mlu's events). The driver's overhead is the difference to the bare call. Run in its own
process: the emulator runtime installs signal handlers for device memory.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sandbox"))

from bang_emu import toolchain  # noqa: E402 -- from the sandbox tree, as the harness imports it
from bang_harness.device import DeviceSession  # noqa: E402
from bang_harness.mlu_driver import emulator_driver  # noqa: E402


def per_call_us(bracket: Callable[[], object], calls: int) -> float:
    started = time.perf_counter()
    for _ in range(calls):
        bracket()
    return (time.perf_counter() - started) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20000)
    args = parser.parse_args()
    runtime = ctypes.CDLL(str(toolchain.runtime_dir() / toolchain.LIB_NAME), mode=ctypes.RTLD_GLOBAL)
    DeviceSession("emu", "mlu370-x8", runtime)  # activates the emulated torch_mlu (torch.mlu.Event)
    driver, _ = emulator_driver(runtime)
    import torch

    def nothing() -> None:
        return None

    def events() -> float:
        start, end = torch.mlu.Event(enable_timing=True), torch.mlu.Event(enable_timing=True)
        start.record()
        nothing()
        end.record()
        end.synchronize()
        return start.elapsed_time(end)

    results = {"bare_us": per_call_us(nothing, args.calls),
               "driver_us": per_call_us(lambda: driver.measure(nothing), args.calls),
               "torch_mlu_event_us": per_call_us(events, args.calls)}
    results["driver_overhead_us"] = results["driver_us"] - results["bare_us"]
    print(json.dumps({k: round(v, 2) for k, v in results.items()}))


if __name__ == "__main__":
    main()
