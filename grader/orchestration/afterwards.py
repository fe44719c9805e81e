"""Tidying a grading's answer need not wait for: its sandboxes stopped and removed, its work folder discarded
(issue 41: a third of a second at the end of every warm grading, two containers killed, waited for and removed
one after the other before the report could be written).

run_job opens a scope (`tidy_after`) around the grading and its results.json and report; inside it, `tidy(work)`
runs `work` in a thread of its own and the scope's end waits for every such thread, so nothing outlives the job
(a `grade submit` exits, a batch worker takes its next student, with no container of this one left). Outside a
scope (a driver calling grade_submission directly) `tidy` runs the work at once, as before. The scope is the
calling context's own (a ContextVar): two gradings on two threads of a server never wait for each other's.

Nothing a grade depends on is read after the tidy starts: the rounds' and replays' outputs are read back, the
scores and findings made, before the pipeline hands its sandboxes over.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_pending: ContextVar[list[threading.Thread] | None] = ContextVar("bang_grader_tidy", default=None)


@contextmanager
def tidy_after() -> Iterator[list[threading.Thread]]:
    """Within, `tidy(work)` runs beside what follows; leaving waits for all of it (however the block ends).
    Yields the threads started so far (for the record: tests, benchmarks)."""
    pending: list[threading.Thread] = []
    token = _pending.set(pending)
    try:
        yield pending
    finally:
        _pending.reset(token)
        for thread in pending:
            thread.join()


def tidy(work: Callable[[], None], name: str = "tidy") -> None:
    """`work` in a thread of its own inside a tidy_after scope (waited for at its end), else now. Whatever it
    raises is its own: a tidy that fails leaves what it could not remove to the runner's sweep of leftovers."""
    pending = _pending.get()
    if pending is None:
        _quietly(work)
        return
    thread = threading.Thread(target=_quietly, args=(work,), name=name, daemon=True)
    thread.start()
    pending.append(thread)


def _quietly(work: Callable[[], None]) -> None:
    try:
        work()
    except Exception:  # noqa: BLE001 -- see tidy(): the grade is made; leftovers are swept
        logging.getLogger(__name__).warning("tidying after a grading failed", exc_info=True)
