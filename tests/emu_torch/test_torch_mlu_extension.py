"""A real torch extension (BANG C sigmoid in .mlu + C++ binding) built with torch_mlu.utils.cpp_extension
against the emulator, run in child processes. One build per module (fixture `sigmoid_extension`)."""

from __future__ import annotations

import json
import textwrap

import pytest

pytestmark = pytest.mark.slow

PRELUDE = textwrap.dedent(
    """
    import json, torch, torch_mlu
    import emu_sigmoid_ext  # registers torch.ops.emu_test.* (TORCH_LIBRARY) and the pybind functions
    torch.manual_seed(0)
    """
)


def test_private_use1_op_matches_torch_sigmoid(run_json, sigmoid_extension):
    errors = run_json(
        PRELUDE
        + textwrap.dedent(
            """
            out = {}
            for shape, tasks in [((3, 4), 1), ((1024,), 1), ((8209,), 4), ((7, 129), 16), ((0,), 1)]:
                x = torch.randn(shape) * 4
                y = torch.ops.emu_test.sigmoid(x.to("mlu"), tasks)
                assert y.device.type == "mlu" and y.shape == x.shape
                out[f"{shape}/{tasks}"] = (y.cpu().double() - x.double().sigmoid()).abs().max().item() if x.numel() else 0.0
            print(json.dumps(out))
            """
        ),
        python_path=[sigmoid_extension],
    )
    assert set(errors) == {"(3, 4)/1", "(1024,)/1", "(8209,)/4", "(7, 129)/16", "(0,)/1"}
    for case, max_error in errors.items():
        assert max_error < 1e-2, f"{case}: max |error| {max_error}"  # __bang_active_sigmoid is approximate


def test_private_use1_op_does_not_dispatch_for_cpu_tensors(run_python, sigmoid_extension):
    result = run_python(
        PRELUDE + "torch.ops.emu_test.sigmoid(torch.randn(4))\n",
        python_path=[sigmoid_extension],
    )
    assert result.returncode != 0
    assert "NotImplementedError" in result.stderr and "emu_test::sigmoid" in result.stderr


def test_pybind_op_on_cpu_tensors_with_catch_headers(run_json, sigmoid_extension):
    errors = run_json(
        PRELUDE
        + textwrap.dedent(
            """
            x = torch.randn(5, 300)
            ref = x.double().sigmoid()
            y = emu_sigmoid_ext.sigmoid_cpu(x, 4)
            z = emu_sigmoid_ext.sigmoid_catch_style(x)
            t = emu_sigmoid_ext.sigmoid_cpu(x.t(), 2)  # non-contiguous input goes through cnnl_contiguous
            print(json.dumps({"devices": [y.device.type, z.device.type],
                              "pybind": (y.double() - ref).abs().max().item(),
                              "catch": (z.double() - ref).abs().max().item(),
                              "transposed": (t.double() - ref.t()).abs().max().item()}))
            """
        ),
        python_path=[sigmoid_extension],
    )
    assert errors.pop("devices") == ["cpu", "cpu"]
    assert all(error < 1e-2 for error in errors.values()), errors


@pytest.mark.parametrize("device", ["mlu", "cpu"])
def test_out_of_bounds_kernel_raises_a_python_error(run_python, sigmoid_extension, device):
    call = (
        'torch.ops.emu_test.sigmoid_overrun(torch.randn(100).to("mlu"))'
        if device == "mlu"
        else "emu_sigmoid_ext.sigmoid_overrun_cpu(torch.randn(100))"
    )
    result = run_python(
        PRELUDE
        + textwrap.dedent(
            f"""
            try:
                {call}
                print(json.dumps({{"raised": None}}))
            except RuntimeError as exc:
                print(json.dumps({{"raised": str(exc).splitlines()[0]}}))
            # the process survives and the next launch works again
            ok = torch.ops.emu_test.sigmoid(torch.zeros(8).to("mlu")).cpu()
            print(json.dumps({{"recovered": bool((ok == 0.5).all())}}))
            """
        ),
        python_path=[sigmoid_extension],
    )
    assert result.returncode == 0, result.stderr[-4000:]
    raised, recovered = (json.loads(line) for line in result.stdout.strip().splitlines()[-2:])
    assert raised["raised"] is not None and "CNRT error" in raised["raised"]
    assert "bang-emu: error:" in result.stderr and "out-of-bounds" in result.stderr
    assert "tensor float" in result.stderr  # the diagnostic names the registered tensor buffer
    assert recovered == {"recovered": True}


def test_event_elapsed_time_is_the_modelled_kernel_time(run_json, sigmoid_extension, tmp_path):
    trace = tmp_path / "trace.jsonl"
    timing = run_json(
        PRELUDE
        + textwrap.dedent(
            """
            x = torch.randn(64, 1024).to("mlu")
            start, end = torch.mlu.Event(enable_timing=True), torch.mlu.Event(enable_timing=True)
            start.record()
            for tasks in (1, 4):
                torch.ops.emu_test.sigmoid(x, tasks)
            end.record()
            end.synchronize()
            print(json.dumps({"ms": start.elapsed_time(end), "us": start.hardware_time(end)}))
            """
        ),
        python_path=[sigmoid_extension],
        BANG_EMU_TRACE=str(trace),
    )
    launches = [json.loads(line[65:]) for line in trace.read_text().splitlines() if line.strip()]  # "<mac> <json>"
    assert [launch["dim"][0] for launch in launches] == [1, 4]
    modelled_us = sum(launch["modelled_time_us"] for launch in launches)
    assert modelled_us > 0
    assert timing["us"] == pytest.approx(modelled_us, rel=1e-3)
    assert timing["ms"] == pytest.approx(modelled_us / 1000, rel=1e-3)
    # and the written-bytes accounting ran against the registered tensor extents: per launch the output is
    # fully written and the input (same shape, same label) untouched
    for launch in launches:
        tensors = [e for e in launch["written_bytes"] if e["buffer"] == "tensor float[64, 1024] on mlu"]
        assert all(e["size"] == 64 * 1024 * 4 for e in tensors)
        assert sorted(e["written"] for e in tensors)[-1] == 64 * 1024 * 4
        assert sorted(e["written"] for e in tensors)[0] == 0


def test_registrations_of_freed_tensors_are_dropped(run_python, sigmoid_extension, tmp_path):
    trace = tmp_path / "trace.jsonl"
    result = run_python(
        PRELUDE
        + textwrap.dedent(
            """
            y = None
            for i in range(12):
                n = 100 + 37 * i  # a new size each time, so freed memory is reused at other extents
                y = torch.ops.emu_test.sigmoid(torch.randn(n).to("mlu"))  # storage freed by the mlu allocator
                z = emu_sigmoid_ext.sigmoid_cpu(torch.randn(n))  # storage freed by the CPU allocator
            """
        ),
        python_path=[sigmoid_extension],
        BANG_EMU_TRACE=str(trace),
    )
    assert result.returncode == 0, result.stderr[-4000:]
    launches = [json.loads(line[65:]) for line in trace.read_text().splitlines() if line.strip()]  # "<mac> <json>"
    assert len(launches) == 24 and not any(launch["diagnostics"] for launch in launches)
    last = [entry["buffer"] for entry in launches[-1]["written_bytes"] if entry["buffer"].startswith("tensor ")]
    # alive at the last launch: its input and output, the previous iteration's y (mlu) and z (cpu)
    assert len(last) <= 4, last
