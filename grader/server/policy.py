"""What the server refuses, and the intake's decisions on an upload as pure functions of plain values.

Refused is a request the server refuses, worded for the student, with the HTTP status it maps to. The intake
(intake.take_submission) asks, in this order: the student's refused uploads (check_refused, before the upload is
read), the mode (check_mode), the assignment open (check_open), the deadline and its late window (lateness), the
hourly rate (check_rate), the device type (device_for) and whether a live worker serves it (check_served), and
last the upload's check (refused_upload maps its UploadError): the cheap decisions before the costly one. Each
takes the values the intake read (the assignment's row, the clock, the student's uploads of the last hour, the
live workers' types) and returns its decision or raises Refused; none reads the database or the clock, so each is
tested in milliseconds (tests/server/test_intake_policy.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from grader.i18n import _
from grader.server.course_time import course_time
from grader.server.db import MODES
from grader.server.devices import DeviceTypeError, device_type
from grader.server.uploads import UploadError

RATE_WINDOW_SECONDS = 3600.0  # the hourly rate's window: uploads after `at - RATE_WINDOW_SECONDS` count


class Refused(Exception):
    """A request the server refuses, worded for the student; `status` is the HTTP status it maps to, and
    `retry_after` (seconds) when asking again later helps (a 429 always has it: the Retry-After header).
    Nothing was stored: it does not count as an attempt."""

    def __init__(self, message: str, status: int = 400, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after


def check_mode(mode: str) -> None:
    """Refused unless `mode` is one the server grades in (db.MODES: test, benchmark, final)."""
    if mode not in MODES:
        raise Refused(_("unknown mode {mode!r}: one of {modes}").format(mode=mode, modes=", ".join(MODES)))


def refused_upload(error: UploadError) -> Refused:
    """An upload its check refused (uploads.inspect_upload), as the server answers: 413 past the compressed
    size cap (MAX_UPLOAD_BYTES), else 400 (not a readable archive, a link, past the intake's file caps)."""
    return Refused(str(error), 413 if error.too_large else 400)


def malformed(fields: Sequence[str]) -> Refused:
    """A request missing or mangling `fields` (400)."""
    return Refused(_("malformed request: missing or invalid {fields}").format(fields=", ".join(fields)))


def check_open(name: str, *, is_open: bool, guard_failed: bool, opening: bool = False) -> None:
    """Refused (403) while assignment `name` is closed: its reference-seed guard failed on its seed (the grader is
    being fixed, the instructor was told), it is being opened (the guard runs: `opening`), or it is not open (not
    yet guarded, or closed by the instructor)."""
    if guard_failed:
        raise Refused(_("assignment {name!r} is closed: the grader is being fixed; your instructor has been "
                        "told").format(name=name), 403)
    if not is_open and opening:
        raise Refused(_("assignment {name!r} is being opened (its reference kernels are checked first): try again "
                        "in a few minutes").format(name=name), 403, retry_after=60.0)
    if not is_open:
        raise Refused(_("assignment {name!r} is closed").format(name=name), 403)


def lateness(name: str, at: float, deadline: float | None, late_until: float | None) -> bool:
    """Whether an upload at `at` (a UNIX time) is late: False before the deadline or without one, True inside
    the late window after it. Refused (403) once uploads are closed: after `late_until`, or after the deadline
    when there is no late window."""
    closes = late_until if late_until is not None else deadline
    if closes is not None and at > closes:
        raise Refused(_("the deadline of {name!r} has passed ({when}): uploads are closed").format(
            name=name, when=course_time(closes)), 403)
    return deadline is not None and at > deadline


def check_rate(name: str, at: float, per_hour: int | None, recent: Sequence[float]) -> None:
    """Refused (429) when the student already made `per_hour` uploads of `name` in the hour before `at`
    (`recent`: their times after `at - RATE_WINDOW_SECONDS`, oldest first, refused uploads among them); the
    message and Retry-After say from when the next one is accepted. `per_hour` None or 0: no limit."""
    if per_hour and len(recent) >= per_hour:
        opens = recent[-per_hour] + RATE_WINDOW_SECONDS
        raise Refused(_("at most {n} uploads an hour for {name!r}: the next one is accepted from {when}")
                      .format(n=per_hour, name=name, when=course_time(opens)), 429, retry_after=opens - at)


# Refused uploads a student may make in an hour, whatever the assignment's rate: each one was read and checked,
# so past this the server reads no more of theirs until the hour has passed (they cannot stall it).
REFUSED_PER_HOUR = 20


def check_refused(at: float, refused: Sequence[float]) -> None:
    """Refused (429, before the upload is read) when the student's uploads refused in the hour before `at`
    (`refused`: their times, oldest first) reached REFUSED_PER_HOUR."""
    if len(refused) >= REFUSED_PER_HOUR:
        opens = refused[-REFUSED_PER_HOUR] + RATE_WINDOW_SECONDS
        raise Refused(_("{n} of your uploads were refused in the last hour: fix what they said; the next one is "
                        "accepted from {when}").format(n=len(refused), when=course_time(opens)), 429,
                      retry_after=opens - at)


def check_served(kind: str, served: Sequence[str]) -> None:
    """Refused (409) when no live worker grades device type `kind` now (`served`: the types live workers serve):
    the upload would wait for nobody. The message says which types are served now."""
    if kind in served:
        return
    if not served:
        raise Refused(_("no worker grades device type {type} now (no worker is running): try again later, or ask "
                        "your instructor").format(type=kind), 409)
    raise Refused(_("no worker grades device type {type} now; served now: {served}").format(
        type=kind, served=", ".join(served)), 409)


def device_for(name: str, mode: str, asked: str | None, default: str | None,
               calibrated: Callable[[str], bool]) -> str:
    """The device type an upload is graded on: the one `asked` for, else the assignment's `default`, as the device
    table spells it (None: the table's default type). Refused for a type the table lacks, and, outside test
    mode, for a type other than the assignment's that has no speed thresholds yet (`calibrated(type)`, asked
    only then: intake._calibrated)."""
    try:
        kind = device_type(asked or default)
    except DeviceTypeError as exc:
        raise Refused(str(exc)) from exc
    if mode != "test" and kind != device_type(default) and not calibrated(kind):
        raise Refused(_("{name!r} has no speed thresholds for device type {type} yet (your instructor calibrates "
                        "them with `grade calibrate --device {type}`): submit for {default}, or in test "
                        "mode").format(name=name, type=kind, default=device_type(default)))
    return kind
