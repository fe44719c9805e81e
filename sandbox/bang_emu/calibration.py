"""The cost model's calibration: the six MatMul lab stages against the published MLU370 times.

Published figures: /work/shared/calibration.md (AICS lab 5.2, MLU370-X8 at 1000 MHz, Neuware 3.9.0, and the
MLU370-X4 column). The programs are reference_kernels/calibration/0*.mlu, lab-style standalone BANG C.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bang_emu import driver

REPO = Path(__file__).resolve().parents[2]
CALIBRATION_DIR = REPO / "reference_kernels" / "calibration"


@dataclass(frozen=True)
class Stage:
    number: str
    source: str
    technique: str
    shape: tuple[int, int, int]
    launch: str
    published_ms: dict[str, float]


STAGES = [
    Stage("01", "01_scalar_gdram.mlu", "scalar loops on GDRAM", (128, 256, 128), "{1,1,1} BLOCK",
          {"mlu370-x8": 2716.140, "mlu370-x4": 3261.580}),
    Stage("02", "02_scalar_nram.mlu", "scalar loops on NRAM copies", (128, 256, 128), "{1,1,1} BLOCK",
          {"mlu370-x8": 126.067, "mlu370-x4": 126.071}),
    Stage("03", "03_vector_nram.mlu", "__bang_matmul NRAM x WRAM", (128, 256, 128), "{1,1,1} BLOCK",
          {"mlu370-x8": 0.050, "mlu370-x4": 0.071}),
    Stage("04", "04_vector_nram_blocks.mlu", "03 over 128 tasks", (524288, 256, 128), "{128,1,1} BLOCK",
          {"mlu370-x8": 4.563, "mlu370-x4": 3.703}),
    Stage("05", "05_vector_nram_blocks_pipe3.mlu", "04 + async double buffering", (524288, 256, 128),
          "{128,1,1} BLOCK", {"mlu370-x8": 3.824, "mlu370-x4": 3.180}),
    Stage("06", "06_vector_sram_union1_pipe5.mlu", "SRAM staging, UNION1, 5-stage pipeline", (524288, 256, 128),
          "{4,32,1} UNION1", {"mlu370-x8": 4.073, "mlu370-x4": 3.158}),
]
RATIO_BAND = (0.67, 1.5)


@dataclass
class StageResult:
    stage: Stage
    device: str
    modelled_ms: float
    published_ms: float | None
    kernel_wall_s: float
    process_wall_s: float
    passed: bool
    output: str

    @property
    def ratio(self) -> float | None:
        return self.modelled_ms / self.published_ms if self.published_ms else None


def build_stage(stage: Stage, out_dir: Path) -> Path:
    exe = out_dir / Path(stage.source).stem
    rc = driver.main(["--bang-arch=compute_30", "-O3", str(CALIBRATION_DIR / stage.source), "-o", str(exe)])
    if rc != 0:
        raise RuntimeError(f"cncc-emu failed on {stage.source}")
    return exe


def run_stage(stage: Stage, exe: Path, device: str = "mlu370-x8") -> StageResult:
    with tempfile.TemporaryDirectory() as td:
        trace = Path(td) / "trace.jsonl"
        env = dict(os.environ, BANG_EMU_DEVICE=device, BANG_EMU_TRACE=str(trace), BANG_EMU_VERBOSE="1")
        start = time.monotonic()
        proc = subprocess.run([str(exe)], capture_output=True, text=True, env=env, timeout=600)
        wall = time.monotonic() - start
        # signed trace lines: `<64 hex mac> <json>` (the MAC is the harness's business, not the benchmark's)
        launches = [json.loads(line[65:]) for line in trace.read_text().splitlines() if line.strip()]
    if len(launches) != 1:
        raise RuntimeError(f"stage {stage.number}: expected one launch, trace has {len(launches)}\n{proc.stderr}")
    kernel_wall = sum(float(m) for m in re.findall(r"emulated in ([\d.]+) s wall", proc.stderr))
    return StageResult(stage, device, launches[0]["modelled_time_us"] / 1000.0, stage.published_ms.get(device),
                       kernel_wall, wall, proc.returncode == 0 and f"{stage.number} PASSED" in proc.stdout,
                       proc.stdout + proc.stderr)


def order_preserved(results: list[StageResult]) -> bool:
    """True when sorting the stages by modelled time gives the same order as by published time."""
    with_pub = [r for r in results if r.published_ms]
    by_model = [r.stage.number for r in sorted(with_pub, key=lambda r: r.modelled_ms)]
    by_pub = [r.stage.number for r in sorted(with_pub, key=lambda r: r.published_ms)]
    return by_model == by_pub


def format_table(results: list[StageResult]) -> str:
    device = results[0].device if results else "?"
    head = (f"{'stage':<6}{'technique':<40}{'modelled ms':>14}{'published ms':>14}{'ratio':>8}"
            f"{'kernel wall s':>15}{'total wall s':>14}  check")
    lines = [f"MatMul lab stages, modelled ({device}) against published MLU370 times", head, "-" * len(head)]
    for r in results:
        pub = f"{r.published_ms:.3f}" if r.published_ms else "-"
        ratio = f"{r.ratio:.2f}" if r.ratio else "-"
        lines.append(f"{r.stage.number:<6}{r.stage.technique:<40}{r.modelled_ms:>14.3f}{pub:>14}{ratio:>8}"
                     f"{r.kernel_wall_s:>15.2f}{r.process_wall_s:>14.2f}  {'PASSED' if r.passed else 'FAILED'}")
    ratios = [r.ratio for r in results if r.ratio]
    if ratios:
        inside = all(RATIO_BAND[0] <= x <= RATIO_BAND[1] for x in ratios)
        lines.append(f"ratios within [{RATIO_BAND[0]}, {RATIO_BAND[1]}]: {'yes' if inside else 'NO'}; "
                     f"stage order preserved: {'yes' if order_preserved(results) else 'NO'}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description="Calibrate the bang_emu cost model against the MatMul lab stages.")
    ap.add_argument("--device", default="mlu370-x8")
    ap.add_argument("--stages", default="01,02,03,04,05,06", help="comma-separated stage numbers")
    ap.add_argument("--json", type=Path, help="also write the results as JSON")
    args = ap.parse_args(argv)
    wanted = set(args.stages.split(","))
    results = []
    with tempfile.TemporaryDirectory() as td:
        for stage in STAGES:
            if stage.number in wanted:
                results.append(run_stage(stage, build_stage(stage, Path(td)), args.device))
                print(f"stage {stage.number}: {results[-1].modelled_ms:.3f} ms modelled ({args.device})",
                      file=sys.stderr)
    print(format_table(results))
    if args.json:
        args.json.write_text(json.dumps([
            {"stage": r.stage.number, "device": r.device, "modelled_ms": r.modelled_ms, "published_ms": r.published_ms,
             "ratio": r.ratio, "kernel_wall_s": r.kernel_wall_s, "process_wall_s": r.process_wall_s,
             "passed": r.passed} for r in results], indent=2))
    ok = all(r.passed for r in results)
    return 0 if ok else 1
