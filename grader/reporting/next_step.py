"""Derives "what to do next": the one change most likely to lift a submission to the next stage.

A build error or any verdict that stops the grading comes first; otherwise every fix (an emulator check, a
wrong answer) and every speed step competes on the points it puts at stake, correctness first on a tie. Once a
stage is correct but slow, its emulator trace says where the modelled time goes, and the stage ladder of the
course says what the usual next technique is: scalar GDRAM -> NRAM staging -> vector/tensor builtins -> many tasks ->
async double buffering -> SRAM staging in a UNION1 launch.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from bang_emu import devices

from grader.i18n import _
from grader.reporting.advice import advice_for
from grader.reporting.hints import Finding, case_label, diagnose, diagnostic_finding, lower_first
from grader.results import (
    AssignmentFacts,
    DevicePeaks,
    GradeResult,
    SourceLocation,
    StageResult,
    TraceSummary,
    Verdict,
)


@dataclass(frozen=True)
class NextStep:
    rule: str  # machine name of the rule that fired, e.g. stage_in_nram, double_buffer
    action: str  # the change, in the imperative
    why: str  # the evidence it rests on
    stage: str | None = None
    stage_title: str | None = None
    snippet: str | None = None
    location: SourceLocation | None = None
    how: str | None = None  # for fixes: how to make the change (trace rules let the snippet show it)
    finding: Finding | None = None  # the finding this step fixes, so the report shows it once
    points: float | None = None  # the points at stake: what the ranking of overall_next_step weighed


def _share(trace: TraceSummary, *keys: str) -> float:
    total = sum(trace.time_split_us.values()) or trace.modelled_time_us
    if total <= 0:
        return 0.0
    return sum(trace.time_split_us.get(k, 0.0) for k in keys) / total


def _pct(x: float) -> str:
    return f"{x * 100:.0f}%"


def _uses(trace: TraceSummary, fragment: str) -> bool:
    return any(fragment in name and count > 0 for name, count in trace.builtin_counts.items())


def _uses_compute_builtin(trace: TraceSummary) -> bool:
    return any(name.startswith("__bang_") and count > 0 for name, count in trace.builtin_counts.items())


def _staged_on_chip(trace: TraceSummary) -> bool:
    loads = sum(v for k, v in trace.bytes_moved.items() if k.startswith("GDRAM2"))
    return loads > 0 or _uses(trace, "memcpy")


def _task_count(trace: TraceSummary) -> int:
    x, y, z = trace.dim
    return x * y * z


def _fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"





def _table_cores(trace: TraceSummary) -> int:
    """The cores of the trace's device in the device table (the default device's for one it does not know)."""
    peaks = DevicePeaks.for_device(trace.device_profile) or DevicePeaks.for_device(devices.default_device())
    return peaks.cores if peaks is not None and peaks.cores else 1


def next_step_for_stage(
    stage: StageResult, device_cores: int | None = None, submission_root: str | None = None,
    facts: AssignmentFacts | None = None,
) -> NextStep | None:
    """The trace-derived next change for a correct but slow stage; None without a trace. `facts` (the
    results document's assignment_facts) carry the [feedback] text (e.g. which builtin to use) replacing the generic."""
    trace = stage.trace
    if trace is None:
        return None
    base = {"stage": stage.name, "stage_title": stage.title}
    errors = [d for d in trace.diagnostics if d.severity == "error"]
    if errors:
        return _from_finding(diagnostic_finding(errors[0], submission_root, facts), stage)

    scalar = _share(trace, "scalar")
    io_wait = _share(trace, "io", "wait")
    tasks = _task_count(trace)
    cores = device_cores or _table_cores(trace)

    if scalar >= 0.5 and not _staged_on_chip(trace):
        return _speed_step(
            "stage_in_nram", facts,
            why=_("{share} of the modelled time is scalar code and nothing is copied from GDRAM to on-chip "
                  "memory: every element access goes out to GDRAM.").format(share=_pct(scalar)),
            **base,
        )
    if scalar >= 0.5 and not _uses_compute_builtin(trace):
        return _speed_step(
            "use_builtin", facts,
            why=_("The data is on chip, but {share} of the modelled time is still scalar code: one element per "
                  "instruction where the vector or tensor unit does a whole tile.").format(share=_pct(scalar)),
            **base,
        )
    if tasks == 1 and trace.cores_used <= 1 and cores > 1:
        return _speed_step(
            "split_over_tasks", facts,
            why=_("The kernel ran as a single task on one core (dim {dim}); the device has {cores} cores, so the "
                  "others idle.").format(dim=list(trace.dim), cores=cores),
            **base,
        )
    if io_wait >= 0.5 and not _uses(trace, "memcpy_async"):
        return _speed_step(
            "double_buffer", facts,
            why=_("IO and waiting take {share} of the modelled time and every copy is synchronous: the compute "
                  "units idle while each tile moves.").format(share=_pct(io_wait)),
            **base,
        )
    right_loads = trace.bytes_moved.get("GDRAM2WRAM", 0)  # each task loads the shared (right) operand itself
    if right_loads and trace.func_type.upper() == "BLOCK" and io_wait >= 0.4:
        return _speed_step(
            "sram_staging", facts,
            why=_("IO and waiting are still {share} of the modelled time; each of the {tasks} tasks loads the "
                  "whole right matrix from GDRAM ({moved} GDRAM->WRAM in total).").format(
                share=_pct(io_wait), tasks=tasks, moved=_fmt_bytes(right_loads)),
            **base,
        )
    nram_peak = trace.onchip_peak_bytes.get("nram", 0)
    nram_cap = trace.onchip_capacity_bytes.get("nram", 0)
    if io_wait >= 0.4 and nram_cap and nram_peak < 0.25 * nram_cap:
        return _speed_step(
            "bigger_tiles", facts,
            why=_("IO and waiting are {share} of the modelled time while only {used} of {capacity} NRAM is in "
                  "use: many small copies pay the per-copy latency.").format(
                share=_pct(io_wait), used=_fmt_bytes(nram_peak), capacity=_fmt_bytes(nram_cap)),
            **base,
        )
    split = {k: v for k, v in trace.time_split_us.items() if v > 0}
    if not split:
        return None
    biggest = max(split, key=lambda k: split[k])
    return NextStep(
        rule="reduce_dominant",
        action=_("Reduce the {part} time, the largest part of the modelled time").format(part=biggest),
        why=_("{part} is {share} of the modelled time; the other parts are smaller.").format(
            part=biggest, share=_pct(_share(trace, biggest))),
        **base,
    )


def _speed_step(rule: str, facts: AssignmentFacts | None, why: str, **base: str | None) -> NextStep:
    """A speed rule's step: the trace says which rule and why; the advice registry (with the assignment's
    [feedback.advice.<rule>] in place of the generic) says what to do and shows how."""
    entry = advice_for(rule, facts)
    assert entry is not None, f"speed rule {rule} is not in the advice registry"
    return NextStep(rule=rule, action=entry.action, why=why, snippet=entry.snippet, **base)


def is_too_slow(stage: StageResult) -> bool:
    """Correct, timed, and slower than its threshold (a stage without a threshold is not judged on speed)."""
    if stage.verdict == Verdict.TOO_SLOW:
        return True
    timed = stage.timing is not None and stage.threshold_us is not None
    return stage.correct and timed and stage.timing.median_us > stage.threshold_us  # type: ignore[union-attr]


def _from_finding(finding: Finding, stage: StageResult | None = None) -> NextStep:
    return NextStep(
        rule=f"fix_{finding.kind}",
        action=finding.action or _("Fix: {problem}").format(problem=lower_first(finding.title)),
        why=finding.evidence,
        how=finding.advice,
        stage=stage.name if stage else None,
        stage_title=stage.title if stage else None,
        location=finding.location,
        snippet=finding.snippet,
        finding=finding,
    )


def ranked_steps(result: GradeResult, findings: list[Finding]) -> list[tuple[float, NextStep]]:
    """Every fix and speed step the result calls for, with its points at stake, most first (stable: among equal
    stakes, a wrong stage before a wrong case outside the stages before a slow stage, each in stage order)."""
    cores = result.device_peaks.cores if result.device_peaks else None
    steps: list[tuple[float, NextStep]] = []
    used: set[int] = set()
    wrong_stage_cases: set[str] = set()  # a wrong stage is fixed by its first finding (diagnose's order)
    for stage in result.stages:
        if stage.correct:
            continue
        stage_cases = {case_label(c) for c in result.cases if c.entry == stage.entry}
        wrong_stage_cases |= stage_cases
        relevant = [f for f in findings if not f.cases or stage_cases.intersection(f.cases)]
        if relevant or findings:
            finding = (relevant or findings)[0]
            if id(finding) in used:  # one finding breaking several stages is one fix: its stake is summed below
                continue
            used.add(id(finding))
            fixed = set(finding.cases)
            stake = sum(_stake(s) for s in result.stages if not s.correct and (
                not fixed or fixed & {case_label(c) for c in result.cases if c.entry == s.entry}))
            steps.append((stake + _lost(result, fixed), _from_finding(finding, stage)))
        else:
            steps.append((_stake(stage) + _lost(result, stage_cases), NextStep(
                rule="fix_correctness",
                action=_("Make {stage} correct").format(stage=stage.title),
                why=stage.message,
                stage=stage.name,
                stage_title=stage.title,
            )))
    # Cases that fail outside every wrong stage (an extension such as fp16 when the stages are right) are still
    # wrong answers, worth their groups' points.
    for finding in findings:
        if (finding.cases and finding.severity == "error" and id(finding) not in used
                and not wrong_stage_cases.intersection(finding.cases)):
            used.add(id(finding))
            steps.append((_lost(result, set(finding.cases)), _from_finding(finding)))
    speed: dict[str, tuple[float, NextStep]] = {}  # one change that lifts several slow stages counts for all
    for stage in result.stages:
        if not is_too_slow(stage):
            continue
        step = next_step_for_stage(stage, cores, result.submission_path, result.assignment_facts)
        if step is None and stage.next_step:
            step = NextStep(rule="grader", action=stage.next_step, why=stage.message, stage=stage.name,
                            stage_title=stage.title)
        if step is None:
            continue
        key = step.rule if step.rule != "grader" else f"grader:{step.action}"
        stake, first = speed.get(key, (0.0, step))
        speed[key] = (stake + _stake(stage), first)
    steps += list(speed.values())
    return [(points, replace(step, points=points)) for points, step in sorted(steps, key=lambda item: -item[0])]


def _lost(result: GradeResult, cases: set[str]) -> float:
    """Points the failing `cases` cost in their groups: each group's lost points, in proportion to the part of
    its failing cases among them."""
    lost = 0.0
    for group in result.groups:
        failing = {case_label(c) for c in result.cases if c.group == group.name and not c.passed}
        if failing and cases & failing:
            lost += (group.points_possible - group.points) * len(cases & failing) / len(failing)
    return lost


def _stake(stage: StageResult) -> float:
    return max(0.0, stage.points_possible - stage.points)


def overall_next_step(result: GradeResult, findings: list[Finding] | None = None) -> NextStep | None:
    """The single most useful change for the whole submission: the one with the most points at stake (a
    stage's lost points, and the lost group points of the cases a fix makes pass); on a tie, correctness
    before speed and earlier stages first."""
    findings = diagnose(result) if findings is None else findings
    blocking = {
        Verdict.ENVIRONMENT_ERROR,
        Verdict.INTERNAL_ERROR,
        Verdict.HELD_FOR_REVIEW,
        Verdict.INTEGRITY,
        Verdict.UNGRADABLE_LAYOUT,
        Verdict.COMPILE_ERROR,
        Verdict.NOT_USING_KERNEL,
        Verdict.TIMEOUT,
        Verdict.CRASH,
    }
    if result.verdict in blocking and findings:
        return _from_finding(findings[0])
    candidates = ranked_steps(result, findings)
    if candidates:
        return candidates[0][1]
    if findings:
        return _from_finding(findings[0])
    ungraded = [s for s in result.stages if s.correct and s.threshold_us is None]
    if ungraded:
        return NextStep(
            rule="speed_not_graded",
            action=_("Every stage is correct; speed was not graded in this run"),
            why=ungraded[0].message + " " + _("Compare your modelled times below with the stage descriptions: "
                                              "each stage should be much faster than the one before."),
        )
    if result.stages:
        return NextStep(
            rule="done",
            action=_("Every stage is at full marks"),
            why=_("All cases pass and every stage beats its time threshold. Compare your times with the "
                  "reference in the charts below: that is the remaining headroom."),
        )
    return None
