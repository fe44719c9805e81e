"""The emulator backend: BANG C compiled by cncc-emu and run on the CPU; times are the cost model's."""

from __future__ import annotations

import importlib
import importlib.util
import shutil
from typing import Any

from bang_emu import devices as device_table

from grader.backends.base import Backend, Log, first_output_line
from grader.i18n import _
from grader.sandbox import images


class EmuBackend(Backend):
    name = "emu"
    timing_source = "modelled"
    default_device = device_table.default_device()
    kernel_trace = True
    # Modelled time is deterministic: one timed call says all there is (spread 0, repeats 1).
    warmup = 0
    timed_repeats = 1
    retimes = False
    # gVisor: the emulator needs no device, so its pods get the strongest runtime (k8s-job.json's RuntimeClass).
    pod_runtime_class = "gvisor"
    devices_are_profiles = True

    def available(self) -> tuple[bool, str]:
        if importlib.util.find_spec("bang_emu") is None:
            return False, "the emulator package bang_emu is not installed (pip install -e .)"
        if shutil.which("g++") is None:
            return False, "the emulator compiles BANG C with g++, which is not on PATH (apt-get install g++)"
        return True, _("emulated MLU on the CPU (times are modelled)")

    def unavailable_fix(self) -> str:
        return "./bootstrap.sh   (apt-get install g++; pip install -e .)"

    def image_tag(self) -> str:
        return images.emu_image_tag()

    def ensure_image(self, rebuild: bool = False, log: Log | None = None) -> str:
        return images.ensure_emu_image(rebuild=rebuild, log=log)

    def ready_image(self, client: Any) -> str | None:
        tag = self.image_tag()
        if images.image_exists(client, tag):
            return tag
        if images.image_exists(client, images.base_image_tag()):
            return images.ensure_emu_image()  # only the thin layer is stale (sandbox/ sources changed): seconds
        return None

    def devices(self) -> list[str]:
        # devices.json, read by the standard library alone: listing devices imports no torch on the host
        return device_table.names()

    def run_env(self, device: str | None) -> dict[str, str]:
        return {"BANG_EMU_DEVICE": self.resolve_device(device)}

    def toolchain_version(self) -> str:
        try:
            version = getattr(importlib.import_module("bang_emu"), "__version__", "unknown")
        except ImportError:
            return "cncc-emu (not installed)"
        gxx = first_output_line(["g++", "-dumpfullversion"]) or "unknown"
        return f"cncc-emu {version} (g++ {gxx})"
