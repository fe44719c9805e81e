"""assignments/<name>/programs.toml: a folder of standalone lab programs, one stage per file-name prefix."""

from __future__ import annotations

import tomllib
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from grader.spec import AssignmentSpec, load_assignment
from grader.spec.loader import ASSIGNMENTS_ROOT
from grader.spec.models import GroupSpec

PROGRAMS_FILE = "programs.toml"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ProgramStage(_Strict):
    prefix: str
    stage: str  # the base assignment's stage whose title, requirements and calibrated threshold apply
    dims: dict[str, int]  # the lab's shape, in the base's dims: where the program is timed


class ProgramsSpec(_Strict):
    name: str
    title: str
    base: str
    kernel: str
    args: dict[str, int]
    correct_points: float
    speed_points: float
    stages: list[ProgramStage]

    def stage_for(self, stem: str) -> ProgramStage | None:
        return next((s for s in self.stages if stem.startswith(s.prefix)), None)

    def scored_as(self, base: AssignmentSpec) -> AssignmentSpec:
        """The base assignment as the programs are scored under it (scoring.group_scores, decide_stage): each
        program one case group of `correct_points` (its captured output) and its base stage, timed at the lab's
        dims, worth `speed_points` and gated on that group."""
        groups = [GroupSpec(name=s.stage, description=f"{s.prefix}*.mlu", points=self.correct_points,
                            scoring="all_or_nothing") for s in self.stages]
        stages = [base.stage(s.stage).model_copy(update={
            "points": self.speed_points, "groups": [s.stage],
            "perf": base.stage(s.stage).perf.model_copy(update={"dims": dict(s.dims)})}) for s in self.stages]
        return base.model_copy(update={"name": self.name, "title": self.title, "groups": groups, "stages": stages})


def programs_assignment_for(folder: Path, root: Path = ASSIGNMENTS_ROOT) -> str | None:
    """The programs assignment a folder is laid out for (lab programs with their own main(), no binding), if any:
    what lets `grade submit` take the exp_5_2 folder as published, without `-a`."""
    if any(folder.glob("*.cpp")) or any((folder / d).is_dir() for d in ("cpp", "mlu", "mlu_custom_ext")):
        return None
    sources = sorted(folder.glob("*.mlu"))
    for spec_file in sorted(root.glob(f"*/{PROGRAMS_FILE}")):
        spec = ProgramsSpec.model_validate(tomllib.loads(spec_file.read_text(encoding="utf-8")))
        if any(spec.stage_for(p.stem) and "main(" in p.read_text(encoding="utf-8", errors="replace")
               for p in sources):
            return spec.name
    return None


def load_programs(name: str, root: Path = ASSIGNMENTS_ROOT) -> tuple[ProgramsSpec, AssignmentSpec]:
    """The programs spec and its base assignment (tolerances, checks, stage requirements)."""
    data = tomllib.loads((root / name / PROGRAMS_FILE).read_text(encoding="utf-8"))
    spec = ProgramsSpec.model_validate(data)
    base = load_assignment(spec.base, root)
    known = {s.name for s in base.stages}
    unknown = [s.stage for s in spec.stages if s.stage not in known]
    if unknown:
        raise ValueError(f"{name}/{PROGRAMS_FILE}: stages {unknown} are not stages of {spec.base}")
    wrong = [s.stage for s in spec.stages if set(s.dims) != set(base.stage(s.stage).perf.dims)]
    if wrong:
        raise ValueError(f"{name}/{PROGRAMS_FILE}: the dims of stages {wrong} are not {spec.base}'s perf dims")
    return spec, base
