"""Number formatting for the report: times, bytes, rates and DIFF metrics, readable at a glance."""

from __future__ import annotations

import math
from datetime import datetime

from grader.i18n import _


def fmt_time_us(us: float | None) -> str:
    if us is None or not math.isfinite(us):
        return "—"
    if us >= 1e6:
        return f"{us / 1e6:.3g} s"
    if us >= 1e3:
        return f"{us / 1e3:.3g} ms"
    if us >= 1:
        return f"{us:.3g} µs"
    return f"{us * 1e3:.3g} ns"


def fmt_bytes(n: float | None) -> str:
    if n is None:
        return "—"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.3g} {unit}"
        value /= 1024
    return f"{value:.3g} TiB"


def fmt_num(x: float | None, digits: int = 4) -> str:
    """Generic value: DIFF metrics, expected/actual outputs."""
    if x is None:
        return "—"
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "+Inf" if x > 0 else "-Inf"
    if x == 0:
        return "0"
    if abs(x) >= 1e5 or abs(x) < 1e-3:
        return f"{x:.{digits - 1}e}"
    return f"{x:.{digits}g}"


def fmt_rate(x: float | None, unit: str) -> str:
    if x is None or not math.isfinite(x):
        return "—"
    if x >= 1000:
        return f"{x / 1000:.3g} T{unit}"
    if x >= 1:
        return f"{x:.3g} G{unit}"
    return f"{x * 1000:.3g} M{unit}"


def fmt_points(x: float) -> str:
    return f"{x:.1f}".rstrip("0").rstrip(".") if x != int(x) else str(int(x))


def fmt_shape(shapes: dict[str, list[int]]) -> str:
    """{"left": [128, 256], "right": [256, 128]} -> "left 128×256 · right 256×128"; one input: just its dims."""
    dims = {name: "×".join(str(d) for d in shape) or _("scalar") for name, shape in shapes.items()}
    if len(dims) == 1:
        return next(iter(dims.values()))
    return " · ".join(f"{name} {d}" for name, d in dims.items())


def fmt_pct(fraction: float | None) -> str:
    if fraction is None:
        return "—"
    pct = fraction * 100
    if 0 < pct < 0.01:
        return "<0.01%"
    return f"{pct:.0f}%" if pct >= 10 or pct == 0 else f"{pct:.2g}%"


def fmt_local_minute(at: datetime) -> str:
    """An aware time to the minute with its UTC offset: 2026-12-05 23:59 (UTC+08:00)."""
    offset = at.utcoffset()
    minutes = int(offset.total_seconds() // 60) if offset is not None else 0
    sign = "+" if minutes >= 0 else "-"
    return f"{at:%Y-%m-%d %H:%M} (UTC{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d})"
