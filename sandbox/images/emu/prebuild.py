"""Runs once while the thin emulation image is built (as root, no network): makes the sandbox packages
importable by the venv and calls whatever prebuild entry points the emulator and the torch shim provide.

An entry point that is missing is skipped (recorded in prebuilt/status.json); one that fails fails the image
build: an image without its prebuilt runtime would turn the grader's own fault into students' compile errors.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(sys.argv[1] if len(sys.argv) > 1 else "/opt/bang-grader")
# The MLU image (sandbox/images/mlu) only needs the packages importable: it runs the real toolchain.
PACKAGES_ONLY = "--packages-only" in sys.argv[2:]
SANDBOX = ROOT / "sandbox"
PREBUILT = ROOT / "prebuilt"

# (module run with -m, its arguments, a word its source must contain). The emulator's caches are located by
# $BANG_EMU_CACHE, which the Dockerfile points into the image ({cache}); {out} is a folder under PREBUILT.
PREBUILD_ENTRIES = [
    ("bang_emu.torch_mlu_emu", ["prebuild"], "prebuild"),
    ("bang_emu.driver", ["--prebuild-runtime", "{cache}"], "--prebuild-runtime"),
    ("bang_emu", ["prebuild"], "prebuild"),
    ("bang_emu.wasm", ["prebuild"], "prebuild"),
]


def _module_supports(module: str, marker: str | None) -> bool:
    """True when `python -m module` exists (a package needs its __main__) and mentions `marker`."""
    for name in (module + ".__main__", module):
        try:
            spec = importlib.util.find_spec(name)
        except (ModuleNotFoundError, ImportError):
            continue
        if spec is None or spec.origin is None or spec.origin.endswith("__init__.py"):
            continue
        return marker is None or marker in Path(spec.origin).read_text(errors="replace")
    return False


def main() -> None:
    site = Path(sysconfig.get_paths()["purelib"])
    (site / "bang_grader_sandbox.pth").write_text(f"{SANDBOX}\n")
    sys.path.insert(0, str(SANDBOX))
    bin_dir = Path(sys.executable).parent
    if _module_supports("bang_emu.driver", None):
        wrapper = bin_dir / "cncc-emu"
        wrapper.write_text(f'#!/bin/sh\nexec {bin_dir}/python3 -m bang_emu.driver "$@"\n')
        wrapper.chmod(0o755)
    status: dict[str, dict[str, object]] = {}
    for module, args, marker in [] if PACKAGES_ONLY else PREBUILD_ENTRIES:
        if not _module_supports(module, marker):
            print(f"prebuild: {module} {' '.join(args)}: not provided yet, skipped", flush=True)
            status[module] = {"skipped": True}
            continue
        out = PREBUILT / module.replace(".", "-")
        out.mkdir(parents=True, exist_ok=True)
        cache = os.environ.get("BANG_EMU_CACHE", str(out))
        argv = [sys.executable, "-m", module,
                *(a.replace("{out}", str(out)).replace("{cache}", cache) for a in args)]
        print("prebuild: " + " ".join(argv), flush=True)
        done = subprocess.run(argv, cwd=str(ROOT), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        print(done.stdout[-4000:], flush=True)
        if done.returncode != 0:
            sys.exit(f"prebuild: FAILED: {module} exited {done.returncode}")
        status[module] = {"returncode": done.returncode, "output_tail": done.stdout[-2000:]}
    PREBUILT.mkdir(parents=True, exist_ok=True)
    (PREBUILT / "status.json").write_text(json.dumps(status, indent=1))
    # Built as root (some via mkstemp, mode 0600): the sandbox user must read every prebuilt file.
    for folder in (PREBUILT, Path(os.environ.get("BANG_EMU_CACHE", PREBUILT))):
        subprocess.run(["chmod", "-R", "a+rX", str(folder)], check=True)
    # Byte-compile now: at run time the root is read-only and PYTHONDONTWRITEBYTECODE is set.
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(SANDBOX)], check=True)


if __name__ == "__main__":
    main()
