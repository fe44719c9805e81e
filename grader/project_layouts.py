"""The layouts a lab project may come in, as one table: how each is recognised, where its sources and entry live.

A submission is graded as laid out: the grader's handout (mlu/, cpp/, ops.py), the AICS exp_5_1 project as the
course hands it out (mlu_custom_ext/mlu/src, mlu_custom_ext/mlu_functions, setup.py), Cambricon's
examples/mlu_extension (mlu_custom_ext/src, src/mlu, ops/, setup.py), or a flat folder. Whatever the layout,
the build is the grader's recipe over the sources the table names (sandbox/bang_harness/plan.py): the student's
setup.py is read for the extension's name only and never run, so every layout is compiled with the same flags.

The entry is found by the lab's names: a Python function in the project's package (`mlu_functions.sigmoid`,
`ops.active_sigmoid_mlu`), else a pybind11 function of the extension (`active_sigmoid`), else an operator
registered with TORCH_LIBRARY (`torch.ops.<namespace>.<op>`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from bang_harness.plan import BuildPlan

from grader.i18n import N_, _

_PYBIND = re.compile(r"\bPYBIND11_MODULE\s*\(\s*(\w+)\s*,\s*(\w+)\s*\)")
_TORCH_LIBRARY = re.compile(r"\bTORCH_LIBRARY(?:_FRAGMENT)?\s*\(\s*(\w+)\s*,\s*(\w+)\s*\)")
_SETUP_NAME = re.compile(r"\b(?:MLU|Cpp|CUDA)?Extension\s*\(\s*(?:name\s*=\s*)?[\"']([\w.]+)[\"']")
_IGNORED_DIRS = {"build", "dist", "tests", "test", "__pycache__"}
SEARCH_DEPTH = 4  # how deep a misplaced project is looked for, to point at the folder to submit


def text_name(name: str) -> str:
    """A file name as text for ids, exports and messages: a name is bytes, and bytes that are not UTF-8 (a
    student's tar may hold any) are shown as U+FFFD."""
    return os.fsencode(name).decode("utf-8", "replace")


@dataclass(frozen=True)
class Need:
    """One thing a usable project of a layout has: a glob relative to its root, and what it is for."""

    pattern: str
    what: str


@dataclass(frozen=True)
class ProjectLayout:
    name: str
    title: str
    markers: tuple[str, ...]  # globs that all match: the submission is laid out this way
    needs: tuple[Need, ...]  # all must match for the layout to be usable
    mlu: tuple[str, ...] = ()  # kernel sources the build compiles
    cpp: tuple[str, ...] = ()  # binding sources
    includes: tuple[str, ...] = ()  # header folders beyond each source's own
    python: tuple[str, ...] = ()  # where entry functions are looked for (setup.py and tests never count)
    builds_extension: bool = True  # False is kept for standalone main() programs (exp_5_2, issue 13 item 2)

    def missing(self, root: Path) -> list[str]:
        return [f"{need.pattern} ({_(need.what)})" for need in self.needs if not _matches(root, need.pattern)]

    def recognises(self, root: Path) -> bool:
        return all(_matches(root, marker) for marker in self.markers)

    def files(self, root: Path, patterns: tuple[str, ...]) -> list[Path]:
        found = {p for pattern in patterns for p in root.glob(pattern) if p.is_file() and not _ignored(root, p)}
        return sorted(found)

    def plan(self, root: Path, extension: str) -> BuildPlan:
        def rel(paths: list[Path]) -> tuple[str, ...]:
            return tuple(p.relative_to(root).as_posix() for p in paths)

        return BuildPlan(extension=extension, mlu_sources=rel(self.files(root, self.mlu)),
                         cpp_sources=rel(self.files(root, self.cpp)),
                         include_dirs=tuple(d for d in self.includes if (root / d).is_dir()))


HANDOUT = ProjectLayout(
    name="handout", title=N_("the grader's handout (mlu/, cpp/, ops.py)"),
    markers=("mlu", "cpp"),
    needs=(Need("mlu/*.mlu", N_("kernels")), Need("cpp/*.cpp", N_("PyTorch bindings")), Need("ops.py", N_("entry functions"))),
    mlu=("mlu/*.mlu",), cpp=("cpp/*.cpp",), includes=("mlu", "cpp"), python=("ops.py",))

LAYOUTS: tuple[ProjectLayout, ...] = (
    ProjectLayout(
        name="aics_exp_5_1", title=N_("the AICS exp_5_1 project (mlu_custom_ext/mlu/src, mlu_functions, setup.py)"),
        markers=("mlu_custom_ext/mlu",),
        needs=(Need("mlu_custom_ext/mlu/src/*.mlu", N_("kernels")),
               Need("mlu_custom_ext/mlu/src/*.cpp", N_("PyTorch bindings")),
               Need("mlu_custom_ext/mlu_functions/*.py", N_("the Python functions, e.g. sigmoid"))),
        mlu=("mlu_custom_ext/mlu/src/*.mlu",), cpp=("mlu_custom_ext/mlu/src/*.cpp",),
        includes=("mlu_custom_ext/mlu/include",), python=("mlu_custom_ext/**/*.py",)),
    ProjectLayout(
        name="mlu_extension", title=N_("Cambricon's examples/mlu_extension (mlu_custom_ext/src, src/mlu, ops/)"),
        markers=("mlu_custom_ext/src",),
        needs=(Need("mlu_custom_ext/src/mlu/*.mlu", N_("kernels")), Need("mlu_custom_ext/src/*.cpp", N_("PyTorch bindings")),
               Need("mlu_custom_ext/ops/*.py", N_("the Python functions, e.g. active_sigmoid_mlu"))),
        mlu=("mlu_custom_ext/src/mlu/*.mlu", "mlu_custom_ext/src/*.mlu"), cpp=("mlu_custom_ext/src/*.cpp",),
        includes=("mlu_custom_ext/src", "mlu_custom_ext/src/mlu"), python=("mlu_custom_ext/**/*.py",)),
    HANDOUT,
    ProjectLayout(
        name="flat", title=N_("a flat folder (*.mlu, *.cpp and the Python entry side by side)"),
        markers=("*.mlu", "*.cpp"),
        needs=(Need("*.mlu", N_("kernels")), Need("*.cpp", N_("PyTorch bindings"))),
        mlu=("*.mlu",), cpp=("*.cpp",), python=("*.py",)),
    # "programs" (exp_5_2: standalone main() programs, one stage each) belongs here with builds_extension=False.
)


@dataclass(frozen=True)
class Entry:
    """Where the harness finds a function: `module` is imported, `entry` is a dotted attribute path in it."""

    module: str
    entry: str
    described: str  # how the student would call it, e.g. mlu_functions.sigmoid, torch.ops.ns.op


def layout_named(name: str) -> ProjectLayout:
    return next(layout for layout in LAYOUTS if layout.name == name)


def detect(root: Path) -> ProjectLayout | None:
    """The first layout of the table whose markers all match (the table is ordered most specific first)."""
    return next((layout for layout in LAYOUTS if layout.recognises(root)), None)


def closest(root: Path) -> tuple[ProjectLayout, list[str]]:
    """The layout the submission comes nearest to, by the share of its markers and needs present, and what is
    missing from it."""
    def share(layout: ProjectLayout) -> float:
        checks = [*layout.markers, *(n.pattern for n in layout.needs)]
        return sum(_matches(root, c) for c in checks) / len(checks)

    best = max(LAYOUTS, key=share)  # ties go to the earlier (more specific) layout
    return best, best.missing(root)


def unusable_message(root: Path) -> str:
    """For a submission no layout fits: the closest layout and what it lacks, and any project deeper inside."""
    layout, missing = closest(root)
    lines = [_("no known project layout fits this folder; the closest is {layout} [{name}], which needs:").format(
        layout=_(layout.title), name=layout.name), *(f"  - {m}" for m in missing)]
    nested = _nested_project(root)
    if nested is not None:
        lines.append(_("{folder}/ holds {layout}: submit that folder instead").format(
            folder=nested[1].relative_to(root), layout=_(nested[0].title)))
    lines.append(_("known layouts:") + " " + "; ".join(f"{lay.name}: {_(lay.title)}" for lay in LAYOUTS))
    return "\n".join(lines)


def extension_name(layout: ProjectLayout, root: Path, default: str) -> str:
    """The extension's module name: a literal PYBIND11_MODULE name must be kept (Python looks up PyInit_<name>);
    otherwise the last part of setup.py's Extension name (`mlu_custom_ext._C` -> `_C`), else `default`."""
    for path in layout.files(root, layout.cpp):
        match = _PYBIND.search(_read(path))
        if match and match.group(1) != "TORCH_EXTENSION_NAME":
            return match.group(1)
    match = _SETUP_NAME.search(_read(root / "setup.py"))
    return match.group(1).split(".")[-1] if match else default


def find_entry(layout: ProjectLayout, root: Path, name: str, extension: str) -> Entry | None:
    """The lab's entry for `name` (an assignment's entry, e.g. sigmoid), in the order a student would call it."""
    names = (name, f"active_{name}_mlu", f"active_{name}", f"{name}_mlu")
    for candidate in names:
        for path in layout.files(root, layout.python):
            module = _module_name(root, path)
            if module is not None and path.name != "setup.py" and re.search(rf"^def {candidate}\s*\(", _read(path), re.M):
                return Entry(module, candidate, f"{module}.{candidate}")
    bindings = [_read(p) for p in layout.files(root, layout.cpp)]
    for candidate in names:
        for text in bindings:
            if _PYBIND.search(text) and re.search(rf"\.def\s*\(\s*\"{candidate}\"", text):
                return Entry(extension, candidate, f"{extension}.{candidate} (pybind11)")
    for candidate in names:
        for text in bindings:
            for namespace in {m.group(1) for m in _TORCH_LIBRARY.finditer(text)}:
                if re.search(rf"\.def\s*\(\s*\"(?:{namespace}::)?{candidate}\s*\(", text):
                    return Entry("torch", f"ops.{namespace}.{candidate}", f"torch.ops.{namespace}.{candidate}")
    return None


def _module_name(root: Path, path: Path) -> str | None:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts) if parts and all(p.isidentifier() for p in parts) else None


def _nested_project(root: Path) -> tuple[ProjectLayout, Path] | None:
    for folder in _folders(root, SEARCH_DEPTH):
        layout = detect(folder)
        if layout is not None and not layout.missing(folder):
            return layout, folder
    return None


def _folders(root: Path, depth: int) -> Iterator[Path]:
    if depth == 0:
        return
    for child in sorted(p for p in root.iterdir() if p.is_dir() and not p.is_symlink()):
        if child.name not in _IGNORED_DIRS and not child.name.startswith("."):
            yield child
            yield from _folders(child, depth - 1)


def _matches(root: Path, pattern: str) -> bool:
    return any(not _ignored(root, p) for p in root.glob(pattern))


def _ignored(root: Path, path: Path) -> bool:
    return any(part in _IGNORED_DIRS for part in path.relative_to(root).parts[:-1])


def _read(path: Path) -> str:
    try:  # regular files only: a FIFO would block detection (layout.refuse_special_files names it)
        return path.read_text(encoding="utf-8", errors="replace") if path.is_file() else ""
    except OSError:
        return ""
