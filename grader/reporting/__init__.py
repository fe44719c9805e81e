"""Per-student HTML feedback reports rendered from the results document (grader.results.GradeResult)."""

from grader.reporting.render import render_report_html

__all__ = ["render_report_html"]
