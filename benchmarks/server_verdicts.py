"""Every fixture of the adversarial corpus and the known-bad set through the course server, beside local grading:
do they get the same verdicts? (loopback only, bounded by --limit / --fast-only)

    nice -n 10 .venv/bin/python benchmarks/server_verdicts.py                    # every emu fixture
    nice -n 10 .venv/bin/python benchmarks/server_verdicts.py --fast-only --local --json out.json

Starts a private redis-server, `grade serve` (uvicorn, SQLite) with one student per fixture, and --workers Celery
worker nodes; uploads each fixture as `grade submit --server` would (benchmark mode: every stage, as local
grading) from --clients threads, and compares the verdict with expected.toml's (what
tests/sandbox/test_adversarial_corpus.py and tests/test_reference_kernels.py hold local grading to) and, with
--local, with a local grading of the same folder in the same run (grade_submission, docker sandbox, batch mode).
Prints one row per fixture and the agreement; exits 1 on any disagreement.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "server"))

from cluster import start_server  # noqa: E402 - the tests' launcher of the real parts
from corpus import Fixture, agrees, fixtures, through_server  # noqa: E402

from grader.server.run import start_redis, stop  # noqa: E402


def local_verdict(fixture: Fixture, out: Path) -> str:
    from grader.orchestration.build_cache import default_build_cache
    from grader.orchestration.job import run_job
    from grader.orchestration.options import GradeEnvironment, GradeObserver, GradeRequest

    result = run_job(fixture.gradable(out.parent / "src"),
                     GradeRequest(assignment=fixture.assignment, seed_mode="secret"),
                     GradeEnvironment(sandbox="docker", batch=True, build_cache=default_build_cache()),
                     GradeObserver(out_dir=out)).result
    return str(result.verdict)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--fast-only", action="store_true", help="skip the fixtures expected.toml marks slow")
    parser.add_argument("--limit", type=int, default=None, help="the first N fixtures only")
    parser.add_argument("--only", action="append", default=[], help="this fixture only (e.g. adversarial/fifo_binding; "
                                                                    "repeatable)")
    parser.add_argument("--local", action="store_true", help="grade each locally too and compare")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    chosen = [f for f in fixtures() if not (args.fast_only and f.expected.get("slow"))
              and (not args.only or f.name in args.only)][: args.limit]
    root = Path(tempfile.mkdtemp(prefix="server-verdicts-"))
    students = [f"f{i:03d}" for i in range(len(chosen))]
    broker_proc, broker = start_redis(root / "redis")
    server = start_server(root / "server", broker, students, extra=["-a", "matmul"])
    rows: dict[str, dict] = {}
    load_before = os.getloadavg()
    started = time.monotonic()
    try:
        for i in range(args.workers):
            server.add_worker(f"slot{i}")
        todo = list(zip(students, chosen, strict=True))
        lock = threading.Lock()

        def client() -> None:
            while True:
                with lock:
                    if not todo:
                        return
                    who, fixture = todo.pop(0)
                verdict, seconds = through_server(server, who, fixture)
                rows[fixture.name] = {"fixture": fixture.name, "expected": sorted(fixture.allowed()),
                                      "server": verdict, "server_s": round(seconds, 1)}
                print(f"{fixture.name:40} server {verdict:20} ({seconds:.0f} s)", flush=True)

        threads = [threading.Thread(target=client) for _ in range(args.clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        server.stop()
        stop(broker_proc)
    server_wall = time.monotonic() - started
    if args.local:
        for fixture in chosen:
            t0 = time.monotonic()
            rows[fixture.name]["local"] = local_verdict(fixture, root / "local" / fixture.path.name)
            rows[fixture.name]["local_s"] = round(time.monotonic() - t0, 1)
    agree = 0
    print(f"\n{'fixture':40} {'expected (local)':34} {'server':40} {'local run':18} same")
    for fixture in chosen:
        row = rows[fixture.name]
        same = agrees(row["server"], set(row["expected"])) and row.get("local", row["server"]) in (
            row["server"], *(["ungradable_layout"] if row["server"].startswith("refused") else []))
        row["same"] = same
        agree += same
        print(f"{fixture.name:40} {'/'.join(row['expected']) or '(any)':34} {row['server'][:40]:40} "
              f"{row.get('local', ''):18} {'yes' if same else 'NO'}")
    summary = {"fixtures": len(chosen), "agree": agree, "workers": args.workers, "server_wall_s": round(server_wall, 1),
               "load_before": [round(x, 1) for x in load_before], "load_after": [round(x, 1) for x in os.getloadavg()]}
    print(f"\n{agree}/{len(chosen)} fixtures: the server's verdict is local grading's; server wall {server_wall:.0f} s "
          f"with {args.workers} workers; load average {summary['load_before']} -> {summary['load_after']}")
    if args.json:
        args.json.write_text(json.dumps({"summary": summary, "rows": list(rows.values())}, indent=2))
    return 0 if agree == len(chosen) else 1


if __name__ == "__main__":
    sys.exit(main())
