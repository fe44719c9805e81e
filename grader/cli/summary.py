"""Terminal rendering of a GradeResult (rich): verdict, score, groups, stages, first failures."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from grader.results import GradeResult, Verdict

_STYLE = {Verdict.PASSED: "green", Verdict.TOO_SLOW: "yellow", Verdict.WRONG_ANSWER: "red"}


def verdict_text(verdict: Verdict) -> str:
    style = _STYLE.get(verdict, "bold red")
    return f"[{style}]{verdict.value.replace('_', ' ')}[/{style}]"


def print_summary(result: GradeResult, console: Console, failures_shown: int = 5) -> None:
    who = result.student.name or result.student.id
    console.rule(f"{result.assignment} -- {who}")
    time_label = f"modelled ({result.device_profile})" if result.time_is_modelled else f"hardware ({result.device_profile})"
    console.print(f"layout [bold]{result.layout}[/], backend [bold]{result.backend}[/], times {time_label}, "
                  f"sandbox {result.sandbox}, "
                  f"seed {result.seeds.master if result.seeds.master else 'secret #' + result.seeds.master_digest}")
    if result.build is not None and not result.build.ok:
        console.print("[bold red]compiler output:[/]")
        console.print(result.build.compiler_output[-4000:], markup=False, highlight=False, soft_wrap=True)
    if result.groups and result.cases:
        table = Table(title="correctness", title_justify="left")
        for col in ("group", "cases", "points"):
            table.add_column(col, justify="right" if col != "group" else "left")
        for g in result.groups:
            colour = "green" if g.passed_cases == g.total_cases else "red"
            table.add_row(g.name, f"[{colour}]{g.passed_cases}/{g.total_cases}[/]", f"{g.points:g}/{g.points_possible:g}")
        console.print(table)
    if result.stages:
        table = Table(title=f"stages (times: {time_label})", title_justify="left")
        for col in ("stage", "verdict", "time us", "threshold us", "points"):
            table.add_column(col, justify="left" if col in ("stage", "verdict") else "right")
        for s in result.stages:
            time = f"{s.timing.median_us:,.4g}" if s.timing else "-"
            threshold = f"{s.threshold_us:,.4g}" if s.threshold_us else "-"
            table.add_row(s.name, verdict_text(s.verdict), time, threshold, f"{s.points:g}/{s.points_possible:g}")
        console.print(table)
        for s in result.stages:
            if s.verdict != Verdict.PASSED or s.points < s.points_possible:
                console.print(f"  [bold]{s.name}[/]: {s.message}", highlight=False)
                if s.next_step:
                    console.print(f"    to reach it: {s.next_step}", highlight=False, soft_wrap=True)
    failing = [c for c in result.cases if not c.passed]
    for case in failing[:failures_shown]:
        console.print(f"  [red]x[/] {case.name} ({case.entry}, {case.dtype}, "
                      f"{' '.join(f'{k}{v}' for k, v in case.shapes.items())}): {verdict_text(case.verdict)}")
        if case.message:
            console.print("    " + case.message.strip().replace("\n", "\n    ")[:1500], markup=False, highlight=False,
                          soft_wrap=True)
        for m in case.mismatches[:3]:
            actual = "never written" if m.actual is None else f"{m.actual:.6g}"
            expected = "NaN/Inf" if m.expected is None else f"{m.expected:.6g}"
            console.print(f"      at {m.index}: got {actual}, expected {expected}", highlight=False)
    if len(failing) > failures_shown:
        console.print(f"  ... and {len(failing) - failures_shown} more failing case(s) (see the report)")
    if result.verdict not in (Verdict.PASSED,) and not result.groups and result.message:
        console.print(result.message, markup=False, highlight=False, soft_wrap=True)
    console.print(f"\n[bold]verdict:[/] {verdict_text(result.verdict)}   [bold]score: {result.score:g} / "
                  f"{result.max_score:g}[/]")
