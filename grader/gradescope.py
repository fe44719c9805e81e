"""Gradescope export: our GradeResult as Gradescope's autograder results.json (docs/specs.md).

Our own results.json stays the source of truth; this adapter flattens it into one Gradescope test per case
group (correctness points) and per stage (performance points), plus an unscored build check.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from grader.results import GradeResult, Verdict


def to_gradescope(result: GradeResult) -> dict[str, Any]:
    tests: list[dict[str, Any]] = []
    if result.build is not None:
        tests.append({"name": "Build", "number": "0", "status": "passed" if result.build.ok else "failed",
                      "output": "built" if result.build.ok else result.build.compiler_output[-8000:],
                      "output_format": "text"})
    for i, group in enumerate(result.groups, start=1):
        failing = [c for c in result.cases if c.group == group.name and not c.passed]
        lines = [f"{group.passed_cases}/{group.total_cases} cases correct. {group.description}".strip()]
        lines += [f"- {c.name} ({c.entry}): {c.verdict.value}: {c.message.splitlines()[0] if c.message else ''}"
                  for c in failing[:10]]
        tests.append({"name": f"Correctness: {group.name}", "number": f"1.{i}", "score": group.points,
                      "max_score": group.points_possible, "output": "\n".join(lines), "output_format": "md",
                      "tags": ["correctness"]})
    if result.integrity:
        tests.append({"name": "Integrity: the sandbox's claims add up", "number": "3", "score": 0, "max_score": 0,
                      "status": "failed", "output": "\n".join(result.integrity)[:8000], "output_format": "text"})
    for i, stage in enumerate(result.stages, start=1):
        output = [f"{stage.verdict.value}: {stage.message}"]
        if stage.timing is not None:
            output.append(f"time {stage.timing.median_us:.4g} us ({stage.timing.source}, {result.device_profile})")
        if stage.next_step:
            output.append(f"next step: {stage.next_step}")
        tests.append({"name": f"Stage {stage.name}: {stage.title}", "number": f"2.{i}", "score": stage.points,
                      "max_score": stage.points_possible, "output": "\n".join(output), "output_format": "text",
                      "status": "passed" if stage.verdict == Verdict.PASSED else "failed", "tags": ["performance"]})
    elapsed = (result.finished_at - result.started_at).total_seconds() if result.finished_at else None
    out: dict[str, Any] = {
        "score": result.score,
        "output": f"**{result.verdict.value}** ({result.score:g}/{result.max_score:g}). {result.message}",
        "output_format": "md",
        "visibility": "visible",
        "stdout_visibility": "hidden",
        "tests": tests,
        "extra_data": {"schema_version": result.schema_version, "verdict": result.verdict.value,
                       "backend": result.backend, "device_profile": result.device_profile,
                       "time_is_modelled": result.time_is_modelled, "seed_digest": result.seeds.master_digest},
    }
    if elapsed is not None:
        out["execution_time"] = round(elapsed, 3)
    return out


def write_gradescope(result: GradeResult, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(to_gradescope(result), indent=2), encoding="utf-8")
    tmp.replace(path)
    return path
