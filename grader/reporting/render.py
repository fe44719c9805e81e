"""Renders a GradeResult to one self-contained HTML file (inline CSS and SVG, no scripts, no network)."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo
from functools import cache
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup, escape

from grader import __version__, i18n
from grader.cache_home import cache_home
from grader.i18n import install_jinja, use_language
from grader.reporting import charts, formatting
from grader.reporting.compiler_output import (
    CompilerOutput,
    StudentError,
    parse_compiler_output,
    student_errors,
)
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
from grader.results import CaseResult, GradeResult, GroupScore, StageResult, Verdict, verdict_words

TEMPLATE_DIR = Path(__file__).resolve().parents[2] / "reports" / "templates"

# The report's words for verdicts live in its templates (_labels.html.j2, message domain "report"); here only
# the colour each one is shown in.
_VERDICT_TONES: dict[Verdict, str] = {
    Verdict.PASSED: "good",
    Verdict.TOO_SLOW: "warn",
    Verdict.INTERNAL_ERROR: "neutral",
    Verdict.HELD_FOR_REVIEW: "neutral",
    Verdict.ENVIRONMENT_ERROR: "neutral",
}


def verdict_tone(verdict: Verdict) -> str:
    return _VERDICT_TONES.get(verdict, "bad")


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
    timeline: charts.TimelineChart | None


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
        cases = [(c, case_kind(c, result.assignment_facts), case_hint(c, result.assignment_facts)) for c in result.cases if c.group == name]
        if cases or name in scores:
            views.append(CaseGroupView(name, scores.get(name), cases))
    return views


def _stage_views(
    result: GradeResult, quoted: set[tuple[str | None, int | None]], operator: charts.Operator | None
) -> list[StageView]:
    """quoted: source lines already shown higher up; a stage repeating the same diagnostic does not quote again."""
    peaks = device_peaks(result)
    root = result.submission_path
    views = []
    for number, stage in enumerate(result.stages, start=1):
        trace = stage.trace
        diags = []
        for diag in trace.diagnostics if trace else []:
            finding = diagnostic_finding(diag, root, result.assignment_facts)
            key = (finding.location.file, finding.location.line) if finding.location else (None, None)
            diags.append((finding, None if key in quoted else excerpt_at(result, finding.location)))
            quoted.add(key)
        slow = is_too_slow(stage)
        views.append(
            StageView(
                number=number,
                stage=stage,
                tone=_stage_tone(stage),
                chart=charts.stage_bar_chart(
                    stage, result.stages[number - 2] if number > 1 else None, number - 1 if number > 1 else None
                ),
                split=charts.time_split(trace) if trace else [],
                memory=charts.memory_use(trace) if trace else [],
                transfers=charts.transfers(trace) if trace else [],
                diagnostics=diags,
                next_step=next_step_for_stage(stage, peaks.cores if peaks else None, root, result.assignment_facts)
                if slow else None,  # the assignment's [feedback] wording, as the summary's next step has
                rates=charts.achieved_rates(stage, result.cases, operator),
                timeline=charts.timeline_chart(trace.timeline) if trace and trace.timeline else None,
            )
        )
    return views


def assignment_operator(result: GradeResult) -> charts.Operator | None:
    """The assignment's operator as the results document carries it; None in a document from before it did: the
    roofline then draws every roof and only the stages' own achieved rates."""
    facts = result.assignment_facts
    return charts.Operator(facts.reference, tuple(facts.inputs)) if facts is not None else None


def build_context(result: GradeResult, zone: tzinfo | None = None) -> dict[str, Any]:
    """Everything the template shows, derived from the results document alone; times in `zone` (default UTC: the
    course server passes its course's zone)."""
    findings = diagnose(result)
    next_step = overall_next_step(result, findings)
    compiler: CompilerOutput | None = None
    compiler_errors: list[StudentError] = []
    if result.build and result.build.compiler_output.strip():
        compiler = parse_compiler_output(result.build.compiler_output)
        compiler_errors = student_errors(result.build.compiler_output, result.submission_path)
    peaks = device_peaks(result)
    quoted = {(f.location.file, f.location.line) for f in findings if f.location}
    operator = assignment_operator(result)
    stages = _stage_views(result, quoted, operator)
    return {
        "r": result,
        "V": Verdict,
        "verdict_tone": verdict_tone(result.verdict),
        "time_source": result.time_source,  # the backend's, recorded by orchestration; the template words it
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
        "compiler_errors": compiler_errors,
        "groups": _group_views(result),
        "stages": stages,
        "roofline": charts.roofline(result.stages, result.cases, peaks, operator),
        "peaks": peaks,
        "diagnostic_count": len(all_diagnostics(result)),
        "graded_at": graded_at(result.started_at, zone),
        "score_fraction": (result.score / (result.max_score + result.pending_points)
                           if result.max_score + result.pending_points else 0.0),
        "report_version": __version__,
        # static screening (grader.checks.screening): the findings and whether they withheld the stage points
        "screening": list(result.screening),
        "screening_withholds": any(f.action == "zero_stages" for f in result.screening),
    }


_BACKTICKS = re.compile(r"`([^`]+)`")


def code_spans(text: str | None) -> Markup:
    """Escapes text and shows `quoted` fragments as code."""
    escaped = str(escape(text or ""))
    return Markup(_BACKTICKS.sub(lambda m: f"<code>{m.group(1)}</code>", escaped))


def _bytecode_cache() -> jinja2.BytecodeCache | None:
    """The compiled templates kept between processes (jinja2 writes a temporary file and renames it): a one-shot
    `grade submit` loads the report's instead of compiling it, 0.1 s of its wall and CPU. jinja2 keys a template's
    code by its name and source (and its own version); what else shapes the code -- the environment's options,
    the i18n extension's install -- is this module's and grader.i18n's code, so their digest names the files too.
    None where the folder cannot be made: the templates compile as before."""
    folder = cache_home() / "templates"
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError:
        return None
    made_by = hashlib.sha256(Path(__file__).read_bytes() + Path(i18n.__file__).read_bytes()).hexdigest()[:16]
    return jinja2.FileSystemBytecodeCache(str(folder), pattern=f"{made_by}-%s.cache")


@cache
def _environment(lang: str) -> jinja2.Environment:
    """The report's environment in `lang`, made once per language: its templates compile once per process (a
    batch worker's or the server's many reports), ~0.1 CPU-s each time before; and once per host
    (_bytecode_cache)."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATE_DIR),
        bytecode_cache=_bytecode_cache(),
        autoescape=jinja2.select_autoescape(enabled_extensions=("html", "j2"), default=True),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        extensions=["jinja2.ext.i18n"],
    )
    install_jinja(env, lang)
    env.filters.update(
        time=formatting.fmt_time_us,
        bytes=formatting.fmt_bytes,
        num=formatting.fmt_num,
        rate=formatting.fmt_rate,
        points=formatting.fmt_points,
        shape=formatting.fmt_shape,
        pct=formatting.fmt_pct,
        verdict_tone=verdict_tone,
        code=code_spans,
    )
    # The stylesheet is ours, not student text: inline it unescaped.
    env.globals["verdict_words"] = verdict_words
    env.globals["inline_css"] = lambda: Markup((TEMPLATE_DIR / "report.css").read_text(encoding="utf-8"))
    return env


def graded_at(started: datetime, zone: tzinfo | None) -> str:
    """When a grading started, to the minute, in `zone` with its offset ("2026-12-06 13:10 (UTC+08:00)"), or UTC."""
    if zone is None:
        return started.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return formatting.fmt_local_minute(started.astimezone(zone))


def render_report_html(result: GradeResult, zone: tzinfo | None = None) -> str:
    """The report as one HTML document, in the result's language (its words, and the findings' and hints'
    texts, which grader.i18n gives in the active language); times in `zone` (default UTC)."""
    with use_language(result.lang):
        return _environment(result.lang).get_template("report.html.j2").render(**build_context(result, zone))
