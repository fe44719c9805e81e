"""The emulated `mlu` device and the `torch_mlu` shim, without any student extension."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from bang_emu.torch_mlu_emu import build


def test_import_torch_mlu_provides_the_mlu_device(run_json):
    info = run_json(
        textwrap.dedent(
            """
            import json, torch, torch_mlu
            x = torch.arange(6.0).reshape(2, 3)
            m = x.to("mlu")
            props = torch.mlu.get_device_properties(0)
            print(json.dumps({
                "device": str(m.device), "is_mlu": m.is_mlu, "back": m.cpu().tolist(),
                "method": str(x.mlu().device), "module": str(torch.nn.Linear(2, 2).mlu().weight.device),
                "count": torch.mlu.device_count(), "available": torch.mlu.is_available(),
                "name": props.name, "capability": list(torch.mlu.get_device_capability()),
                "backend": torch._C._get_privateuse1_backend_name(),
            }))
            """
        )
    )
    assert info["device"] == "mlu:0" and info["is_mlu"] is True
    assert info["back"] == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    assert info["method"] == info["module"] == "mlu:0"
    assert info["count"] == 1 and info["available"] is True and info["backend"] == "mlu"
    assert "modelled" in info["name"] and "mlu370-x8" in info["name"].lower()  # default BANG_EMU_DEVICE
    assert info["capability"][0] >= 2


def test_cpp_extension_is_imported_on_first_use_not_by_import_torch_mlu(run_json):
    # as torch_mlu's own utils/__init__.py: a run sandbox's `import torch_mlu` pays nothing for setuptools
    info = run_json(
        textwrap.dedent(
            """
            import json, sys, torch, torch_mlu
            before = sorted(m for m in ("setuptools", "torch.utils.cpp_extension") if m in sys.modules)
            ext = torch_mlu.utils.cpp_extension.MLUExtension("e", ["k.mlu"])
            from torch_mlu.utils.cpp_extension import BuildExtension
            try:
                torch_mlu.utils.missing
                missing = "found"
            except AttributeError as exc:
                missing = str(exc)
            print(json.dumps({"before": before, "ext": type(ext).__name__, "build": BuildExtension.__name__,
                              "after": "setuptools" in sys.modules, "missing": missing}))
            """
        )
    )
    assert info["before"] == [] and info["after"] is True
    assert info["ext"] == "Extension" and info["build"] == "BuildExtension"
    assert "has no attribute 'missing'" in info["missing"]


def test_operators_without_mlu_kernels_fall_back_to_cpu(run_json):
    checks = run_json(
        textwrap.dedent(
            """
            import json, torch, torch_mlu
            torch.manual_seed(0)
            a, b = torch.randn(5, 7), torch.randn(7, 3)
            am, bm = a.to("mlu"), b.to("mlu")
            out = torch.empty(0, device="mlu")
            torch.add(am, 1.5, out=out)
            c = am.clone(); c.mul_(2)
            print(json.dumps({
                "matmul": torch.allclose((am @ bm).cpu(), a @ b),
                "matmul_on_mlu": (am @ bm).device.type,
                "sigmoid": torch.allclose(am.sigmoid().cpu(), a.sigmoid()),
                "sum": abs(am.sum().item() - a.sum().item()) < 1e-5,
                "out_variant": out.shape == a.shape and torch.allclose(out.cpu(), a + 1.5),
                "inplace": torch.allclose(c.cpu(), a * 2),
                "transpose_contiguous": torch.equal(am.t().contiguous().cpu(), a.t().contiguous()),
                "random_on_mlu": torch.randn(4, device="mlu").device.type,
            }))
            """
        )
    )
    assert checks == {
        "matmul": True,
        "matmul_on_mlu": "mlu",
        "sigmoid": True,
        "sum": True,
        "out_variant": True,
        "inplace": True,
        "transpose_contiguous": True,
        "random_on_mlu": "mlu",
    }


def test_views_alias_their_base_on_mlu(run_json):
    checks = run_json(
        textwrap.dedent(
            """
            import json, torch, torch_mlu
            base = torch.zeros(4, 6, device="mlu")
            base.view(24)[5] = 7.0
            base[1:3, 2:4].fill_(1.0)
            row = base.select(0, 3)
            row.copy_(torch.arange(6.0))
            print(json.dumps({"base": base.cpu().tolist(),
                              "same_storage": base.view(24).untyped_storage().data_ptr() == base.untyped_storage().data_ptr()}))
            """
        )
    )
    expected = [[0.0] * 6 for _ in range(4)]
    expected[0][5] = 7.0
    expected[1][2] = expected[1][3] = expected[2][2] = expected[2][3] = 1.0
    expected[3] = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    assert checks == {"base": expected, "same_storage": True}


def test_autograd_runs_on_mlu_tensors(run_json):
    grads = run_json(
        textwrap.dedent(
            """
            import json, torch, torch_mlu
            x = torch.tensor([-1.0, 0.0, 2.0], device="mlu", requires_grad=True)
            y = x.sigmoid()
            y.sum().backward()
            expected = (y * (1 - y)).detach().cpu()
            print(json.dumps({"device": x.grad.device.type, "ok": torch.allclose(x.grad.cpu(), expected)}))
            """
        )
    )
    assert grads == {"device": "mlu", "ok": True}


def test_poison_fills_new_mlu_memory(run_json):
    code = textwrap.dedent(
        """
        import json, torch, torch_mlu
        e = torch.empty(1000, device="mlu").cpu()
        print(json.dumps({"nan": bool(e.isnan().all()), "values": sorted(set(e[:4].tolist()), key=str)}))
        """
    )
    nan = run_json(code, BANG_EMU_POISON="nan")
    assert nan["nan"] is True
    sentinel = run_json(code, BANG_EMU_POISON="sentinel")
    assert sentinel["nan"] is False
    assert sentinel["values"] == [pytest.approx(-25443.39, abs=0.01)]  # 0xC6C6C6C6, as cnrtMalloc


def test_events_without_kernels_report_zero_modelled_time(run_json):
    timing = run_json(
        textwrap.dedent(
            """
            import json, torch, torch_mlu
            start, end = torch.mlu.Event(enable_timing=True), torch.mlu.Event(enable_timing=True)
            start.record()
            (torch.ones(100, device="mlu") * 3).sum()  # CPU fallback: no emulated kernel, no modelled time
            end.record()
            end.synchronize()
            torch.mlu.synchronize()
            # torch_mlu's rule, not CUDA's: events made with the defaults time too once both are placed
            # (MLUEvent::hardware_time); an event never placed is refused.
            plain_start, plain_end = torch.mlu.Event(), torch.mlu.Event()
            plain_start.record()
            plain_end.record()
            try:
                start.elapsed_time(torch.mlu.Event())
                refused = ""
            except RuntimeError as error:
                refused = str(error)
            print(json.dumps({"ms": start.elapsed_time(end), "us": start.hardware_time(end),
                              "plain_us": plain_start.hardware_time(plain_end), "refused": refused}))
            """
        )
    )
    assert timing == {"ms": 0.0, "us": 0.0, "plain_us": 0.0,
                      "refused": "Both notifiers must be placed before calculating elapsed time."}


def test_activate_makes_torch_mlu_importable_in_process(run_json):
    info = run_json(
        textwrap.dedent(
            """
            import json, sys
            from bang_emu.torch_mlu_emu import activate
            torch_mlu = activate()
            import torch
            again = activate()
            print(json.dumps({"same": again is torch_mlu, "device": str(torch.ones(1).to("mlu").device),
                              "mlu_module": torch.mlu.__name__, "ext": hasattr(torch_mlu.utils.cpp_extension, "MLUExtension")}))
            """
        ),
        shim=False,
    )
    assert info == {"same": True, "device": "mlu:0", "mlu_module": "torch_mlu.mlu", "ext": True}


def test_prebuild_command_reports_the_cached_library(device_library, make_env):
    result = subprocess.run(
        [sys.executable, "-m", "bang_emu.torch_mlu_emu", "prebuild"],
        env=make_env(shim=False),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(device_library) == str(build.library_path())
    assert device_library.is_file() and build.build_key() in str(device_library)


def test_unbuilt_library_in_unwritable_cache_asks_for_prebuild(tmp_path, make_env):
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    result = subprocess.run(
        [sys.executable, "-m", "bang_emu.torch_mlu_emu", "prebuild"],
        env=make_env(shim=False, BANG_EMU_CACHE=str(blocker / "cache")),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1
    assert "not writable" in result.stderr and "prebuild" in result.stderr
