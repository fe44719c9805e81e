"""The course server under load, beside `grade batch` on the same class, in one run (loopback only, bounded).

    .venv/bin/python benchmarks/server_throughput.py                          # 200 submissions, 50 clients
    .venv/bin/python benchmarks/server_throughput.py --submissions 8 --clients 4 --json out.json

Starts a private redis-server, `grade serve` (uvicorn, SQLite) with one student per client, and one Celery
worker node per device slot (the batch's slots, or --workers). Each client uploads its share of the
submissions one after another (one in flight per student, as the server allows), following each to its
result as `grade submit --server` does (asking again when the server says: its `poll_seconds`, half a second
from a server that says nothing): the latency is upload start -> report fetched. Every submission is the sigmoid vector reference in
`benchmark` mode (every stage, as the batch grades) with a one-line note of its own: distinct content (the
batch grades identical twins one after another, waiting for the first's build) but the same sources, so the
build cache serves both sides equally after the first build. Then `grade batch` grades a class folder of the
same submissions with the same number of workers. Prints p50/p95 latency, the server's throughput and the
batch's, the host processes' CPU seconds per graded submission on each side (grade serve, the worker nodes and
the clients, against the batch's driver and workers; the sandboxes' containers are docker's, alike on both sides),
and the load average the machine ran at, side by side.

Before and after a change, on the same machine load: run this file from two trees in turn (the same file copied
into the older one; PYTHONPATH and the working directory that tree's), e.g. interleaved old, new, old, new.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "server"))

from cluster import start_server  # noqa: E402 - the tests' launcher of the real parts

from grader.batch.similarity import SimilarityOptions  # noqa: E402
from grader.drivers.batch import device_slots, run_batch  # noqa: E402
from grader.server.run import start_redis, stop  # noqa: E402
from grader.server.uploads import pack_folder  # noqa: E402

SUBMISSION = REPO / "reference_kernels" / "sigmoid" / "vector"


def cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system) of process `pid`, its reaped children and its live descendants (/proc)."""
    tick = os.sysconf("SC_CLK_TCK")
    parents: dict[int, int] = {}
    times: dict[int, float] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(stat.parent.name)] = int(fields[1])
        times[int(stat.parent.name)] = sum(int(f) for f in fields[11:15]) / tick  # utime stime cutime cstime
    total, todo = 0.0, [pid]
    while todo:
        found = todo.pop()
        total += times.get(found, 0.0)
        todo += [child for child, parent in parents.items() if parent == found]
    return total


def own_cpu() -> tuple[float, float]:
    """(this process's CPU seconds, its reaped children's)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime, kids.ru_utime + kids.ru_stime


def client(server, who: str, uploads: list[bytes], latencies: list[float], errors: list[str]) -> None:  # noqa: ANN001
    with server.client(who) as http:
        for data in uploads:
            started = time.monotonic()
            r = http.post("/api/submissions", data={"assignment": "sigmoid", "mode": "benchmark"},
                          files={"archive": ("s.tar.gz", data, "application/gzip")})
            if r.status_code != 201:
                errors.append(f"{who}: {r.status_code} {r.text[:200]}")
                return
            sub_id = r.json()["id"]
            while (state := http.get(f"/api/submissions/{sub_id}").json())["status"] != "done":
                time.sleep(max(0.5, state.get("poll_seconds") or 0.0))  # as grade submit --server follows it
            if http.get(f"/api/submissions/{sub_id}/report").status_code != 200:
                errors.append(f"{who}: no report for #{sub_id}")
            latencies.append(time.monotonic() - started)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--submissions", type=int, default=200)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--workers", type=int, default=None, help="worker slots (default: the batch's)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    workers = len(device_slots("emu", args.workers, None))
    root = Path(tempfile.mkdtemp(prefix="server-bench-"))
    class_dir = root / "class"
    for i in range(args.submissions):  # the class both sides grade
        shutil.copytree(SUBMISSION, class_dir / f"s{i:03d}")
        (class_dir / f"s{i:03d}" / "NOTES.md").write_text(f"submission {i}\n")
    uploads = [pack_folder(class_dir / f"s{i:03d}") for i in range(args.submissions)]
    students = [f"c{i:03d}" for i in range(args.clients)]
    shares = [uploads[i::args.clients] for i in range(args.clients)]
    broker_proc, broker = start_redis(root / "redis")
    server = start_server(root / "server", broker, students, standby=False)  # the real workers are its workers
    latencies: list[float] = []
    errors: list[str] = []
    loads = [os.getloadavg()]  # the machine is shared: the load each side ran at goes in the report
    try:
        for i in range(workers):
            server.add_worker(f"slot{i}")
        time.sleep(5)  # the nodes connect
        started, clients_before = time.monotonic(), own_cpu()[0]
        threads = [threading.Thread(target=client, args=(server, who, mine, latencies, errors))
                   for who, mine in zip(students, shares, strict=True) if mine]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        server_wall = time.monotonic() - started
        loads.append(os.getloadavg())
        # host processes only (the sandboxes' containers are docker's, on both sides alike)
        cpu = {"server": cpu_seconds(server.proc.pid), "workers": sum(cpu_seconds(w.pid) for w in server.workers),
               "clients": own_cpu()[0] - clients_before}
    finally:
        server.stop()
        stop(broker_proc)
    # The benchmark's server trusts its seed (--trust-seed: its reference check is timed by nobody), so the batch
    # skips it too (an empty reference folder), and its similarity step, which runs after the grading it times.
    (root / "no-references").mkdir()
    batch_before = own_cpu()
    batch = run_batch(class_dir, "sigmoid", root / "batch", workers=workers, progress=False,
                      reference_root=root / "no-references", similarity=SimilarityOptions(enabled=False))
    loads.append(os.getloadavg())
    batch_after = own_cpu()
    cpu["batch"] = (batch_after[0] - batch_before[0]) + (batch_after[1] - batch_before[1])
    latencies.sort()
    row = {
        "submissions": args.submissions, "clients": args.clients, "workers": workers, "errors": errors,
        "server_wall_s": round(server_wall, 1), "server_per_min": round(60 * len(latencies) / server_wall, 1),
        "p50_s": round(statistics.median(latencies), 1) if latencies else None,
        "p95_s": round(latencies[max(0, int(0.95 * len(latencies)) - 1)], 1) if latencies else None,
        "batch_wall_s": round(batch.wall_seconds, 1), "batch_per_min": round(batch.per_minute, 1),
        "host_cpu_s": {k: round(v, 1) for k, v in cpu.items()},
        "load_avg_1_5_15": {"start": loads[0], "after_server": loads[1], "after_batch": loads[2]},
    }
    print(f"{'':22}{'server':>10}{'batch':>10}")
    print(f"{'submissions graded':22}{len(latencies):>10}{batch.graded:>10}")
    print(f"{'wall (s)':22}{row['server_wall_s']:>10}{row['batch_wall_s']:>10}")
    print(f"{'per minute':22}{row['server_per_min']:>10}{row['batch_per_min']:>10}")
    per = {k: v / max(1, len(latencies) if k != "batch" else batch.graded) for k, v in cpu.items()}
    print(f"{'host CPU-s / sub':22}{per['server'] + per['workers'] + per['clients']:>10.2f}{per['batch']:>10.2f}"
          f"   (server: grade serve {per['server']:.2f}, worker nodes {per['workers']:.2f}, clients "
          f"{per['clients']:.2f}; sandboxes not counted)")
    print(f"upload -> report: p50 {row['p50_s']} s, p95 {row['p95_s']} s ({args.clients} clients, {workers} workers)")
    print("load average (1, 5, 15 min): start {}, after the server {}, after the batch {}".format(
        *(" ".join(f"{x:.1f}" for x in load) for load in loads)))
    if errors:
        print("errors:", *errors, sep="\n  ")
    if args.json:
        args.json.write_text(json.dumps(row, indent=2))
    shutil.rmtree(root, ignore_errors=True)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
