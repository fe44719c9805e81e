"""Terminal rendering of a GradeResult (rich): verdict, score, groups, stages, first failures."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from grader.i18n import N_, _, ngettext
from grader.reporting.compiler_output import student_errors
from grader.reporting.hints import Finding, case_hint, case_label, diagnose, is_emulator_message
from grader.reporting.next_step import overall_next_step
from grader.results import GradeResult, Verdict, verdict_label

# The report says the same at more length (reports/templates/report.html.j2); keys: compiler_output.Limitation.
_NOT_YOUR_MISTAKE = {
    "missing_builtin": N_("not your mistake: the emulator does not implement `{builtin}` yet (a grader limitation: "
                          "tell your instructor, and use another builtin meanwhile)"),
    "emulator": N_("not your mistake: this error lies entirely in the emulator's own headers (a grader "
                   "limitation: tell your instructor)"),
    "toolchain": N_("not your mistake: this error lies entirely in torch's or the C++ library's headers (a "
                    "toolchain limitation: tell your instructor)"),
}

_STYLE = {Verdict.PASSED: "green", Verdict.TOO_SLOW: "yellow", Verdict.WRONG_ANSWER: "red"}


def verdict_text(verdict: Verdict) -> str:
    style = _STYLE.get(verdict, "bold red")
    return f"[{style}]{verdict_label(verdict)}[/{style}]"


def print_summary(result: GradeResult, console: Console, failures_shown: int = 5, score: str | None = None,
                  pending: bool = False) -> None:
    """Print `result` in the active language (grader.i18n.use_language; the CLI picks result.lang's). `score`:
    the last line's score as the course server counts it (pending points, a late penalty, a test run), instead
    of the result's own; `pending`: the course server withholds the stages' points until the deadline (they
    read "pending", not 0/0)."""
    who = result.student.name or result.student.id
    console.rule(f"{result.assignment} -- {who}")
    time_label = (_("modelled ({device})") if result.time_is_modelled else _("hardware ({device})")).format(
        device=result.device_profile)
    seed = result.seeds.master if result.seeds.master else _("secret #{digest}").format(
        digest=result.seeds.master_digest)
    console.print(_("layout [bold]{layout}[/], backend [bold]{backend}[/], times {times}, sandbox {sandbox}, "
                    "seed {seed}").format(layout=result.layout, backend=result.backend, times=time_label,
                                          sandbox=result.sandbox, seed=seed))
    if result.build is not None and not result.build.ok:
        console.print("[bold red]" + _("compiler output:") + "[/]")
        # the student's own errors at their lines; the whole log (header context) stays in the report
        errors = student_errors(result.build.compiler_output, result.submission_path)
        for e in errors:
            console.print(f"{e.file}:{e.line}: {e.message}", style="bold red", markup=False, highlight=False,
                          soft_wrap=True)
            if e.source:
                console.print(f"  {e.line:>4} | {e.source}", markup=False, highlight=False, soft_wrap=True)
            if e.limitation:
                console.print("  " + _(_NOT_YOUR_MISTAKE[e.limitation]).format(builtin=e.builtin), style="yellow",
                              markup=False, highlight=False, soft_wrap=True)
        if not errors:
            console.print(result.build.compiler_output[-4000:], markup=False, highlight=False, soft_wrap=True)
    if result.groups and result.cases:
        table = Table(title=_("correctness"), title_justify="left")
        table.add_column(_("group"), justify="left")
        table.add_column(_("cases"), justify="right")
        table.add_column(_("points"), justify="right")
        for g in result.groups:
            colour = "green" if g.passed_cases == g.total_cases else "red"
            table.add_row(g.name, f"[{colour}]{g.passed_cases}/{g.total_cases}[/]", f"{g.points:g}/{g.points_possible:g}")
        console.print(table)
    if result.stages:
        table = Table(title=_("stages (times: {times})").format(times=time_label), title_justify="left")
        table.add_column(_("stage"), justify="left")
        table.add_column(_("verdict"), justify="left")
        table.add_column(_("time us"), justify="right")
        table.add_column(_("threshold us"), justify="right")
        table.add_column(_("points"), justify="right")
        for s in result.stages:
            time = f"{s.timing.median_us:,.4g}" if s.timing else "-"
            threshold = f"{s.threshold_us:,.4g}" if s.threshold_us else "-"
            points = _("pending") if pending and not s.points_possible else f"{s.points:g}/{s.points_possible:g}"
            table.add_row(s.name, verdict_text(s.verdict), time, threshold, points)
        console.print(table)
        for s in result.stages:
            if s.verdict != Verdict.PASSED or s.points < s.points_possible:
                console.print(f"  [bold]{s.name}[/]: {s.message}", highlight=False)
                if s.next_step:
                    console.print("    " + _("to reach it: {step}").format(step=s.next_step), highlight=False,
                                  soft_wrap=True)
    findings = diagnose(result)
    covering: dict[str, Finding] = {label: f for f in reversed(findings) for label in f.cases}
    explained: set[int] = set()
    failing = [c for c in result.cases if not c.passed]
    for case in failing[:failures_shown]:
        console.print(f"  [red]x[/] {case.name} ({case.entry}, {case.dtype}, "
                      f"{' '.join(f'{k}{v}' for k, v in case.shapes.items())}): {verdict_text(case.verdict)}")
        message = case.message.strip().replace("\n", "\n    ")[:1500]
        finding = covering.get(case_label(case))
        if finding is not None:  # the report's diagnosis of this case, its evidence and fix said once
            _print_finding(console, finding, first=id(finding) not in explained)
            explained.add(id(finding))
        if message and is_emulator_message(case):  # the kind's hint first, then the emulator's words, labelled
            console.print("    " + (case_hint(case, result.assignment_facts) or ""), markup=False, highlight=False)
            console.print("    " + _("emulator's original output:"), style="dim", highlight=False, end=" ")
            console.print(message, markup=False, highlight=False, soft_wrap=True)
        elif message:
            console.print("    " + message, markup=False, highlight=False, soft_wrap=True)
        for m in case.mismatches[:3]:
            expected = "NaN/Inf" if m.expected is None else f"{m.expected:.6g}"
            line = _("at {index}: never written, expected {expected}") if m.actual is None \
                else _("at {index}: got {actual}, expected {expected}")
            console.print("      " + line.format(index=m.index, actual=f"{m.actual:.6g}" if m.actual is not None else "",
                                                 expected=expected), highlight=False)
    if len(failing) > failures_shown:
        more = len(failing) - failures_shown
        console.print("  " + ngettext("... and {n} more failing case (see the report)",
                                      "... and {n} more failing cases (see the report)", more).format(n=more))
    if result.verdict not in (Verdict.PASSED,) and not result.cases and result.message:  # nothing ran: say why
        console.print(result.message, markup=False, highlight=False, soft_wrap=True)
    step = overall_next_step(result, findings)
    if step is not None and step.rule != "done":
        head = _("next step ({points} points at stake):").format(points=f"{step.points:g}") if step.points \
            else _("next step:")
        where = f" [{step.stage_title}]" if step.stage_title else ""
        console.print(f"\n[bold]{head}[/]{where} ", highlight=False, end="")
        console.print(step.action, markup=False, highlight=False, soft_wrap=True)
        if step.why:
            console.print("  " + step.why, markup=False, highlight=False, soft_wrap=True)
    console.print("\n[bold]" + _("verdict:") + f"[/] {verdict_text(result.verdict)}   [bold]"
                  + (score or _("score: {score} / {max}").format(score=f"{result.score:g}", max=f"{result.max_score:g}"))
                  + "[/]", highlight=False)


def _print_finding(console: Console, finding: Finding, first: bool) -> None:
    where = f" ({finding.where})" if finding.where else ""
    console.print("    " + finding.title + where, style="bold", markup=False, highlight=False, soft_wrap=True)
    if first and finding.action:
        console.print("    " + _("fix: {action}").format(action=finding.action), markup=False, highlight=False,
                      soft_wrap=True)
