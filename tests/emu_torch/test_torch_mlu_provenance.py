"""mlu tensor storage is device memory: closed to host code outside documented copies, and the emulator
knows which of its bytes kernel code wrote during the current call (DESIGN.md "Threat model")."""

from __future__ import annotations

import json
import textwrap

PRELUDE = textwrap.dedent(
    """
    import ctypes, json, torch, torch_mlu
    import emu_sigmoid_ext
    from bang_emu import toolchain
    rt = ctypes.CDLL(str(toolchain.runtime_dir() / toolchain.LIB_NAME))  # the loaded runtime (same handle)
    rt.bang_emu_seal_output.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    def seal(t):
        assert t.is_contiguous()
        return rt.bang_emu_seal_output(t.data_ptr(), t.numel() * t.element_size())
    torch.manual_seed(0)
    """
)


def output_records(trace):
    records = [json.loads(line[65:]) for line in trace.read_text().splitlines() if line.strip()]
    return [(r["call"], r["kernel_written"], r["bytes"]) for r in records if r["record"] == "output"]


def test_kernel_written_outputs_and_copies(run_json, sigmoid_extension, tmp_path):
    trace = tmp_path / "trace.jsonl"
    result = run_json(
        PRELUDE
        + textwrap.dedent(
            f"""
            x = torch.randn(64, 256).to("mlu")
            assert rt.bang_emu_begin_call(b"c0", {str(trace)!r}.encode()) == 0
            y = torch.ops.emu_test.sigmoid(x, 4)
            seals = [seal(y), seal(x)]                  # kernel output: all; H2D input: none
            seals.append(seal(y.clone()))                # D2D copy carries
            seals.append(seal(y.t().contiguous()))       # strided D2D copy carries element by element
            seals.append(seal(y.half()))                 # a host-side dtype conversion: not the kernel's
            z = y.clone(); z[0].fill_(1.0)               # host fill of one row
            seals.append(seal(z))
            w = y.clone(); w.zero_()
            seals.append(seal(w))
            assert rt.bang_emu_begin_call(b"c1", {str(trace)!r}.encode()) == 0
            seals.append(seal(y))                        # written in the previous call
            ok = torch.allclose(y.cpu(), x.cpu().sigmoid()) and torch.equal(y.t().contiguous().cpu(), y.cpu().t())
            print(json.dumps({{"seals": seals, "ok": ok, "item": y[0, 0].item(), "repr": "mlu" in repr(y)}}))
            """
        ),
        python_path=[sigmoid_extension],
    )
    assert result["seals"] == [0] * 8 and result["ok"] and result["repr"]
    n = 64 * 256 * 4
    assert output_records(trace) == [("c0", n, n), ("c0", 0, n), ("c0", n, n), ("c0", n, n), ("c0", 0, n // 2),
                                     ("c0", n - 256 * 4, n), ("c0", 0, n), ("c1", 0, n)]


def test_torch_ops_the_device_needs_still_work(run_json):
    checks = run_json(
        textwrap.dedent(
            """
            import json, torch, torch_mlu
            a = torch.arange(12.0).reshape(3, 4)
            m = a.to("mlu")
            e = torch.empty(5, device="mlu"); e.fill_(2.0)
            r = torch.zeros(2, device="mlu"); r.resize_(50); r[40:] = 3.0
            print(json.dumps({
                "to_cpu": m.cpu().tolist() == a.tolist(), "clone": torch.equal(m.clone().cpu(), a),
                "contiguous": torch.equal(m.t().contiguous().cpu(), a.t().contiguous()),
                "fill": e.cpu().tolist() == [2.0] * 5, "zero": m.clone().zero_().sum().item() == 0,
                "copy_": torch.equal(torch.empty(3, 4, device="mlu").copy_(a).cpu(), a),
                "broadcast": torch.equal(torch.empty(3, 4, device="mlu").copy_(m[0]).cpu(), a[0].expand(3, 4)),
                "to_half": torch.equal(m.to(torch.float16).cpu(), a.half()),
                "resize": r.cpu()[40:].tolist() == [3.0] * 10, "item": m[2, 3].item() == 11.0,
                "print": "mlu" in repr(m),
            }))
            """
        )
    )
    assert all(checks.values()), checks


def test_host_write_into_tensor_storage_is_an_error(run_python):
    result = run_python(
        textwrap.dedent(
            """
            import ctypes, torch, torch_mlu
            t = torch.zeros(16, device="mlu")
            print("start", flush=True)
            ctypes.c_float.from_address(t.data_ptr() + 8).value = 1.0  # what a binding's host loop would do
            print("after", flush=True)
            """
        )
    )
    assert result.returncode == 86, (result.returncode, result.stderr[-3000:])
    assert "bang-emu: error: host-access: host code wrote device memory at 0x" in result.stderr
    assert "8 bytes into buffer mlu storage #" in result.stderr and "the host cannot dereference" in result.stderr
    assert "after" not in result.stdout
