"""The course server under load, beside `grade batch` on the same class, in one run (loopback only, bounded).

    .venv/bin/python benchmarks/server_throughput.py                          # 200 submissions, 50 clients
    .venv/bin/python benchmarks/server_throughput.py --submissions 8 --clients 4 --json out.json

Starts a private redis-server, `grade serve` (uvicorn, SQLite) with one student per client, and one Celery
worker node per device slot (the batch's slots, or --workers). Each client uploads its share of the
submissions one after another (one in flight per student, as the server allows), following each to its
result: the latency is upload start -> report fetched. Every submission is the sigmoid vector reference in
`benchmark` mode (every stage, as the batch grades) with a one-line note of its own: distinct content (the
batch grades identical twins one after another, waiting for the first's build) but the same sources, so the
build cache serves both sides equally after the first build. Then `grade batch` grades a class folder of the
same submissions with the same number of workers. Prints p50/p95 latency, the server's throughput and the
batch's, and the load average the machine ran at, side by side.
"""

from __future__ import annotations

import argparse
import json
import os
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
            while http.get(f"/api/submissions/{sub_id}").json()["status"] != "done":
                time.sleep(0.5)
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
    server = start_server(root / "server", broker, students)
    latencies: list[float] = []
    errors: list[str] = []
    loads = [os.getloadavg()]  # the machine is shared: the load each side ran at goes in the report
    try:
        for i in range(workers):
            server.add_worker(f"slot{i}")
        time.sleep(5)  # the nodes connect
        started = time.monotonic()
        threads = [threading.Thread(target=client, args=(server, who, mine, latencies, errors))
                   for who, mine in zip(students, shares, strict=True) if mine]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        server_wall = time.monotonic() - started
        loads.append(os.getloadavg())
    finally:
        server.stop()
        stop(broker_proc)
    # The benchmark's server trusts its seed (--trust-seed: its reference check is timed by nobody), so the batch
    # skips it too (an empty reference folder), and its similarity step, which runs after the grading it times.
    (root / "no-references").mkdir()
    batch = run_batch(class_dir, "sigmoid", root / "batch", workers=workers, progress=False,
                      reference_root=root / "no-references", similarity=SimilarityOptions(enabled=False))
    loads.append(os.getloadavg())
    latencies.sort()
    row = {
        "submissions": args.submissions, "clients": args.clients, "workers": workers, "errors": errors,
        "server_wall_s": round(server_wall, 1), "server_per_min": round(60 * len(latencies) / server_wall, 1),
        "p50_s": round(statistics.median(latencies), 1) if latencies else None,
        "p95_s": round(latencies[max(0, int(0.95 * len(latencies)) - 1)], 1) if latencies else None,
        "batch_wall_s": round(batch.wall_seconds, 1), "batch_per_min": round(batch.per_minute, 1),
        "load_avg_1_5_15": {"start": loads[0], "after_server": loads[1], "after_batch": loads[2]},
    }
    print(f"{'':22}{'server':>10}{'batch':>10}")
    print(f"{'submissions graded':22}{len(latencies):>10}{batch.graded:>10}")
    print(f"{'wall (s)':22}{row['server_wall_s']:>10}{row['batch_wall_s']:>10}")
    print(f"{'per minute':22}{row['server_per_min']:>10}{row['batch_per_min']:>10}")
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
