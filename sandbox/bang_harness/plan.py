"""The build plan: which files of the submission the build compiles, and into which extension.

Standard library only: written by the host (grader/project_layouts.py decides it from the submission's layout)
to /io/build_plan.json before the build phase, read here by the harness. The host does the layout detection once;
the harness only executes the plan with its own, fixed compiler flags (the student's setup.py never runs).
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path, PurePosixPath

BUILD_PLAN_FILE = "build_plan.json"  # under /io in the build phase
PREBUILT_DIR = "prebuilt"  # under /io: binding objects the host's object cache already has
OBJECT_DIR = "obj"  # under /build: every object the build compiled


def cpp_object_name(index: int, source: str) -> str:
    """The object of the plan's `index`-th .cpp source under /build/obj (stems may repeat across folders)."""
    return f"cpp_{index}_{PurePosixPath(source).stem}.o"
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_OBJECT_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}\.o$")


class PlanError(ValueError):
    """The plan is malformed or points outside the submission (a host bug, or a forged file)."""


@dataclass(frozen=True)
class BuildPlan:
    extension: str  # the library's name: /build/ext/<extension>.so, and TORCH_EXTENSION_NAME
    mlu_sources: tuple[str, ...]  # paths relative to the submission root, POSIX separators
    cpp_sources: tuple[str, ...]
    include_dirs: tuple[str, ...] = ()  # beyond each source's own folder, which is always searched
    # .cpp source -> object file under /io/prebuilt/ compiled from the same inputs by an earlier build
    prebuilt: tuple[tuple[str, str], ...] = ()

    @classmethod
    def handout(cls, submission: Path, extension: str) -> BuildPlan:
        """The handout layout's plan (mlu/*.mlu, cpp/*.cpp): what a build without a plan file compiles."""
        return cls(extension=extension,
                   mlu_sources=tuple(p.relative_to(submission).as_posix() for p in sorted(submission.glob("mlu/*.mlu"))),
                   cpp_sources=tuple(p.relative_to(submission).as_posix() for p in sorted(submission.glob("cpp/*.cpp"))),
                   include_dirs=("mlu", "cpp"))

    def to_json(self) -> str:
        data = asdict(self)
        data["prebuilt"] = dict(self.prebuilt)
        return json.dumps(data, indent=1)

    @classmethod
    def from_json(cls, text: str) -> BuildPlan:
        try:
            data = json.loads(text)
            plan = cls(extension=str(data["extension"]),
                       mlu_sources=tuple(str(p) for p in data.get("mlu_sources", [])),
                       cpp_sources=tuple(str(p) for p in data.get("cpp_sources", [])),
                       include_dirs=tuple(str(p) for p in data.get("include_dirs", [])),
                       prebuilt=tuple((str(src), str(obj)) for src, obj in dict(data.get("prebuilt", {})).items()))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise PlanError(f"build plan is malformed: {type(exc).__name__}: {exc}") from exc
        plan.validate()
        return plan

    def validate(self) -> None:
        # The name becomes a file name, a -D macro and an import statement; paths must stay inside the submission.
        if not _IDENTIFIER.match(self.extension):
            raise PlanError(f"extension {self.extension!r} is not a Python identifier")
        for rel in (*self.mlu_sources, *self.cpp_sources, *self.include_dirs):
            path = PurePosixPath(rel)
            if path.is_absolute() or ".." in path.parts or not rel:
                raise PlanError(f"build plan path {rel!r} is not a relative path inside the submission")
        for source, obj in self.prebuilt:
            if source not in self.cpp_sources or not _OBJECT_NAME.match(obj):
                raise PlanError(f"prebuilt object {obj!r} for {source!r} is not one of the plan's .cpp sources")

    def resolve(self, submission: Path) -> tuple[list[Path], list[Path], list[Path]]:
        """(mlu sources, cpp sources, include folders) under `submission`; include folders start with the
        plan's own, then every source's folder, each once."""
        mlu = [submission / p for p in self.mlu_sources]
        cpp = [submission / p for p in self.cpp_sources]
        includes = [submission / d for d in self.include_dirs] + [p.parent for p in (*mlu, *cpp)]
        return mlu, cpp, list(dict.fromkeys(includes))


def load_plan(io: Path, submission: Path, default_extension: str) -> BuildPlan:
    """The host's plan from /io, or the handout layout's when the host wrote none (older hosts, direct runs)."""
    path = io / BUILD_PLAN_FILE
    if path.is_file():
        return BuildPlan.from_json(path.read_text(encoding="utf-8"))
    return BuildPlan.handout(submission, default_extension)
