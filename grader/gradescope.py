"""The one Gradescope adapter: a GradeResult as Gradescope's autograder results.json (docs/specs.md).

Our own results.json stays the source of truth; this flattens it into one Gradescope test per case group
(correctness points) and per stage (performance points), plus an unscored build check. `grade submit
--gradescope` and `grade batch` both write through `write_gradescope`, so one result gives one file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from grader.atomic_file import atomic_write_text
from grader.i18n import _, current_language, use_language
from grader.results import GradeResult, StageResult, Verdict, verdict_label

OUTPUT_CHARS = 8000  # Gradescope shows long outputs, but a page of compiler errors is enough
FAILING_CASES_SHOWN = 10


def _verdict(verdict: Verdict) -> str:
    # English keeps the machine names Gradescope users already filter on (wrong_answer); others get the label.
    return verdict.value if current_language() == "en" else verdict_label(verdict)


def _stage_output(stage: StageResult, device_profile: str) -> str:
    lines = [f"{_verdict(stage.verdict)}: {stage.message}"]
    if stage.timing is not None:
        source = _("modelled ({device})").format(device=device_profile) if stage.timing.source == "modelled" \
            else stage.timing.source
        line = _("time {time:.4g} us, {source}").format(time=stage.timing.median_us, source=source)
        if stage.threshold_us is not None:
            line += _("; threshold {threshold:.4g} us").format(threshold=stage.threshold_us)
        lines.append(line)
    if stage.next_step:
        lines.append(_("next step: {step}").format(step=stage.next_step))
    return "\n".join(lines)


def to_gradescope(result: GradeResult) -> dict[str, Any]:
    """Gradescope's results document for `result`, its texts in the result's language; the top-level score is
    the grade."""
    with use_language(result.lang):
        return _to_gradescope(result)


def _to_gradescope(result: GradeResult) -> dict[str, Any]:
    tests: list[dict[str, Any]] = []
    if result.build is not None:
        tests.append({"name": _("Build"), "number": "0", "status": "passed" if result.build.ok else "failed",
                      "output": _("built") if result.build.ok else result.build.compiler_output[-OUTPUT_CHARS:],
                      "output_format": "text"})
    for i, group in enumerate(result.groups, start=1):
        failing = [c for c in result.cases if c.group == group.name and not c.passed]
        lines = [(_("{passed}/{total} cases correct.").format(passed=group.passed_cases, total=group.total_cases)
                  + f" {group.description}").strip()]
        lines += [f"- {c.name} ({c.entry}): {_verdict(c.verdict)}: {c.message.splitlines()[0] if c.message else ''}"
                  for c in failing[:FAILING_CASES_SHOWN]]
        tests.append({"name": _("Correctness: {group}").format(group=group.name), "number": f"1.{i}", "score": group.points,
                      "max_score": group.points_possible, "output": "\n".join(lines), "output_format": "md",
                      "tags": ["correctness"]})
    if result.integrity:
        tests.append({"name": _("Integrity: the sandbox's claims add up"), "number": "3", "score": 0, "max_score": 0,
                      "status": "failed", "output": "\n".join(result.integrity)[:OUTPUT_CHARS],
                      "output_format": "text"})
    for i, stage in enumerate(result.stages, start=1):
        tests.append({"name": _("Stage {name}: {title}").format(name=stage.name, title=stage.title), "number": f"2.{i}", "score": stage.points,
                      "max_score": stage.points_possible, "output": _stage_output(stage, result.device_profile),
                      "output_format": "text", "status": "passed" if stage.verdict == Verdict.PASSED else "failed",
                      "tags": ["performance"]})
    out: dict[str, Any] = {
        "score": result.score,
        "output": f"**{_verdict(result.verdict)}** ({result.score:g}/{result.max_score:g}). {result.message}".strip(),
        "output_format": "md",
        "visibility": "visible",
        "stdout_visibility": "hidden",
        "tests": tests,
        "extra_data": {"schema_version": result.schema_version, "verdict": result.verdict.value,
                       "submission_hash": result.submission_hash, "backend": result.backend,
                       "device_profile": result.device_profile, "time_is_modelled": result.time_is_modelled,
                       "seed_digest": result.seeds.master_digest},
    }
    if result.finished_at is not None:
        out["execution_time"] = round(max(0.0, (result.finished_at - result.started_at).total_seconds()), 3)
    return out


def write_gradescope(result: GradeResult, path: Path) -> Path:
    """Writes Gradescope's results.json for `result` at `path` (atomically); returns `path`."""
    return atomic_write_text(path, json.dumps(to_gradescope(result), indent=2))
