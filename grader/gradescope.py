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
from grader.results import GradeResult, StageResult, Verdict

OUTPUT_CHARS = 8000  # Gradescope shows long outputs, but a page of compiler errors is enough
FAILING_CASES_SHOWN = 10


def _stage_output(stage: StageResult, device_profile: str) -> str:
    lines = [f"{stage.verdict.value}: {stage.message}"]
    if stage.timing is not None:
        source = f"modelled ({device_profile})" if stage.timing.source == "modelled" else stage.timing.source
        line = f"time {stage.timing.median_us:.4g} us, {source}"
        if stage.threshold_us is not None:
            line += f"; threshold {stage.threshold_us:.4g} us"
        lines.append(line)
    if stage.next_step:
        lines.append(f"next step: {stage.next_step}")
    return "\n".join(lines)


def to_gradescope(result: GradeResult) -> dict[str, Any]:
    """Gradescope's results document for `result`; the top-level score is the grade."""
    tests: list[dict[str, Any]] = []
    if result.build is not None:
        tests.append({"name": "Build", "number": "0", "status": "passed" if result.build.ok else "failed",
                      "output": "built" if result.build.ok else result.build.compiler_output[-OUTPUT_CHARS:],
                      "output_format": "text"})
    for i, group in enumerate(result.groups, start=1):
        failing = [c for c in result.cases if c.group == group.name and not c.passed]
        lines = [f"{group.passed_cases}/{group.total_cases} cases correct. {group.description}".strip()]
        lines += [f"- {c.name} ({c.entry}): {c.verdict.value}: {c.message.splitlines()[0] if c.message else ''}"
                  for c in failing[:FAILING_CASES_SHOWN]]
        tests.append({"name": f"Correctness: {group.name}", "number": f"1.{i}", "score": group.points,
                      "max_score": group.points_possible, "output": "\n".join(lines), "output_format": "md",
                      "tags": ["correctness"]})
    if result.integrity:
        tests.append({"name": "Integrity: the sandbox's claims add up", "number": "3", "score": 0, "max_score": 0,
                      "status": "failed", "output": "\n".join(result.integrity)[:OUTPUT_CHARS],
                      "output_format": "text"})
    for i, stage in enumerate(result.stages, start=1):
        tests.append({"name": f"Stage {stage.name}: {stage.title}", "number": f"2.{i}", "score": stage.points,
                      "max_score": stage.points_possible, "output": _stage_output(stage, result.device_profile),
                      "output_format": "text", "status": "passed" if stage.verdict == Verdict.PASSED else "failed",
                      "tags": ["performance"]})
    out: dict[str, Any] = {
        "score": result.score,
        "output": f"**{result.verdict.value}** ({result.score:g}/{result.max_score:g}). {result.message}".strip(),
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
