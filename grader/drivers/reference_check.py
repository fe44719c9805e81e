"""A class is never graded on a seed its own references fail (issue 27).

Before `grade batch` grades anyone, the assignment's reference kernels (reference_kernels/<assignment>/<stage>/,
each on its own stage, as `grade calibrate` uses them) are graded on the batch's seed. A reference that fails a
case there would cost every student the same points for what is a defect of the grader or of the tolerances, so
the batch stops and says which reference, which case and why, before any student is graded. It does not draw
another seed: that would hide the defect from the instructor (and from us), and secret inputs chosen by what the
references pass are no longer the spec's distribution. Builds are cached by content, so this costs each
reference's run phase only, and once per seed: guard_seed() is the one guard, keyed by seed_check_key() and
kept in a SeedRecord (the batch's DIR/references.json, FileRecord; the course server's assignment row).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol

from grader import __version__
from grader.atomic_file import atomic_write_text
from grader.batch.store import seed_digest
from grader.i18n import _
from grader.orchestration.options import GradeEnvironment, GradeRequest
from grader.orchestration.pipeline import grade_submission
from grader.spec import REFERENCE_ROOT, load_assignment

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


# Told before each reference is graded: (how many were graded before it, how many there are, its folder as shown).
Progress = Callable[[int, int, str], None]


def check_references(assignment: str, request: GradeRequest, environment: GradeEnvironment,
                     root: Path = REFERENCE_ROOT, progress: Progress | None = None) -> ReferenceCheck:
    """Grades each reference on `request`'s seed in `environment`; a case or stage it does not get right is a
    failure. `progress` hears each one before it is graded."""
    started = time.monotonic()
    check = ReferenceCheck()
    folders = reference_folders(assignment, root)
    for index, (folder, stage) in enumerate(folders):
        shown = _shown(folder, root)
        check.references.append(shown)
        if progress is not None:
            progress(index, len(folders), shown)
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


def seed_check_key(seed: str, spec_hash: str, backend: str, device: str | None) -> str:
    """What a passed reference check holds for: the seed, the assignment's files, the grader, the device."""
    return f"{seed_digest(seed)}:{spec_hash}:{__version__}:{backend}:{device}"


class SeedRecord(Protocol):
    """Where the guard keeps its verdict on a seed: the key of the check that passed last, and each check."""

    def passed_key(self) -> str | None: ...

    def save(self, key: str, check: ReferenceCheck) -> None: ...


def guard_seed(assignment: str, request: GradeRequest, environment: GradeEnvironment, record: SeedRecord, *,
               spec_hash: str, device: str | None, root: Path = REFERENCE_ROOT,
               announce: Callable[[], None] | None = None, progress: Progress | None = None) -> ReferenceCheck | None:
    """The reference-seed guard: the assignment's reference kernels graded on `request`'s seed in `environment`
    (check_references) and the check saved in `record`, unless a check on the same key passed before (then None:
    nothing graded).
    `device`: the device the key names (the batch's first slot, the server's device type); `announce`: called
    before the references are graded (it takes a while); `progress`: before each one (check_references)."""
    assert request.seed is not None, "the guard checks a drawn seed"
    key = seed_check_key(request.seed, spec_hash, environment.backend, device)
    if record.passed_key() == key:
        return None
    if announce is not None:
        announce()
    check = check_references(assignment, request, environment, root, progress)
    record.save(key, check)
    return check


def failure_message(head: str, check: ReferenceCheck, advice: str) -> str:
    """What the instructor reads when the references fail on a seed: `head`, each failure, `advice`."""
    return "\n".join([head, *(f"  {line}" for line in check.failures), advice])


def guard_message(check: ReferenceCheck, digest: str, seed_mode: str, batch_dir: Path) -> str:
    """What the instructor reads when the references fail on the batch's seed."""
    head = _("stopped before grading anyone: the assignment's own reference kernels fail on this batch's {mode} "
             "seed (digest {digest}), so every student would lose the same points:").format(
                 mode=_("secret") if seed_mode == "secret" else _("public"), digest=digest)
    advice = _("This is a defect of the grader or of the assignment's tolerances, never of a student; please "
               "report it with the lines above. `grade submit <reference> --seed <the seed in {manifest}>` "
               "reproduces it. To grade the class now on another seed, remove {manifest} (a new secret seed is "
               "drawn) or pass --seed, and rerun.").format(manifest=batch_dir / "batch.json")
    return failure_message(head, check, advice)


@dataclass
class FileRecord:
    """The batch's SeedRecord: DIR/references.json, written when a check passes (a failure stops the batch)."""

    batch_dir: Path

    def passed_key(self) -> str | None:
        try:
            key = json.loads((self.batch_dir / RECORD).read_text()).get("key")
        except (OSError, ValueError, AttributeError):
            return None
        return key if isinstance(key, str) else None

    def save(self, key: str, check: ReferenceCheck) -> None:
        if not check.failures:
            atomic_write_text(self.batch_dir / RECORD, json.dumps({
                "key": key, "references": check.references, "failures": check.failures,
                "seconds": round(check.seconds, 1)}, indent=1))


def _shown(folder: Path, root: Path) -> str:
    resolved = folder.resolve()
    base = root.resolve().parent
    return str(resolved.relative_to(base)) if resolved.is_relative_to(base) else str(folder)
