"""What following a submission costs the course server: `grade serve`'s CPU per status poll, before and after a
change, in one run (loopback only; no grading runs, so it holds on a loaded machine, where
server_throughput.py's wall times do not).

    .venv/bin/python benchmarks/server_poll_cost.py --before abfdfa4 --rounds 2
    .venv/bin/python benchmarks/server_poll_cost.py --document results.json   # a real result's JSON (default: a small one)

Each side (this tree, and --before's commit checked out in a temporary git worktree) starts a private redis-server
and `grade serve` (SQLite) with a class of --students students, each with three graded benchmark runs (committed
through grading.commit_result, as a worker commits them) and one upload queued (a stand-by worker takes it and
grades nothing). Then every student polls its queued upload and its latest graded run --polls times each (GET
/api/submissions/ID, as `grade submit --server` follows one), and the server process's CPU seconds over the polls
are read from /proc. Sides interleaved, --rounds each. Prints CPU ms per poll of each kind, and how often the
server asks a queued student to poll (its `poll_seconds`; half a second from a server that says nothing).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def server_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(students: int, polls: int, document: Path | None) -> dict:
    """In the tree this process runs from: the class set up, then the polls; CPU ms per poll of each kind."""
    sys.path[:0] = [str(REPO / "tests" / "server"), str(REPO / "tests")]
    from cluster import start_server
    from factories import grade_result
    from sqlalchemy import select

    from grader.results import GradeResult
    from grader.server.db import Assignment, Database, Student, Submission, now
    from grader.server.grading import commit_result
    from grader.server.run import start_redis, stop
    from grader.server.uploads import pack_folder

    result = GradeResult.from_json(document.read_text()) if document else grade_result(assignment="sigmoid")
    root = Path(tempfile.mkdtemp(prefix="poll-cost-"))
    names = [f"c{i:03d}" for i in range(students)]
    broker_proc, broker = start_redis(root / "redis")
    server = start_server(root / "server", broker, names)
    try:
        db = Database(server.db_url)
        done: dict[str, int] = {}
        for who in names:
            for _run in range(3):
                with db.session() as s:
                    student = s.scalar(select(Student).where(Student.student_id == who))
                    assignment = s.scalar(select(Assignment).where(Assignment.name == "sigmoid"))
                    sub = Submission(student_pk=student.id, assignment_pk=assignment.id, mode="benchmark",
                                     content_hash="0" * 64, queue="grade.emu.mlu370-x8", status="running",
                                     in_flight=True, submitted_at=now() - 60, started_at=now() - 50)
                    s.add(sub)
                    s.flush()
                    done[who] = sub.id
                assert commit_result(db, done[who], result) == "committed"
        queued: dict[str, int] = {}
        archive = pack_folder(REPO / "reference_kernels" / "sigmoid" / "vector")
        for who in names:
            with server.client(who) as http:
                r = http.post("/api/submissions", data={"assignment": "sigmoid", "mode": "benchmark"},
                              files={"archive": ("s.tar.gz", archive, "application/gzip")})
                assert r.status_code == 201, r.text
                queued[who] = r.json()["id"]
        row: dict = {}
        for kind, ids in (("queued", queued), ("done", done)):
            before = server_cpu(server.proc.pid)
            for who in names:
                with server.client(who) as http:
                    for _poll in range(polls):
                        state = http.get(f"/api/submissions/{ids[who]}").json()
                        assert state["status"] == ("queued" if kind == "queued" else "done"), state
            row[f"{kind}_ms"] = 1000 * (server_cpu(server.proc.pid) - before) / (polls * students)
            if kind == "queued":
                row["poll_seconds"] = state.get("poll_seconds") or 0.5
    finally:
        server.stop()
        stop(broker_proc)
        shutil.rmtree(root, ignore_errors=True)
    return row


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--before", help="a commit to compare with (checked out in a temporary worktree)")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--students", type=int, default=10)
    parser.add_argument("--polls", type=int, default=50)
    parser.add_argument("--document", type=Path, default=None, help="a result's JSON to commit for every run")
    parser.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args.students, args.polls, args.document)))
        return 0
    sys.path.insert(0, str(REPO))  # here, not at the top: this file also runs from --before's tree (--measure)
    from benchmarks.worktrees import measured_sides

    measure_args = ["--students", str(args.students), "--polls", str(args.polls)]
    if args.document:
        measure_args += ["--document", str(args.document.resolve())]
    rows = measured_sides(args.before, Path(__file__).resolve(), measure_args, args.rounds, "poll-cost-before-",
                          timeout=1800)
    summary = {name: {k: statistics.median(r[k] for r in runs) for k in runs[0]} for name, runs in rows.items()}
    print(f"{'':34}" + "".join(f"{name:>10}" for name in summary))
    for key, label in (("queued_ms", "CPU ms per poll, queued"), ("done_ms", "CPU ms per poll, graded"),
                       ("poll_seconds", "a queued student asks every (s)")):
        print(f"{label:34}" + "".join(f"{s[key]:>10.2f}" for s in summary.values()))
    if "before" in summary:
        b, a = summary["before"], summary["after"]
        queued_rate = (b["queued_ms"] / b["poll_seconds"]) / (a["queued_ms"] / a["poll_seconds"])
        print(f"server CPU while a class waits: {queued_rate:.1f}x less; per graded poll "
              f"{b['done_ms'] / a['done_ms']:.1f}x less ({args.students} students, {args.polls} polls each, "
              f"median of {args.rounds})")
    print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
