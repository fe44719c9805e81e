"""The emulator backend: BANG C compiled by cncc-emu and run on the CPU; times are the cost model's."""

from __future__ import annotations

import importlib
import importlib.util
import shutil

from grader.backends.base import Backend, first_output_line

# The device profiles DESIGN.md promises; the emulator's own table wins when it can be read.
KNOWN_PROFILES = ["mlu370-x8", "mlu370-x4", "mlu370-m8", "mlu270"]


class EmuBackend(Backend):
    name = "emu"
    timing_source = "modelled"
    default_device = "mlu370-x8"

    def available(self) -> tuple[bool, str]:
        if importlib.util.find_spec("bang_emu") is None:
            return False, "the emulator package bang_emu is not installed (pip install -e .)"
        if shutil.which("g++") is None:
            return False, "the emulator compiles BANG C with g++, which is not on PATH (apt-get install g++)"
        return True, "emulated MLU on the CPU (times are modelled)"

    def devices(self) -> list[str]:
        try:
            profiles = importlib.import_module("bang_emu.torch_mlu_emu.device").PROFILES
            return list(profiles)
        except (ImportError, AttributeError):
            return list(KNOWN_PROFILES)

    def run_env(self, device: str | None) -> dict[str, str]:
        return {"BANG_EMU_DEVICE": self.resolve_device(device)}

    def toolchain_version(self) -> str:
        try:
            version = getattr(importlib.import_module("bang_emu"), "__version__", "unknown")
        except ImportError:
            return "cncc-emu (not installed)"
        gxx = first_output_line(["g++", "-dumpfullversion"]) or "unknown"
        return f"cncc-emu {version} (g++ {gxx})"
