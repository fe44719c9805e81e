"""A class is never graded on a seed its own references fail (issue 27).

Before `grade batch` grades anyone, the assignment's reference kernels (reference_kernels/<assignment>/<stage>/,
each on its own stage, as `grade calibrate` uses them) are graded on the batch's seed. A reference that fails a
case there would cost every student the same points for what is a defect of the grader or of the tolerances, so
the batch stops and says which reference, which case and why, before any student is graded. It does not draw
another seed: that would hide the defect from the instructor (and from us), and secret inputs chosen by what the
references pass are no longer the spec's distribution. Builds are cached by content, so this costs each
reference's run phase only, and once per batch directory and seed: the verdict is kept in DIR/references.json.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from grader.atomic_file import atomic_write_text
from grader.i18n import _
from grader.orchestration.calibrate import REFERENCE_ROOT
from grader.orchestration.options import GradeEnvironment, GradeRequest
from grader.orchestration.pipeline import grade_submission
from grader.spec import load_assignment

RECORD = "references.json"


@dataclass
class ReferenceCheck:
    references: list[str] = field(default_factory=list)  # the folders graded
    failures: list[str] = field(default_factory=list)  # "<folder>: <case> (<entry>): <message>"
    seconds: float = 0.0


def reference_folders(assignment: str, root: Path = REFERENCE_ROOT) -> list[tuple[Path, str]]:
    """(folder, stage) for every stage of the assignment that has a reference kernel."""
    spec = load_assignment(assignment)
    return [(root / spec.name / s.name, s.name) for s in spec.stages if (root / spec.name / s.name).is_dir()]


def check_references(assignment: str, request: GradeRequest, environment: GradeEnvironment,
                     root: Path = REFERENCE_ROOT) -> ReferenceCheck:
    """Grades each reference on `request`'s seed; a case or stage it does not get right is a failure."""
    started = time.monotonic()
    check = ReferenceCheck()
    for folder, stage in reference_folders(assignment, root):
        shown = _shown(folder, root)
        check.references.append(shown)
        result = grade_submission(folder, replace(request, assignment=assignment, stages=(stage,)),
                                  environment)
        failing = [f"{c.name} ({c.entry}): {c.message.splitlines()[0] if c.message else c.verdict.value}"
                   for c in result.cases if not c.passed]
        if not failing:  # a failing case already says why its stage is not correct
            failing = [_("stage {stage}: {verdict}").format(stage=s.name, verdict=s.verdict.value)
                       for s in result.stages if not s.correct]
        if not result.cases and not failing:
            failing = [f"{result.verdict.value}: {result.message.splitlines()[0] if result.message else ''}"]
        check.failures += [f"{shown}: {f}" for f in failing[:3]]
    check.seconds = time.monotonic() - started
    return check


def guard_message(check: ReferenceCheck, digest: str, seed_mode: str, batch_dir: Path) -> str:
    """What the instructor reads when the references fail on the batch's seed."""
    head = _("stopped before grading anyone: the assignment's own reference kernels fail on this batch's {mode} "
             "seed (digest {digest}), so every student would lose the same points:").format(
                 mode=_("secret") if seed_mode == "secret" else _("public"), digest=digest)
    advice = _("This is a defect of the grader or of the assignment's tolerances, never of a student; please "
               "report it with the lines above. `grade submit <reference> --seed <the seed in {manifest}>` "
               "reproduces it. To grade the class now on another seed, remove {manifest} (a new secret seed is "
               "drawn) or pass --seed, and rerun.").format(manifest=batch_dir / "batch.json")
    return "\n".join([head, *(f"  {line}" for line in check.failures), advice])


def checked_before(batch_dir: Path, key: str) -> bool:
    try:
        return json.loads((batch_dir / RECORD).read_text()).get("key") == key
    except (OSError, ValueError, AttributeError):
        return False


def record_check(batch_dir: Path, key: str, check: ReferenceCheck) -> None:
    atomic_write_text(batch_dir / RECORD, json.dumps({"key": key, "references": check.references,
                                                      "failures": check.failures,
                                                      "seconds": round(check.seconds, 1)}, indent=1))


def _shown(folder: Path, root: Path) -> str:
    resolved = folder.resolve()
    base = root.resolve().parent
    return str(resolved.relative_to(base)) if resolved.is_relative_to(base) else str(folder)
