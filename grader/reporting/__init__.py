"""Per-student HTML feedback reports rendered from the results document (grader.results.GradeResult).

`render_report_html` is imported on first use: the terminal summary's helpers (hints, compiler_output,
next_step) live here too, and the course server's client uses them without the report's renderer (jinja2,
the charts, the specs)."""

from __future__ import annotations

from typing import Any

__all__ = ["render_report_html"]


def __getattr__(name: str) -> Any:  # noqa: ANN401 - the module attribute asked for
    if name == "render_report_html":
        from grader.reporting.render import render_report_html

        return render_report_html
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
