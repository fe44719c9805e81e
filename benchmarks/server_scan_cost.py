"""What the course server's scans of the class cost as the uploads pile up (SQLite), before and after a change, in
one run: the pages' live refresh (`views.change_stamp`, asked once a second by every open page, the instructor's
and a student's), the dashboard's first page (`views.class_page`) and a status poll's place in the queue
(`workers.queue_place`).

    .venv/bin/python benchmarks/server_scan_cost.py --before a6812c3 --uploads 500 --rounds 3

Each side (this tree, and --before's commit in a temporary git worktree, run with this file) makes a SQLite
database by its own migrations, --uploads submissions of --kib KiB of random bytes each (five per student, one
queued), and times each query --repeats times in that tree's code; sides interleaved, --rounds each. Prints the
median milliseconds per query side by side. No server process, no grading: the database's own cost.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
QUERIES = ("change_stamp_class", "change_stamp_student", "class_page", "queue_place")


def measure(uploads: int, kib: int, repeats: int) -> dict:
    """In the tree this process runs from: the database made, then each query timed; ms per query (median)."""
    sys.path[:0] = [str(REPO / "tests" / "server"), str(REPO / "tests")]
    from conftest import ensure_assignment, set_open
    from sqlalchemy import select

    import grader.server.db as db_module
    from grader.server.accounts import add_account
    from grader.server.db import Assignment, Database, Student, Submission, migrate, now
    from grader.server.views import change_stamp, class_page
    from grader.server.workers import queue_place

    root = Path(tempfile.mkdtemp(prefix="scan-cost-"))
    try:
        url = f"sqlite:///{root / 'server.db'}"
        migrate(url)
        db = Database(url)
        ensure_assignment(db, "sigmoid")
        set_open(db, "sigmoid", True)
        students = max(1, uploads // 5)
        for index in range(students):
            add_account(db, f"s{index}", f"Student {index}")
        inline = not hasattr(db_module, "Upload")  # the schema before migration 0009 kept the upload in the row
        queued_id = 0
        with db.session() as s:
            people = list(s.scalars(select(Student).order_by(Student.id)))
            sigmoid = s.scalar(select(Assignment).where(Assignment.name == "sigmoid"))
            for index in range(uploads):
                waiting = index == uploads - 1
                row = dict(student_pk=people[index % students].id, assignment_pk=sigmoid.id, mode="test",
                           content_hash="0" * 64, queue="grade.emu.mlu370-x8",
                           status="queued" if waiting else "done", in_flight=waiting, submitted_at=now(),
                           started_at=None if waiting else now() - 60, reported_at=None if waiting else now() - 20)
                archive = os.urandom(kib << 10)
                sub = Submission(**row, archive=archive) if inline else Submission(**row)
                s.add(sub)
                s.flush()
                if not inline:
                    s.add(db_module.Upload(submission_pk=sub.id, archive=archive))
                queued_id = sub.id
            one = people[0]
        calls = {"change_stamp_class": lambda: change_stamp(db),
                 "change_stamp_student": lambda: change_stamp(db, one),
                 "class_page": lambda: class_page(db),
                 "queue_place": lambda: queue_place(db, queued_id)}
        row = {}
        for name in QUERIES:
            calls[name]()  # the page cache warm, as on a server that keeps answering
            took = []
            for _repeat in range(repeats):
                started = time.perf_counter()
                calls[name]()
                took.append(1000 * (time.perf_counter() - started))
            row[name] = statistics.median(took)
        db.engine.dispose()
        return row
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--before", help="a commit to compare with (checked out in a temporary worktree)")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--uploads", type=int, default=500)
    parser.add_argument("--kib", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args.uploads, args.kib, args.repeats)))
        return 0
    sys.path.insert(0, str(REPO))  # here, not at the top: this file also runs from --before's tree (--measure)
    from benchmarks.worktrees import measured_sides

    rows = measured_sides(args.before, Path(__file__).resolve(),
                          ["--uploads", str(args.uploads), "--kib", str(args.kib), "--repeats", str(args.repeats)],
                          args.rounds, "scan-cost-before-")
    summary = {name: {k: statistics.median(r[k] for r in runs) for k in QUERIES} for name, runs in rows.items()}
    print(f"ms per query, {args.uploads} uploads of {args.kib} KiB (SQLite), median of {args.rounds} round(s)")
    print(f"{'':24}" + "".join(f"{name:>10}" for name in summary) + ("     ratio" if len(summary) > 1 else ""))
    for key in QUERIES:
        values = [s[key] for s in summary.values()]
        ratio = f"{values[0] / values[1]:>9.1f}x" if len(values) > 1 and values[1] else ""
        print(f"{key:24}" + "".join(f"{v:>10.2f}" for v in values) + ratio)
    print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
