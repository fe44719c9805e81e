"""The worker -> supervisor control channel: one JSON line per event on an inherited pipe.

Events: "loading" (extension and module being loaded), "start" <id>, "done" <id>. Kept free of torch so the
supervisor can use it without importing what the worker imports.
"""

from __future__ import annotations

import json
import os

from .protocol import ExitCode

# Worker exit status meaning "the remaining calls need a new worker": the supervisor starts one at the next call.
FRESH_WORKER_EXIT = ExitCode.FRESH_WORKER


class ControlChannel:
    """Writes events; silent when the worker runs by hand without a supervisor."""

    def __init__(self, fd: int | None) -> None:
        self._file = os.fdopen(fd, "w", buffering=1) if fd is not None else None

    def send(self, event: str, call_id: str | None = None) -> None:
        if self._file is not None:
            self._file.write(json.dumps({"event": event, "id": call_id}) + "\n")


def parse_event(line: bytes) -> tuple[str, str | None] | None:
    """(event, call id), or None for a line that is not ours (student code can write to the pipe too)."""
    try:
        message = json.loads(line)
        return str(message["event"]), message.get("id")
    except (ValueError, KeyError, TypeError):
        return None
