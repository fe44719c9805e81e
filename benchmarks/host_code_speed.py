"""Host code at native speed: an unchanged lab program under cncc-emu against its host part built natively.

    .venv/bin/python benchmarks/host_code_speed.py [program.mlu] [--before]

Default program: the AICS MatMul lab's stage 04 (`exp_5_2_matmul_opt/04_vector_nram_blocks.mlu`, a 17-GMAC
host CPU reference plus one 128-task `__bang_matmul` kernel), read from a fetched mirror of
Yuichi1001/2024-AICS-EXP (`/work/.mirror/...`; never copied into this repository).

Three builds of the same unchanged source:
* emulator: `cncc-emu --bang-arch=compute_30 -O3` as a student runs it. Only device code (kernels, __mlu_func__ /
  __mlu_device__ functions and what they call) is instrumented; host functions are compiled without the
  kernel-address callbacks and with the vectoriser on.
* native: the same rewritten translation unit compiled by plain `g++ -O3` with no instrumentation at all, linked
  with the same runtime. Its host part = its wall time minus its kernel's wall time (the runtime prints both).
* with --before: every function instrumented (the emulator before this change), for reference; slow (minutes).

Target: emulator wall <= 1.5 x (native host part + the emulator's kernel emulation wall).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "sandbox"))
from bang_emu import driver, toolchain  # noqa: E402
from bang_emu.calibration import build_native, build_program, lab_folder, run_program  # noqa: E402

MIRROR = Path(os.environ.get("BANG_COMPAT_MIRRORS", "/work/.mirror")) / "Yuichi1001+2024-AICS-EXP" / "repo"


def default_program(work: Path) -> Path:
    if not MIRROR.is_dir():
        sys.exit(f"no mirror of Yuichi1001/2024-AICS-EXP at {MIRROR}; pass a program path instead")
    return lab_folder(MIRROR, work) / "04_vector_nram_blocks.mlu"


def cncc(*args: object) -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO / "sandbox") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-m", "bang_emu.driver", *map(str, args)], capture_output=True,
                          text=True, env=env)
    if proc.returncode != 0:
        sys.exit(f"cncc-emu {' '.join(map(str, args))} failed:\n{proc.stderr[-4000:]}")


def run(exe: Path) -> tuple[float, float, str]:
    """(process wall s, kernel emulation wall s, stdout)."""
    proc = run_program(exe)
    if proc.returncode != 0:
        sys.exit(f"{exe} failed:\n{proc.stderr[-3000:]}")
    return proc.wall_s, proc.kernel_wall_s, proc.stdout


def build_all_instrumented(src: Path, out: Path, work: Path) -> None:
    ii = work / "before.ii"
    cncc("--bang-arch=compute_30", "-O3", "-E", src, "-o", ii)
    text = ii.read_text().replace(' [[gnu::no_sanitize_address, gnu::optimize("tree-vectorize")]] ', " ")
    ii.write_text(text)
    obj = work / "before.o"
    subprocess.run(["g++", "-std=gnu++17", "-O3", "-g1", "-fno-omit-frame-pointer", *driver.DEVICE_INSTRUMENTATION,
                    "-x", "c++", "-c", str(ii), "-o", str(obj)], check=True)
    subprocess.run(["g++", str(obj), "-o", str(out), *toolchain.runtime_link_args()], check=True)


def cpu_ms(stdout: str) -> str:
    m = re.search(r"CPU Time taken: ([\d.]+) ms", stdout)
    return f"{float(m.group(1)) / 1000:.2f}" if m else "-"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("program", nargs="?", type=Path)
    ap.add_argument("--before", action="store_true", help="also time the all-instrumented build (slow)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="host-speed-") as td:
        work = Path(td)
        src = args.program or default_program(work)
        emu_exe, native_exe, before_exe = work / "emu", work / "native", work / "before"
        build_program(src, emu_exe)
        build_native(src, native_exe, work)
        emu_wall, emu_kernel, emu_out = run(emu_exe)
        nat_wall, nat_kernel, nat_out = run(native_exe)
        rows = [("emulator (cncc-emu -O3, as the student runs it)", emu_wall, emu_kernel, cpu_ms(emu_out))]
        rows.append(("native host build (g++ -O3, no instrumentation)", nat_wall, nat_kernel, cpu_ms(nat_out)))
        if args.before:
            build_all_instrumented(src, before_exe, work)
            b_wall, b_kernel, b_out = run(before_exe)
            rows.append(("before: host code instrumented like device code", b_wall, b_kernel, cpu_ms(b_out)))
        native_host = nat_wall - nat_kernel
        target = native_host + emu_kernel
        print(f"program: {src.name} ({os.cpu_count()} CPUs, wall times vary with load)")
        print(f"{'build':<52}{'wall s':>9}{'kernel wall s':>15}{'CPU ref s':>11}")
        for name, wall, kernel, cpu in rows:
            print(f"{name:<52}{wall:>9.2f}{kernel:>15.2f}{cpu:>11}")
        print(f"native host part {native_host:.2f} s + emulated kernel {emu_kernel:.2f} s = {target:.2f} s; "
              f"emulator {emu_wall:.2f} s = {emu_wall / target:.2f}x (target <= 1.5x): "
              f"{'yes' if emu_wall <= 1.5 * target else 'NO'}")
        return 0 if emu_wall <= 1.5 * target else 1


if __name__ == "__main__":
    sys.exit(main())
