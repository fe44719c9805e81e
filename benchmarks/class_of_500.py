"""A whole class through `grade batch` once: wall time, throughput, CPU per graded submission and peak memory
(issue 41: "a `grade batch` of 500 generated students run once, its wall time and peak memory").

    .venv/bin/python benchmarks/class_of_500.py [--students 500] [--distinct N | --all-distinct]
        [--workers W] [--json out.json] [--keep DIR]

The class is batch_throughput.py's: by default its mix of references, known-bad fixtures, exact duplicates,
renamed copies and zips (10 distinct sigmoid fixtures); `--all-distinct` makes every kernel differ by a comment
(every submission is built). One cold run (empty build cache) of `grade batch` in a process of its own, every
container under one cgroup (BANG_GRADER_DOCKER_CGROUP_PARENT). Sampled every second while it runs:
  grader RSS      the summed resident memory of `grade batch` and every process below it (workers, compilers
                  the host runs); peak and when
  containers      the containers' cgroup memory (usage, page cache included: tmpfs mounts are charged there);
                  peak, and the kernel's own high-water mark of that cgroup (memory.max_usage_in_bytes, v1)
  machine         MemTotal - MemAvailable, less its value before the run (other work on the machine counts too)
CPU seconds: the containers' (their cgroup) and the grader's processes' (getrusage of the reaped child tree).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from contextlib import suppress
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.batch_throughput import generate_class, generate_distinct_class  # noqa: E402
from benchmarks.cpu_ledger import CGROUP, cgroup_cpu_seconds, daemon_cpu_seconds, remove_cgroup  # noqa: E402
from grader.sandbox.docker_settings import CGROUP_PARENT_ENV  # noqa: E402

PAGE = os.sysconf("SC_PAGE_SIZE")


def tree_rss(root: int) -> int:
    """Bytes resident in process `root` and every process below it."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        with suppress(OSError, ValueError, IndexError):
            stat = (proc / "stat").read_text()
            ppid = int(stat[stat.rindex(")") + 2:].split()[1])
            children.setdefault(ppid, []).append(int(proc.name))
            rss[int(proc.name)] = int((proc / "statm").read_text().split()[1]) * PAGE
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        total += rss.get(pid, 0)
        todo += children.get(pid, [])
    return total


def cgroup_memory(group: str, name: str) -> int | None:
    for path in (CGROUP / "memory" / group.strip("/") / f"memory.{name}",  # v1
                 CGROUP / group.strip("/") / ("memory.current" if name == "usage_in_bytes" else "memory.peak")):
        with suppress(OSError, ValueError):
            return int(path.read_text())
    return None


def machine_used() -> int:
    info = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
    return (int(info["MemTotal"].split()[0]) - int(info["MemAvailable"].split()[0])) * 1024


class Sampler(threading.Thread):
    def __init__(self, pid: int, group: str) -> None:
        super().__init__(daemon=True)
        self.pid, self.group, self.stop = pid, group, threading.Event()
        self.started, self.base = time.monotonic(), machine_used()
        self.peaks = {"grader_rss": (0, 0.0), "containers": (0, 0.0), "machine": (0, 0.0)}

    def run(self) -> None:
        while not self.stop.wait(1.0):
            at = round(time.monotonic() - self.started, 1)
            for key, value in (("grader_rss", tree_rss(self.pid)), ("containers", cgroup_memory(self.group, "usage_in_bytes") or 0),
                               ("machine", machine_used() - self.base)):
                if value > self.peaks[key][0]:
                    self.peaks[key] = (value, at)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--students", type=int, default=500)
    parser.add_argument("--distinct", type=int, default=None, help="fixtures the class is made of (default: all)")
    parser.add_argument("--all-distinct", action="store_true", help="every kernel differs (each one is built)")
    parser.add_argument("--workers", type=int, default=None, help="default: grade batch's own")
    parser.add_argument("--keep", type=Path, default=None, help="keep the class and batch folders here")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--deadline", type=float, default=None, metavar="SECONDS",
                        help="stop the batch after this long (Ctrl-C's way: it ends its workers) and report what was "
                             "graded by then, marked partial")
    args = parser.parse_args(argv)

    work = args.keep or Path(tempfile.mkdtemp(prefix="class-of-500-"))
    if args.keep and work.exists():
        shutil.rmtree(work)
    subs = work / "class"
    kinds = (generate_distinct_class(subs, "sigmoid", args.students, False) if args.all_distinct
             else generate_class(subs, "sigmoid", args.students, args.distinct))
    group = f"/bang-bench-class-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "PYTHONPATH": f"{REPO}:{REPO / 'sandbox'}", "BANG_GRADER_BUILD_CACHE": str(work / "cache"),
           CGROUP_PARENT_ENV: group}
    argv_ = [sys.executable, "-m", "grader.cli", "batch", str(subs), "-a", "sigmoid", "--out", str(work / "batch"),
             "--sandbox", "docker", *(["--workers", str(args.workers)] if args.workers else [])]
    print(f"class of {len(kinds)} ({len({v.split(' (')[0] for v in kinds.values()})} distinct fixtures) in {subs}",
          file=sys.stderr)
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    host0, daemon0, load0 = usage.ru_utime + usage.ru_stime, daemon_cpu_seconds(), os.getloadavg()
    started = time.monotonic()
    proc = subprocess.Popen(argv_, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    sampler = Sampler(proc.pid, group)
    sampler.start()
    partial = False
    try:
        output = proc.communicate(timeout=args.deadline)[0]
    except subprocess.TimeoutExpired:
        partial = True
        proc.send_signal(signal.SIGINT)
        try:
            output = proc.communicate(timeout=120)[0]
        except subprocess.TimeoutExpired:
            proc.kill()
            output = proc.communicate()[0]
    wall = time.monotonic() - started
    sampler.stop.set()
    sampler.join()
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    host = usage.ru_utime + usage.ru_stime - host0
    containers = cgroup_cpu_seconds(group) or 0.0
    kernel_peak = cgroup_memory(group, "max_usage_in_bytes")
    daemon = daemon_cpu_seconds() - daemon0
    results = list((work / "batch" / "results").glob("*.json"))
    verdicts: dict[str, int] = {}
    for path in results:
        with suppress(OSError, ValueError):
            verdict = json.loads(path.read_text()).get("verdict", "?")
            verdicts[verdict] = verdicts.get(verdict, 0) + 1
    remove_cgroup(group)
    graded = len(results)
    report = {
        "students": len(kinds), "graded": graded, "partial": partial, "returncode": proc.returncode,
        "wall_s": round(wall, 1),
        "per_minute": round(60 * graded / wall, 2) if graded else None,
        "cpu_s": {"containers": round(containers, 1), "grader": round(host, 1), "daemon_upper_bound": round(daemon, 1),
                  "per_submission": round((containers + host + daemon) / graded, 2) if graded else None},
        "peak_bytes": {k: v[0] for k, v in sampler.peaks.items()} | {"containers_kernel_high_water": kernel_peak},
        "peak_at_s": {k: v[1] for k, v in sampler.peaks.items()},
        "verdicts": verdicts, "loadavg_before": load0, "loadavg_after": os.getloadavg(),
    }
    mib = 1 << 20
    print(f"{graded}/{len(kinds)} graded in {wall:.0f} s ({report['per_minute']}/min), rc {proc.returncode}"
          + (f" -- PARTIAL: stopped at the {args.deadline:.0f} s deadline" if partial else ""))
    print(f"CPU s: containers {containers:.0f} + grader {host:.0f} + daemon <= {daemon:.0f}  = "
          f"{report['cpu_s']['per_submission']} per graded submission")
    print("peak memory: " + ", ".join(f"{k} {v[0] / mib:.0f} MiB at {v[1]:.0f} s" for k, v in sampler.peaks.items())
          + (f", containers' cgroup high-water {kernel_peak / mib:.0f} MiB" if kernel_peak else ""))
    print(f"verdicts: {verdicts}; load before {load0[0]:.1f}, after {os.getloadavg()[0]:.1f}")
    if proc.returncode:
        print(output[-3000:], file=sys.stderr)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if proc.returncode == 0 and graded == len(kinds) and not partial else 1


if __name__ == "__main__":
    raise SystemExit(main())
