"""The output tail and the disk watch on their own (the runner tests exercise them under attack)."""

from __future__ import annotations

import threading
import time

from grader.sandbox.watch import DiskWatch, OutputTail, tree_usage


def test_tail_keeps_the_end_and_trips_once():
    tripped = threading.Event()
    calls = []

    def on_flood() -> None:
        calls.append(1)
        tripped.set()

    tail = OutputTail(keep_bytes=10, flood_bytes=100, on_flood=on_flood)
    for i in range(30):
        tail.feed(f"{i:02d}\n".encode())
    assert tail.text() == "\n27\n28\n29\n"
    assert len(tail.text()) == 10 and tail.total == 90 and not tail.flooded
    tail.feed(b"x" * 50)
    tail.feed(b"y" * 50)
    assert tripped.wait(2) and tail.flooded
    time.sleep(0.1)
    assert calls == [1]
    assert tail.text() == "y" * 10


def test_tail_without_a_trip_wire_keeps_the_end_and_counts_what_it_dropped():
    tail = OutputTail(keep_bytes=8)  # as the process runner uses it: no flood limit
    tail.feed(b"a" * 5)
    assert (tail.text(), tail.dropped) == ("aaaaa", 0)
    tail.feed(b"0123456789" * 100)
    assert (tail.text(), tail.dropped, tail.flooded) == ("23456789", 997, False)


def test_tree_usage_counts_allocated_bytes_not_apparent(tmp_path):
    with open(tmp_path / "sparse", "wb") as f:
        f.seek(1 << 30)
        f.write(b"x")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "real").write_bytes(b"y" * (1 << 20))
    used, entries = tree_usage([tmp_path], 1 << 40, 1 << 40)
    assert (1 << 20) <= used < (1 << 20) + (1 << 16)
    assert entries == 3


def test_disk_watch_fires_when_the_budget_is_passed(tmp_path):
    fired: list[str] = []
    watch = DiskWatch([tmp_path], max_bytes=1 << 20, max_files=100, on_exceeded=fired.append, interval=0.05)
    watch.start()
    time.sleep(0.2)
    assert fired == []
    (tmp_path / "big").write_bytes(b"z" * (2 << 20))
    watch.join(timeout=2)
    assert len(fired) == 1 and "disk_quota_exceeded" in fired[0]
