"""Host-side guards every runner shares while a sandboxed process runs: a bounded output tail (with a
flood trip-wire) and a byte/file budget on the writable bind mounts, which no tmpfs caps."""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Callable
from pathlib import Path

# Output beyond log_bytes is dropped; this many times log_bytes in total kills the run as a flood.
FLOOD_FACTOR = 16
NOTE_OUTPUT_FLOOD = "output_limit_exceeded"
NOTE_DISK_QUOTA = "disk_quota_exceeded"


class OutputTail:
    """The one output tail of the runners: keeps the last `keep_bytes` of a stream and counts the total; calls
    `on_flood` once past `flood_bytes` (no trip-wire without one: the process runner has its own deadline)."""

    def __init__(self, keep_bytes: int, flood_bytes: int | None = None,
                 on_flood: Callable[[], None] | None = None) -> None:
        self._chunks: deque[bytes] = deque()
        self._kept = 0
        self.keep_bytes = keep_bytes
        self.flood_bytes = flood_bytes
        self.total = 0
        self.flooded = False
        self._on_flood = on_flood
        self._lock = threading.Lock()

    def feed(self, chunk: bytes) -> None:
        with self._lock:
            self.total += len(chunk)
            self._chunks.append(chunk[-self.keep_bytes:])
            self._kept += len(self._chunks[-1])
            while self._kept - len(self._chunks[0]) >= self.keep_bytes:
                self._kept -= len(self._chunks.popleft())
            trip = self.flood_bytes is not None and not self.flooded and self.total > self.flood_bytes
            if trip:
                self.flooded = True
        if trip and self._on_flood is not None:
            # Not in this thread: it must keep draining the stream, or the daemon blocks on the writer and
            # the kill waits for it (seen with docker attach).
            threading.Thread(target=self._on_flood, daemon=True, name="sandbox-flood-kill").start()

    @property
    def dropped(self) -> int:
        """Bytes received but no longer kept (the start of a long output)."""
        return max(0, self.total - self.keep_bytes)

    def text(self) -> str:
        with self._lock:
            data = b"".join(self._chunks)[-self.keep_bytes:]
        return data.decode("utf-8", errors="replace")


class KillSwitch:
    """Stops a running sandbox from the watchers' threads. The first reason (a flood, the disk budget) is kept for
    the outcome's notes; `fired` tells a stop of ours from the sandbox ending or timing out on its own."""

    def __init__(self, stop: Callable[[], None], notes: list[str]) -> None:
        self._stop = stop
        self.notes = notes
        self.fired = threading.Event()

    def __call__(self, reason: str) -> None:
        if not self.fired.is_set():
            self.fired.set()
            self.notes.append(reason)
        self._stop()


def pump(stream: object, tail: OutputTail) -> None:
    """Feeds a byte iterator or a file object into `tail` until it ends (run in a thread)."""
    try:
        if hasattr(stream, "read1"):
            while chunk := stream.read1(1 << 16):  # type: ignore[attr-defined]
                tail.feed(chunk)
        else:
            for chunk in stream:  # type: ignore[attr-defined]
                tail.feed(chunk)
    except (OSError, ValueError):  # stream closed under us when the run was torn down
        pass


def tree_usage(paths: list[Path], stop_bytes: int, stop_files: int) -> tuple[int, int]:
    """(bytes allocated, entries) under `paths`, counting at most up to the limits (cheap on a flood)."""
    used = 0
    files = 0
    stack = list(paths)
    while stack:
        try:
            with os.scandir(stack.pop()) as entries:
                for entry in entries:
                    files += 1
                    try:
                        info = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    used += info.st_blocks * 512  # allocated, so sparse files count as what they really take
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(Path(entry.path))
                    if used > stop_bytes or files > stop_files:
                        return used, files
        except OSError:
            continue
    return used, files


class DiskWatch(threading.Thread):
    """Polls the writable bind mounts and calls `on_exceeded` once they hold more than the budget."""

    def __init__(self, paths: list[Path], max_bytes: int, max_files: int, on_exceeded: Callable[[str], None],
                 interval: float = 0.2) -> None:
        super().__init__(daemon=True, name="sandbox-disk-watch")
        self.paths = paths
        self.max_bytes = max_bytes
        self.max_files = max_files
        self.interval = interval
        self._on_exceeded = on_exceeded
        self._stop_event = threading.Event()
        self.exceeded: str | None = None

    def run(self) -> None:
        while not self._stop_event.wait(self.interval):
            if self.check():
                return

    def check(self) -> bool:
        used, files = tree_usage(self.paths, self.max_bytes, self.max_files)
        if used > self.max_bytes or files > self.max_files:
            self.exceeded = (f"{NOTE_DISK_QUOTA}: writable mounts hold more than "
                             f"{self.max_bytes} bytes or {self.max_files} entries")
            self._on_exceeded(self.exceeded)
            return True
        return False

    def stop(self) -> None:
        self._stop_event.set()
