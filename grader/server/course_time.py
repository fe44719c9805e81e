"""Times as the course server words them: in the course's time zone, with its offset ("2026-12-05 23:59
(UTC+08:00)"), never a clock-only UTC. The zone is the server's setting (`grade serve --timezone`, or
$BANG_GRADER_TIMEZONE), by default the deployment's own (the machine's local zone); one server process serves
one course, so it is set once for the process (set_zone)."""

from __future__ import annotations

import os
from datetime import datetime, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from grader.reporting.formatting import fmt_local_minute

ENV_TIMEZONE = "BANG_GRADER_TIMEZONE"

_zone: tzinfo | None = None


class TimezoneError(ValueError):
    """An unknown time zone name."""


def zone_named(name: str) -> tzinfo:
    """The IANA zone `name` (Asia/Shanghai, UTC...); TimezoneError for an unknown one."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise TimezoneError(f"unknown time zone {name!r} (an IANA name such as Asia/Shanghai or UTC)") from exc


def set_zone(name: str | None) -> None:
    """The course's zone from now on in this process: `name`, else $BANG_GRADER_TIMEZONE, else the machine's."""
    global _zone
    name = name or os.environ.get(ENV_TIMEZONE) or None
    _zone = zone_named(name) if name else None


def course_zone() -> tzinfo:
    return _zone if _zone is not None else datetime.now().astimezone().tzinfo  # type: ignore[return-value]


def course_time(t: float) -> str:
    """A UNIX time to the minute, in the course's zone, with its offset: 2026-12-05 23:59 (UTC+08:00)."""
    return fmt_local_minute(datetime.fromtimestamp(t, course_zone()))


def course_clock(t: float) -> str:
    """A UNIX time's clock to the second, in the course's zone (a phase of a grading, beside its full date)."""
    return f"{datetime.fromtimestamp(t, course_zone()):%H:%M:%S}"
