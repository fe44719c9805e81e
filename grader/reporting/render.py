"""Renders a GradeResult to one self-contained HTML file (inline CSS and SVG, no scripts, no network)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup, escape

from grader import __version__
from grader.reporting import charts, formatting
from grader.reporting.compiler_output import CompilerOutput, parse_compiler_output
from grader.reporting.devices import device_peaks
from grader.reporting.excerpts import Excerpt, excerpt_at
from grader.reporting.hints import (
    Finding,
    all_diagnostics,
    case_hint,
    case_kind,
    diagnose,
    diagnostic_finding,
)
from grader.reporting.next_step import NextStep, is_too_slow, next_step_for_stage, overall_next_step
from grader.results import CaseResult, GradeResult, GroupScore, StageResult, Verdict

TEMPLATE_DIR = Path(__file__).resolve().parents[2] / "reports" / "templates"

_VERDICT_LABELS: dict[Verdict, tuple[str, str]] = {
    Verdict.PASSED: ("Passed", "good"),
    Verdict.TOO_SLOW: ("Correct, not yet fast enough", "warn"),
    Verdict.WRONG_ANSWER: ("Wrong answer", "bad"),
    Verdict.RUNTIME_ERROR: ("Runtime error", "bad"),
    Verdict.CRASH: ("Crashed", "bad"),
    Verdict.TIMEOUT: ("Timed out", "bad"),
    Verdict.NOT_USING_KERNEL: ("Kernel not used", "bad"),
    Verdict.COMPILE_ERROR: ("Compile error", "bad"),
    Verdict.UNGRADABLE_LAYOUT: ("Not gradable", "bad"),
    Verdict.INTERNAL_ERROR: ("Grader error", "neutral"),
    Verdict.ENVIRONMENT_ERROR: ("Cannot grade on this machine", "neutral"),
    Verdict.INTEGRITY: ("Results do not add up", "bad"),
}


_SHORT_CASE_LABELS = {  # fits the narrow result column of the case tables
    "wrong_answer": "fail",
    "runtime_error": "error",
    "timeout": "timeout",
    "crash": "crash",
    "not_using_kernel": "no kernel",
    "internal_error": "grader",
    "integrity": "integrity",
    "environment_error": "setup",
}


def verdict_label(verdict: Verdict) -> str:
    return _VERDICT_LABELS[verdict][0]


def verdict_tone(verdict: Verdict) -> str:
    return _VERDICT_LABELS[verdict][1]


@dataclass(frozen=True)
class CaseGroupView:
    name: str
    score: GroupScore | None
    cases: list[tuple[CaseResult, str | None, str | None]]  # case, failure kind, hint


@dataclass(frozen=True)
class StageView:
    number: int
    stage: StageResult
    tone: str
    chart: charts.StageBarChart | None
    split: list[charts.Segment]
    memory: list[charts.MemoryUse]
    transfers: list[charts.Transfer]
    diagnostics: list[tuple[Finding, Excerpt | None]]
    next_step: NextStep | None
    rates: tuple[float, float] | None


def _stage_tone(stage: StageResult) -> str:
    if not stage.correct:
        return "bad"
    if is_too_slow(stage):
        return "warn"
    return "good" if stage.points >= stage.points_possible or stage.threshold_us is None else "warn"


def _group_views(result: GradeResult) -> list[CaseGroupView]:
    if not result.cases:  # nothing ran (build failed, layout refused): empty score cards would only be noise
        return []
    scores = {g.name: g for g in result.groups}
    order = [g.name for g in result.groups] + [c.group for c in result.cases if c.group not in scores]
    views = []
    for name in dict.fromkeys(order):
        cases = [(c, case_kind(c), case_hint(c, result.assignment)) for c in result.cases if c.group == name]
        if cases or name in scores:
            views.append(CaseGroupView(name, scores.get(name), cases))
    return views


def _stage_views(result: GradeResult, quoted: set[tuple[str | None, int | None]]) -> list[StageView]:
    """quoted: source lines already shown higher up; a stage repeating the same diagnostic does not quote again."""
    peaks = device_peaks(result)
    root = result.submission_path
    views = []
    for number, stage in enumerate(result.stages, start=1):
        trace = stage.trace
        diags = []
        for diag in trace.diagnostics if trace else []:
            finding = diagnostic_finding(diag, root, result.assignment)
            key = (finding.location.file, finding.location.line) if finding.location else (None, None)
            diags.append((finding, None if key in quoted else excerpt_at(result, finding.location)))
            quoted.add(key)
        slow = is_too_slow(stage)
        views.append(
            StageView(
                number=number,
                stage=stage,
                tone=_stage_tone(stage),
                chart=charts.stage_bar_chart(stage),
                split=charts.time_split(trace) if trace else [],
                memory=charts.memory_use(trace) if trace else [],
                transfers=charts.transfers(trace) if trace else [],
                diagnostics=diags,
                next_step=next_step_for_stage(stage, peaks.cores if peaks else None, root) if slow else None,
                rates=charts.achieved_rates(stage, result.cases),
            )
        )
    return views


def _time_label(result: GradeResult) -> str:
    if result.time_is_modelled:
        return f"modelled ({result.device_profile})"
    return "measured on hardware" if result.backend == "mlu" else "host clock"


def build_context(result: GradeResult) -> dict[str, Any]:
    """Everything the template shows, derived from the results document alone."""
    findings = diagnose(result)
    next_step = overall_next_step(result, findings)
    compiler: CompilerOutput | None = None
    if result.build and result.build.compiler_output.strip():
        compiler = parse_compiler_output(result.build.compiler_output)
    peaks = device_peaks(result)
    quoted = {(f.location.file, f.location.line) for f in findings if f.location}
    stages = _stage_views(result, quoted)
    return {
        "r": result,
        "V": Verdict,
        "verdict_label": verdict_label(result.verdict),
        "verdict_tone": verdict_tone(result.verdict),
        "time_label": _time_label(result),
        # the finding the next step fixes is shown in that card, not again in the list
        "findings": [
            (f, excerpt_at(result, f.location))
            for f in findings
            if not (next_step and f is next_step.finding)
        ],
        "next_fixes_finding": bool(next_step and next_step.finding),
        "next_step": next_step,
        "next_excerpt": excerpt_at(result, next_step.location) if next_step else None,
        "compiler": compiler,
        "groups": _group_views(result),
        "stages": stages,
        "roofline": charts.roofline(result.stages, result.cases, peaks),
        "peaks": peaks,
        "diagnostic_count": len(all_diagnostics(result)),
        "score_fraction": result.score / result.max_score if result.max_score else 0.0,
        "report_version": __version__,
        "short_labels": _SHORT_CASE_LABELS,
        # static screening (grader.checks.screening): the findings and whether they withheld the stage points
        "screening": list(result.screening),
        "screening_withholds": any(f.action == "zero_stages" for f in result.screening),
    }


_BACKTICKS = re.compile(r"`([^`]+)`")


def code_spans(text: str | None) -> Markup:
    """Escapes text and shows `quoted` fragments as code."""
    escaped = str(escape(text or ""))
    return Markup(_BACKTICKS.sub(lambda m: f"<code>{m.group(1)}</code>", escaped))


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATE_DIR),
        autoescape=jinja2.select_autoescape(enabled_extensions=("html", "j2"), default=True),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        time=formatting.fmt_time_us,
        bytes=formatting.fmt_bytes,
        num=formatting.fmt_num,
        rate=formatting.fmt_rate,
        points=formatting.fmt_points,
        shape=formatting.fmt_shape,
        pct=formatting.fmt_pct,
        verdict_label=verdict_label,
        verdict_tone=verdict_tone,
        code=code_spans,
    )
    # The stylesheet is ours, not student text: inline it unescaped.
    env.globals["inline_css"] = lambda: Markup((TEMPLATE_DIR / "report.css").read_text(encoding="utf-8"))
    return env


def render_report_html(result: GradeResult) -> str:
    """The report as one HTML document."""
    return _environment().get_template("report.html.j2").render(**build_context(result))


def render_report(result: GradeResult, out_path: Path) -> Path:
    """Writes the report to out_path (parents created) and returns the path."""
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(render_report_html(result), encoding="utf-8")
    return out_path
