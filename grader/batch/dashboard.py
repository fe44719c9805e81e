"""The class dashboard: what an instructor wants to see across a batch (score histogram, pass rate per test
case, stage attainment, fastest and slowest kernels, common failure kinds), as one self-contained HTML.

`class_stats` computes plain data from the results; the template (reports/templates/dashboard.html.j2)
only lays it out. With a similarity report (grader/batch/similarity.py) the dashboard gains a section of
similar pairs for review, each with a side-by-side view of the matching code.
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import jinja2

import grader
from grader.atomic_file import atomic_write_text
from grader.backends import get_backend
from grader.batch.exports import ClassRow, class_max_score
from grader.i18n import _, current_language, install_jinja, ngettext
from grader.results import Verdict, verdict_label

if TYPE_CHECKING:
    from grader.batch.similarity import SimilarityReport

TEMPLATES = Path(__file__).resolve().parents[2] / "reports" / "templates"
HISTOGRAM_BINS = 10
KERNELS_SHOWN = 5


@dataclass
class Bar:
    label: str
    value: float  # 0..1 for rates, a count for histograms
    detail: str = ""
    title: str = ""


@dataclass
class KernelTime:
    student_id: str
    slug: str
    median_us: float
    label: str  # "modelled (mlu370-x8)" or "hardware"


@dataclass
class StageStats:
    name: str
    title: str
    full: float  # fraction of students with all the stage's points
    correct: float  # fraction whose stage entry was correct
    attempted: int
    fastest: list[KernelTime] = field(default_factory=list)
    slowest: list[KernelTime] = field(default_factory=list)
    threshold_us: float | None = None


@dataclass
class ClassStats:
    title: str
    students: int
    max_score: float
    mean: float
    median: float
    passed: int
    histogram: list[Bar]
    verdicts: list[Bar]
    diagnostics: list[Bar]
    cases: list[Bar]
    stages: list[StageStats]
    table: list[dict]
    backend: str
    modelled: bool
    seed_mode: str
    generated: str
    grader_version: str
    similarity: SimilarityView | None = None
    not_graded: list[tuple[str, str]] = field(default_factory=list)  # (class folder entry, why), no grade


@dataclass
class CodeSide:
    student_id: str
    file: str
    first: int
    last: int
    lines: list[tuple[int, str]]  # (line number, text)


@dataclass
class SimilarityView:
    """The similarity report as the dashboard shows it."""

    report: SimilarityReport
    histogram: list[Bar]
    views: list[tuple[object, list[tuple[CodeSide, CodeSide]]]]  # (pair, its regions side by side)


def _side(student_id: str, file: str, lines: tuple[int, int], code: str) -> CodeSide:
    numbered = [(lines[0] + i, text) for i, text in enumerate(code.split("\n"))]
    return CodeSide(student_id, file, lines[0], lines[1], numbered)


def similarity_view(report: SimilarityReport) -> SimilarityView:
    bins = report.histogram or [0] * 10
    histogram = [Bar(label=f"{10 * i}", value=c, title=ngettext("{low}-{high}%: {n} pair", "{low}-{high}%: {n} pairs",
                                                                c).format(low=10 * i, high=10 * (i + 1), n=c))
                 for i, c in enumerate(bins)]
    views = [(p, [(_side(p.a, r.file_a, r.lines_a, r.code_a), _side(p.b, r.file_b, r.lines_b, r.code_b))
                  for r in p.regions]) for p in report.viewed]
    return SimilarityView(report, histogram, views)


def _histogram(percents: list[float]) -> list[Bar]:
    counts = [0] * HISTOGRAM_BINS
    for p in percents:
        counts[min(HISTOGRAM_BINS - 1, max(0, int(p // (100 / HISTOGRAM_BINS))))] += 1
    width = 100 // HISTOGRAM_BINS
    def title(i: int, c: int) -> str:
        last = i == HISTOGRAM_BINS - 1  # the top bin holds 100% too
        return (ngettext("{low}-{high}% incl.: {n} student", "{low}-{high}% incl.: {n} students", c) if last
                else ngettext("{low}-{high}%: {n} student", "{low}-{high}%: {n} students", c)
                ).format(low=i * width, high=(i + 1) * width, n=c)

    return [Bar(label=f"{i * width}" if i < HISTOGRAM_BINS - 1 else f"{i * width}+", value=c, title=title(i, c))
            for i, c in enumerate(counts)]


def _kernel_label(row: ClassRow, source: str) -> str:
    if source == "modelled":
        return _("modelled ({device})").format(device=row.result.device_profile)
    return {"hardware": _("hardware"), "host_clock": _("host clock")}.get(source, source)


def _kind_title(kind: str) -> str:
    """An emulator check's kind as the report names it (its advice title, translated), else its machine name."""
    from grader.reporting.advice import advice_for

    advice = advice_for(kind.strip().lower().replace("-", "_"))
    return f"{advice.title} ({kind})" if advice is not None else kind


def class_stats(rows: list[ClassRow], *, assignment_title: str, backend: str, seed_mode: str,
                similarity: SimilarityReport | None = None) -> ClassStats:
    not_graded = [(r.submission.origin, r.not_graded) for r in rows if r.not_graded]
    rows = [r for r in rows if not r.not_graded]  # listed apart, never a zero in the statistics
    n = len(rows)
    max_score = class_max_score(rows)
    scores = [r.result.score for r in rows]
    percents = [100.0 * s / max_score if max_score else 0.0 for s in scores]

    verdict_counts = Counter(r.result.verdict for r in rows)
    verdicts = [Bar(str(v), verdict_counts[v], f"{verdict_counts[v]} / {n}")
                for v in sorted(verdict_counts, key=lambda v: (-verdict_counts[v], v.severity))]

    # Failure kinds below the verdict: emulator checks that fired, counted once per student.
    diag_students: Counter[str] = Counter()
    for r in rows:
        kinds = {_kind_title(d.kind) for c in r.result.cases for d in c.diagnostics if d.severity == "error"}
        kinds |= {_kind_title(d.kind) for s in r.result.stages if s.trace for d in s.trace.diagnostics
                  if d.severity == "error"}
        kinds |= {_("case verdict: {verdict}").format(verdict=verdict_label(c.verdict))
                  for c in r.result.cases if c.verdict != Verdict.PASSED}
        diag_students.update(kinds)
    diagnostics = [Bar(k, c, f"{c} / {n}") for k, c in diag_students.most_common(12)]

    case_total: dict[str, int] = defaultdict(int)
    case_passed: dict[str, int] = defaultdict(int)
    case_group: dict[str, str] = {}
    for r in rows:
        for c in r.result.cases:
            label = f"{c.name} [{c.entry}, {c.dtype}]"
            case_group[label] = c.group
            case_total[label] += 1
            case_passed[label] += c.passed
    cases = [Bar(label, case_passed[label] / case_total[label], f"{case_passed[label]}/{case_total[label]}",
                 title=case_group[label]) for label in case_total]

    stage_rows: dict[str, list] = defaultdict(list)
    stage_title: dict[str, str] = {}
    for r in rows:
        for s in r.result.stages:
            stage_rows[s.name].append((r, s))
            stage_title.setdefault(s.name, s.title or s.name)
    stages = []
    for name, items in stage_rows.items():
        timed = sorted((KernelTime(r.submission.student_id, r.submission.slug, s.timing.median_us,
                                   _kernel_label(r, s.timing.source))
                        for r, s in items if s.correct and s.timing is not None), key=lambda k: k.median_us)
        thresholds = [s.threshold_us for _, s in items if s.threshold_us is not None]
        stages.append(StageStats(
            name=name, title=stage_title[name],
            full=sum(1 for _, s in items if s.points_possible and s.points >= s.points_possible) / n,
            correct=sum(1 for _, s in items if s.correct) / n, attempted=len(items),
            fastest=timed[:KERNELS_SHOWN],
            slowest=list(reversed(timed[-KERNELS_SHOWN:])) if len(timed) > KERNELS_SHOWN else [],
            threshold_us=thresholds[0] if thresholds else None))

    table = [{"id": r.submission.student_id, "name": r.submission.name or r.submission.student_id,
              "slug": r.submission.slug, "score": r.result.score, "verdict": str(r.result.verdict),
              "percent": p, "message": (r.result.message.strip().splitlines() or [""])[0][:160]}
             for r, p in sorted(zip(rows, percents, strict=True), key=lambda rp: rp[0].submission.student_id)]
    return ClassStats(
        title=assignment_title, students=n, max_score=max_score,
        mean=statistics.fmean(scores) if scores else 0.0, median=statistics.median(scores) if scores else 0.0,
        passed=verdict_counts.get(Verdict.PASSED, 0), histogram=_histogram(percents), verdicts=verdicts,
        diagnostics=diagnostics, cases=cases, stages=stages, table=table, backend=backend,
        modelled=get_backend(backend).time_is_modelled, seed_mode=seed_mode,
        generated=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), grader_version=grader.__version__,
        similarity=similarity_view(similarity) if similarity is not None else None,
        not_graded=not_graded)


def render_dashboard(stats: ClassStats) -> str:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                             extensions=["jinja2.ext.i18n"])
    install_jinja(env, current_language())  # the batch's language (drivers.batch sets it)
    # Verdicts by their machine names (the CSS classes), shown by their names in the dashboard's language.
    env.globals["verdict_name"] = lambda name: verdict_label(name) if name in Verdict.__members__.values() else name
    return env.get_template("dashboard.html.j2").render(s=stats)


def write_dashboard(rows: list[ClassRow], path: Path, *, assignment_title: str, backend: str,
                    seed_mode: str, similarity: SimilarityReport | None = None) -> ClassStats:
    stats = class_stats(rows, assignment_title=assignment_title, backend=backend, seed_mode=seed_mode,
                        similarity=similarity)
    atomic_write_text(path, render_dashboard(stats))
    return stats
