"""The cost model's calibration: the six MatMul lab stages against the published MLU370 times.

Published figures: /work/shared/calibration.md (AICS lab 5.2, MLU370-X8 at 1000 MHz, Neuware 3.9.0, and the
MLU370-X4 column). Two sets of programs:
* default: reference_kernels/calibration/0*.mlu, our lab-style standalone BANG C rewrites;
* `--lab DIR`: the lab's own exp_5_2 programs (`01_scalar.mlu` ... `06_vector_sram_unions_pipe5.mlu`), built
  and run unchanged from a fetched mirror (bare git, exported to a temporary folder) or an extracted folder,
  each beside its host part built natively (no instrumentation) so the emulator's wall time can be read against
  the time the program's own host code takes.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path

from bang_emu import safe_tar, toolchain

REPO = Path(__file__).resolve().parents[2]
CALIBRATION_DIR = REPO / "reference_kernels" / "calibration"
LAB_FLAGS = ["--bang-arch=compute_30", "-O3"]  # the lab's test.sh


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
KERNEL_WALL = re.compile(r"emulated in ([\d.]+) s wall")


# ------------------------------------------------------------------------------------------ build and run
def build_program(src: Path, exe: Path) -> None:
    """cncc-emu with the lab's flags, as a student (and the harness's programs build) runs it."""
    proc = toolchain.compile_mlu(src, exe, LAB_FLAGS)
    if proc.returncode != 0:
        raise RuntimeError(f"cncc-emu failed on {src}:\n{proc.stderr[-4000:]}")


def build_native(src: Path, out: Path, work: Path) -> None:
    """The rewritten unit (launches and on-chip arrays translated) compiled by plain g++ -O3 with no
    instrumentation at all, linked with the same runtime: its wall time minus its kernel's is the host part."""
    ii = work / f"{out.name}.ii"
    proc = toolchain.compile_mlu(src, ii, [*LAB_FLAGS, "-E"])
    if proc.returncode != 0:
        raise RuntimeError(f"cncc-emu -E failed on {src}:\n{proc.stderr[-4000:]}")
    obj = work / f"{out.name}.o"
    subprocess.run(["g++", "-std=gnu++17", "-O3", "-x", "c++", "-c", str(ii), "-o", str(obj)], check=True)
    subprocess.run(["g++", str(obj), "-o", str(out), *toolchain.runtime_link_args()], check=True)


@dataclass
class ProgramRun:
    returncode: int
    stdout: str
    stderr: str
    wall_s: float
    kernel_wall_s: float  # the runtime's own "emulated in ... s wall", summed over launches
    launches: list[dict] = field(default_factory=list)  # the trace's launch records (when traced)
    load: float = 0.0  # the machine's 1-minute load average when the run started: wall times depend on it


def run_program(exe: Path, device: str = "mlu370-x8", trace: Path | None = None,
                timeout: float = 3600) -> ProgramRun:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BANG_EMU_")}
    env.update(BANG_EMU_DEVICE=device, BANG_EMU_VERBOSE="1")
    if trace is not None:
        env["BANG_EMU_TRACE"] = str(trace)
    load = os.getloadavg()[0]
    start = time.monotonic()
    proc = subprocess.run([str(exe)], capture_output=True, text=True, env=env, timeout=timeout)
    wall = time.monotonic() - start
    launches = []
    if trace is not None and trace.exists():
        # signed trace lines: `<64 hex mac> <json>` (the MAC is the harness's business, not the benchmark's)
        records = [json.loads(line[65:]) for line in trace.read_text().splitlines() if line.strip()]
        launches = [r for r in records if r.get("record", "launch") == "launch"]
    kernel_wall = sum(float(m) for m in KERNEL_WALL.findall(proc.stderr))
    return ProgramRun(proc.returncode, proc.stdout, proc.stderr, wall, kernel_wall, launches, load)


def _only_launch(name: str, run: ProgramRun) -> dict:
    if len(run.launches) != 1:
        raise RuntimeError(f"{name}: expected one launch, trace has {len(run.launches)}\n{run.stderr[-3000:]}")
    return run.launches[0]


# ------------------------------------------------------------------------------------------ our rewrites
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

    @property
    def shape(self) -> tuple[int, int, int]:
        return self.stage.shape  # the rewrites run at the published shapes


def build_stage(stage: Stage, out_dir: Path) -> Path:
    exe = out_dir / Path(stage.source).stem
    build_program(CALIBRATION_DIR / stage.source, exe)
    return exe


def run_stage(stage: Stage, exe: Path, device: str = "mlu370-x8") -> StageResult:
    with tempfile.TemporaryDirectory() as td:
        run = run_program(exe, device, Path(td) / "trace.jsonl", timeout=600)
    launch = _only_launch(f"stage {stage.number}", run)
    return StageResult(stage, device, launch["modelled_time_us"] / 1000.0, stage.published_ms.get(device),
                       run.kernel_wall_s, run.wall_s, run.returncode == 0 and f"{stage.number} PASSED" in run.stdout,
                       run.stdout + run.stderr)


def order_pairs(results: list) -> tuple[int, int]:
    """(pairs in the published order, pairs compared). Two stages compare when both ran at their published
    shapes, or both at one shape where their published figures also share one (a copy of the lab that runs
    01-03 and 04-06 at sizes of its own still orders 01-03 among themselves). Stopped kernels do not compare."""
    rows = [r for r in results if r.published_ms and r.modelled_ms is not None]
    in_order = compared = 0
    for a, b in combinations(rows, 2):
        at_published = a.shape == a.stage.shape and b.shape == b.stage.shape
        alike = a.shape == b.shape and a.stage.shape == b.stage.shape
        if at_published or alike:
            compared += 1
            in_order += (a.modelled_ms < b.modelled_ms) == (a.published_ms < b.published_ms)
    return in_order, compared


def order_preserved(results: list) -> bool:
    """True when every comparable pair of stages is modelled in the published order."""
    in_order, compared = order_pairs(results)
    return in_order == compared


def _summary(results: list) -> str | None:
    ratios = [r.ratio for r in results if r.ratio]
    if not ratios:
        return None
    inside = all(RATIO_BAND[0] <= x <= RATIO_BAND[1] for x in ratios)
    return (f"ratios within [{RATIO_BAND[0]}, {RATIO_BAND[1]}]: {'yes' if inside else 'NO'}; "
            f"stage order preserved: {'yes' if order_preserved(results) else 'NO'}")


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
    summary = _summary(results)
    if summary:
        lines.append(summary)
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------ the lab's programs
PRINTED_SHAPE = re.compile(r"M = (\d+), N = (\d+), K = (\d+)")
PRINTED_TIME = re.compile(r"MLU Time taken: ([\d.]+) ms")


def lab_folder(path: Path, work: Path) -> Path:
    """The folder holding the lab's `NN_*.mlu`: `path` itself or below it, or, for a fetched mirror (a bare git
    directory, or a folder with one in `repo/`), that folder of its HEAD exported into `work`."""
    git_dir = next((d for d in (path, path / "repo") if (d / "HEAD").is_file() and (d / "objects").is_dir()), None)
    if git_dir is None:
        first = sorted(path.rglob("01_*.mlu"))
        if not first:
            raise FileNotFoundError(f"no lab program 01_*.mlu in or below {path}")
        return first[0].parent
    names = subprocess.run(["git", "--git-dir", str(git_dir), "-c", "core.quotepath=off", "ls-tree", "-r",
                            "--name-only", "HEAD"], capture_output=True, text=True, check=True).stdout.splitlines()
    first = sorted(n for n in names if re.fullmatch(r"(.*/)?01_[^/]*\.mlu", n))
    if not first:
        raise FileNotFoundError(f"no lab program 01_*.mlu in {git_dir}")
    folder = str(Path(first[0]).parent)
    archive = work / "lab.tar"
    with archive.open("wb") as out:
        # only that folder: mirrors may lack large unrelated blobs
        subprocess.run(["git", "--git-dir", str(git_dir), "archive", "HEAD", folder], stdout=out,
                       stderr=subprocess.DEVNULL, check=True)
    safe_tar.extract_tar(archive, work)
    archive.unlink()
    return work / folder


def prints_microseconds(src: Path) -> bool:
    """Programs that time with cnrtNotifierDuration (the 2024 answers' 02-06) print its microseconds under their
    "MLU Time taken ... ms" label; cnrtNotifierElapsedTime answers in ms."""
    return "cnrtNotifierDuration" in src.read_text(encoding="utf-8", errors="replace")


@dataclass
class LabResult:
    stage: Stage
    source: Path
    device: str
    emu: ProgramRun  # the unchanged program under cncc-emu, traced
    native: ProgramRun  # its native build (host code uninstrumented), untraced
    prints_us: bool = False  # see prints_microseconds

    @property
    def launch(self) -> dict:
        return _only_launch(self.source.name, self.emu)

    @property
    def errors(self) -> list[dict]:
        """What the emulator stopped the kernel for (a stopped kernel's modelled time covers the part that ran)."""
        return [d for d in self.launch.get("diagnostics", []) if d.get("severity") == "error"]

    @property
    def modelled_ms(self) -> float | None:
        return None if self.errors else self.launch["modelled_time_us"] / 1000.0

    @property
    def shape(self) -> tuple[int, int, int] | None:
        m = PRINTED_SHAPE.search(self.emu.stdout)
        return (int(m[1]), int(m[2]), int(m[3])) if m else None

    @property
    def printed_ms(self) -> float | None:
        """The program's own "MLU Time taken ... ms", in ms."""
        m = PRINTED_TIME.search(self.emu.stdout)
        if not m:
            return None
        return float(m[1]) / 1000.0 if self.prints_us else float(m[1])

    @property
    def published_ms(self) -> float | None:
        return self.stage.published_ms.get(self.device)

    @property
    def ratio(self) -> float | None:
        if self.modelled_ms is None or not self.published_ms or self.shape != self.stage.shape:
            return None  # stopped, or at a shape of its own: not comparable with the published figure
        return self.modelled_ms / self.published_ms

    @property
    def native_host_s(self) -> float:
        return self.native.wall_s - self.native.kernel_wall_s

    @property
    def verdict(self) -> str:
        if self.errors:
            return "stopped: " + ", ".join(f"{e['kind']} at line {e.get('line')}" for e in self.errors)
        return f"{self.stage.number}PASSED" if f"{self.stage.number}PASSED" in self.emu.stdout else "FAILED"


def run_lab(folder: Path, numbers: list[str], work: Path, device: str = "mlu370-x8") -> list[LabResult]:
    """Each wanted stage's program built unchanged and run once under the emulator, then built natively and run
    once; the emulator's trace of stage NN stays in work/NN.trace.jsonl."""
    results = []
    for stage in (s for s in STAGES if s.number in numbers):
        sources = sorted(folder.glob(f"{stage.number}_*.mlu"))
        if not sources:
            continue
        src = sources[0]
        emu_exe, native_exe = work / f"{stage.number}-emu", work / f"{stage.number}-native"
        build_program(src, emu_exe)
        build_native(src, native_exe, work)
        emu = run_program(emu_exe, device, work / f"{stage.number}.trace.jsonl")
        native = run_program(native_exe, device)
        results.append(LabResult(stage, src, device, emu, native, prints_microseconds(src)))
        print(f"stage {stage.number}: {src.name} emulated in {emu.wall_s:.1f} s, native {native.wall_s:.1f} s",
              file=sys.stderr)
    return results


def _num(x: float | None, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def format_lab_table(results: list[LabResult], folder: str) -> str:
    device = results[0].device if results else "?"
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    head = (f"{'stage':<6}{'M,N,K':<16}{'modelled ms':>13}{'prints ms':>12}{'published':>11}{'ratio':>7}"
            f"{'emu wall s':>12}{'kernel s':>10}{'native host s':>15}{'load':>6}  result")
    lines = [f"The lab's unchanged programs ({folder}), modelled on {device} against the published MLU370 times",
             "modelled = the trace's launch record; prints = the program's own \"MLU Time taken\" in ms "
             "(cnrtNotifierDuration's us converted); ratio only at the published shape; native host = the host "
             "part built natively (its wall minus its kernel's)",
             f"each program timed once (load = 1-min load average as its emulated run started); "
             f"{os.cpu_count()} CPUs, load average now {load}", head, "-" * len(head)]
    for r in results:
        shape = ",".join(map(str, r.shape)) if r.shape else "?"
        # a stopped kernel's partial time, in brackets: not a figure to compare
        modelled = f"({r.launch['modelled_time_us'] / 1000.0:.3f})" if r.errors else _num(r.modelled_ms, ".3f")
        lines.append(f"{r.stage.number:<6}{shape:<16}{modelled:>13}{_num(r.printed_ms, '.3f'):>12}"
                     f"{_num(r.published_ms, '.3f'):>11}{_num(r.ratio, '.2f'):>7}{r.emu.wall_s:>12.2f}"
                     f"{r.emu.kernel_wall_s:>10.2f}{r.native_host_s:>15.2f}{r.emu.load:>6.1f}  {r.verdict}")
    in_order, compared = order_pairs(results)
    summary = _summary(results) or "no stage at its published shape: no ratio"
    lines.append(f"{summary}; comparable stage pairs in the published order: {in_order}/{compared}")
    for r in results:
        for e in r.errors:
            lines.append(f"{r.stage.number}: the emulator stopped the kernel: {e['kind']}: {e['message']} ({Path(e.get('file', '?')).name}:{e.get('line')})")
    return "\n".join(lines)


def _lab_json(r: LabResult) -> dict:
    return {"stage": r.stage.number, "source": r.source.name, "device": r.device, "shape": r.shape,
            "modelled_ms": r.modelled_ms, "printed_ms": r.printed_ms, "published_ms": r.published_ms,
            "ratio": r.ratio, "emu_wall_s": r.emu.wall_s, "emu_kernel_wall_s": r.emu.kernel_wall_s,
            "native_wall_s": r.native.wall_s, "native_host_s": r.native_host_s, "load": [r.emu.load, r.native.load],
            "verdict": r.verdict,
            "errors": r.errors}


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description="Calibrate the bang_emu cost model against the MatMul lab stages.")
    ap.add_argument("--device", default="mlu370-x8")
    ap.add_argument("--stages", default="01,02,03,04,05,06", help="comma-separated stage numbers")
    ap.add_argument("--lab", type=Path, help="the lab's own programs: a fetched mirror (bare git) or a folder")
    ap.add_argument("--json", type=Path, help="also write the results as JSON")
    args = ap.parse_args(argv)
    wanted = args.stages.split(",")
    if args.lab:
        with tempfile.TemporaryDirectory(prefix="lab-calibration-") as td:
            folder = lab_folder(args.lab, Path(td))
            lab = run_lab(folder, wanted, Path(td), args.device)
            print(format_lab_table(lab, str(args.lab)))
            if args.json:
                args.json.write_text(json.dumps([_lab_json(r) for r in lab], indent=2))
        return 0 if lab and all(r.verdict.endswith("PASSED") for r in lab) else 1
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
