"""The host's roofline floor (grader.scoring.roofline) against the cost model, on every device of devices.json.

A modelled time below the floor would flag an honest kernel as "physically impossible", so the floor must stay
at or below anything the model can reach: checked against the model's own best case, figure by figure, and
against real emulated launches of a bus-bound kernel.
"""

from __future__ import annotations

import pytest
from bang_emu import devices
from emu_helpers import PROGRAMS, read_trace, run

from grader.scoring.roofline import floor_us
from grader.spec.references import REFERENCES

DTYPES = {"float32": 4, "float16": 2}
SHAPES = {  # the assignments' case shapes, small to past any launch overhead
    "sigmoid": [{"x": (n,)} for n in (1, 4096, 1 << 20, 1 << 26)],
    "matmul": [{"a": (m, k), "b": (k, n)} for m, k, n in ((1, 1, 1), (128, 256, 128), (524288, 256, 128),
                                                        (4096, 4096, 4096), (64, 8192, 64))],
}


def model_lower_bound_us(work, dtype: str, figures: dict[str, float]) -> float:
    """No modelled launch is faster than its bytes over the model's card bandwidth (after DMA efficiency), nor,
    on the tensor unit, than its multiply-adds over every core's tensor rate at the model's clock."""
    io_us = work.bytes_moved / (figures["gdram_gbps"] * figures["dma_efficiency"] * 1e3)
    if work.unit != "tensor":
        return io_us
    per_cycle = figures["tensor_ops_per_cycle_fp16" if dtype == "float16" else "tensor_ops_per_cycle_fp32"]
    tensor_us = work.flops / (figures["cores"] * figures["clock_mhz"] * per_cycle)
    return max(io_us, tensor_us)


@pytest.mark.parametrize("device", devices.names())
def test_floor_is_at_or_below_the_models_best_case(device):
    figures = devices.load()[device]
    for assignment, shapes in SHAPES.items():
        for dims in shapes:
            for dtype, itemsize in DTYPES.items():
                work = REFERENCES[assignment].work(dims, itemsize)
                floor = floor_us(work, dtype, device)
                assert floor is not None and floor > 0
                best = model_lower_bound_us(work, dtype, figures)
                assert floor <= best * (1 + 1e-9), (device, assignment, dims, dtype, floor, best)


@pytest.mark.slow
@pytest.mark.parametrize("device", devices.names())
def test_a_bus_bound_emulated_kernel_stays_above_the_floor(build, tmp_path, device):
    """The lab-style sigmoid over 16 tasks is bound by the card's bandwidth; without its launch overhead its
    modelled time is what the model's bus allows, and the floor must not exceed it."""
    n = 1 << 22
    trace = tmp_path / "t.jsonl"
    proc = run(build(PROGRAMS / "sigmoid_lab.mlu"), n, 16,
               env={"BANG_EMU_TRACE": str(trace), "BANG_EMU_DEVICE": device})
    assert "PASSED" in proc.stdout, proc.stderr
    (launch,) = read_trace(trace)
    kernel_us = launch["modelled_time_us"] - devices.load()[device]["launch_overhead_us"]
    floor = floor_us(REFERENCES["sigmoid"].work({"x": (n,)}, 4), "float32", device)
    assert floor <= kernel_us, (device, floor, kernel_us)
    # and the bound is tight enough to mean something: the kernel runs near the model's bus
    assert kernel_us < 1.5 * model_lower_bound_us(REFERENCES["sigmoid"].work({"x": (n,)}, 4), "float32",
                                                 devices.load()[device])
