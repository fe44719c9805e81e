"""The student contract, checked on the host before anything is built: folders, grade.toml, entry functions.

The handout layout is checked here in detail; the lab projects as published (AICS exp_5_1, Cambricon's
mlu_extension, a flat folder) are recognised by the table in grader/project_layouts.py.

Every problem becomes a LayoutError whose message says what is missing and shows the expected layout.
"""

from __future__ import annotations

import ast
import os
import re
import stat
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path

from bang_harness.plan import BuildPlan

from grader.i18n import N_, _
from grader.project_layouts import (
    HANDOUT,
    ProjectLayout,
    closest,
    detect,
    extension_name,
    find_entry,
    layout_named,
    text_name,
    unusable_message,
)
from grader.results import Student
from grader.spec.models import AssignmentSpec

DEFAULT_MODULE = "ops"
DEFAULT_EXTENSION = "my_ops_ext"
MAX_FILES = 2000
MAX_BYTES = 50 << 20
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_REGISTRATION = re.compile(r"\b(TORCH_LIBRARY(_FRAGMENT|_IMPL)?|PYBIND11_MODULE)\s*\(")
_TOP_KEYS = {"assignment", "module", "extension", "student", "entries"}

EXPECTED_LAYOUT = N_("""\
Expected layout (see the README, "Student handout"):
  my_ops/
    mlu/*.mlu, mlu/*.h   kernels and host entry functions that launch them with <<<dim, type, queue>>>
    cpp/*.cpp, cpp/*.h   PyTorch bindings: TORCH_LIBRARY(+_IMPL) or PYBIND11_MODULE(TORCH_EXTENSION_NAME, m)
    ops.py               entry functions, e.g. sigmoid(x) and matmul(a, b), calling the compiled op
    grade.toml           optional: assignment, module, extension, [student] id/name, [entries] stage = "function\"""")


class LayoutError(Exception):
    """The submission cannot be graded as laid out; str() is the whole message for the student."""

    def __init__(self, problem: str, show_layout: bool = True, layout: str | None = None) -> None:
        super().__init__(problem + ("\n\n" + _(EXPECTED_LAYOUT) if show_layout else ""))
        self.problem = problem
        self.layout = layout  # the layout recognised (or the closest one), for the results


class ModuleSyntaxError(Exception):
    """The entry module does not parse: reported as a compile error with Python's message."""


@dataclass
class Submission:
    root: Path
    student: Student
    assignment: str | None
    module: str
    extension: str
    entries: dict[str, str]
    warnings: list[str] = field(default_factory=list)
    layout: str = HANDOUT.name  # grader/project_layouts.py LAYOUTS
    plan: BuildPlan | None = None  # what the build compiles (None: the handout's folders)
    entry_default: str | None = None  # the entry found by the lab's names (bind_entry); None: the spec's

    @property
    def module_path(self) -> Path | None:
        """The module's source file (a package's __init__.py), or None when the module is not a file of the
        submission (the extension itself, or torch for a torch.ops entry)."""
        base = self.root.joinpath(*self.module.split("."))
        for path in (base.with_suffix(".py"), base / "__init__.py"):
            if path.is_file():
                return path
        return None


def inspect_submission(root: Path) -> Submission:
    root = Path(root)
    if not root.is_dir():
        raise LayoutError(f"{root} is not a folder")
    refuse_special_files(root)
    _check_size(root)
    config = _read_grade_toml(root)
    found = detect(root)
    if found is not None and found is not HANDOUT:
        return _inspect_project(root, found, config)
    if found is None and not any((root / name).exists() for name in ("mlu", "cpp", f"{config.get('module', DEFAULT_MODULE)}.py")):
        # nothing of the handout either
        raise LayoutError(unusable_message(root), show_layout=False, layout=f"none (closest: {closest(root)[0].name})")
    module = config.get("module", DEFAULT_MODULE)
    extension = config.get("extension", DEFAULT_EXTENSION)
    for key, value in (("module", module), ("extension", extension)):
        if not isinstance(value, str) or not _IDENT.match(value):
            raise LayoutError(_("grade.toml: {key} must be a Python identifier, got {value}").format(
                key=key, value=repr(value)), show_layout=False)
    problems = []
    _sources(root, "mlu", "mlu", _("your .mlu kernels go there"), problems)
    cpp = _sources(root, "cpp", "cpp", _("your PyTorch C++ bindings go there"), problems)
    if cpp and not any(_REGISTRATION.search(p.read_text(encoding="utf-8", errors="replace")) for p in cpp):
        problems.append(_("no file in cpp/ registers an operator: add PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) "
                          "{{ m.def(...); }} or TORCH_LIBRARY(<namespace>, m) {{ m.def(...); }} with "
                          "TORCH_LIBRARY_IMPL").format())
    if not (root / f"{module}.py").is_file():
        where = _("the default module") if "module" not in config else _("grade.toml's module")
        problems.append(_("missing {file} ({where}) at the top of the submission").format(file=f"{module}.py",
                                                                                          where=where))
    if problems:
        raise LayoutError(_("the submission is not laid out as the grader expects:") + "\n" +
                          "\n".join(f"  - {p}" for p in problems), layout=HANDOUT.name)
    student, entries, assignment = _settings(config)
    warnings = []
    if (root / "setup.py").exists():
        warnings.append(_("setup.py is ignored: the grader builds the extension with its own recipe"))
    return Submission(root=root, student=student, assignment=assignment, module=module, extension=extension,
                      entries=entries, warnings=warnings, plan=HANDOUT.plan(root, extension))


def _inspect_project(root: Path, layout: ProjectLayout, config: dict) -> Submission:
    """A lab project as published: usable when the layout's needs are met and a binding registers an operator."""
    missing = layout.missing(root)
    if missing:
        raise LayoutError(_("this looks like {layout} [{name}], but it lacks:").format(layout=_(layout.title),
                                                                                     name=layout.name) + "\n"
                          + "\n".join(f"  - {m}" for m in missing), show_layout=False, layout=layout.name)
    extension = extension_name(layout, root, config.get("extension", DEFAULT_EXTENSION))
    module = config.get("module", "")
    for key, value in (("module", module or "ops"), ("extension", extension)):
        if not isinstance(value, str) or not _IDENT.match(value):
            raise LayoutError(_("{key} must be a Python identifier, got {value}").format(key=key, value=repr(value)),
                              show_layout=False)
    plan = layout.plan(root, extension)
    if not any(_REGISTRATION.search((root / p).read_text(encoding="utf-8", errors="replace")) for p in plan.cpp_sources):
        raise LayoutError(_("no .cpp file of {layout} registers an operator: add PYBIND11_MODULE(...) or "
                            "TORCH_LIBRARY(<namespace>, m) to the binding").format(layout=_(layout.title)),
                          show_layout=False, layout=layout.name)
    student, entries, assignment = _settings(config)
    recipe = _("layout: {layout}; built with the grader's recipe").format(layout=_(layout.title))
    if (root / "setup.py").exists():
        recipe += " " + _("(setup.py is read for the extension's name only, never run)")
    warnings = [recipe]
    return Submission(root=root, student=student, assignment=assignment, module=module, extension=extension,
                      entries=entries, warnings=warnings, layout=layout.name, plan=plan)


def bind_entry(submission: Submission, spec: AssignmentSpec) -> Submission:
    """For a lab project: the module and entry the lab's names give for the assignment (grade.toml's module,
    when set, is used as written)."""
    if submission.layout == HANDOUT.name or submission.module:
        return submission
    layout = layout_named(submission.layout)
    entry = find_entry(layout, submission.root, spec.entry, submission.extension)
    if entry is None:
        raise LayoutError(_("{layout}: no entry for {assignment} found. Looked for a Python function {entry}() or "
                            "active_{entry}_mlu() in {files}, a pybind11 m.def(\"active_{entry}\", ...) and a "
                            "TORCH_LIBRARY op of those names").format(
                              layout=_(layout.title), assignment=spec.name, entry=spec.entry,
                              files=", ".join(layout.python)), show_layout=False, layout=layout.name)
    return replace(submission, module=entry.module, entry_default=entry.entry,
                   warnings=[*submission.warnings, _("entry: {entry}").format(entry=entry.described)])


def offers(submission: Submission, name: str) -> bool:
    """Whether the submission has an entry function `name` (to tell which assignment it is)."""
    if submission.layout != HANDOUT.name and not submission.module:
        layout = layout_named(submission.layout)
        return find_entry(layout, submission.root, name, submission.extension) is not None
    path = submission.module_path
    return path is not None and f"def {name}(" in path.read_text(encoding="utf-8", errors="replace")


def _settings(config: dict) -> tuple[Student, dict[str, str], str | None]:
    """grade.toml's [student], [entries] and assignment, checked."""
    student_table = config.get("student", {})
    if not isinstance(student_table, dict):
        raise LayoutError(_("grade.toml: [student] must be a table with id and name"), show_layout=False)
    student = Student(id=str(student_table.get("id", "anonymous")), name=str(student_table.get("name", "")))
    entries = config.get("entries", {})
    if not isinstance(entries, dict) or not all(isinstance(v, str) and _IDENT.match(v) for v in entries.values()):
        raise LayoutError(_("grade.toml: [entries] maps stage names to function names, e.g. "
                            'matmul_vector = "matmul_vector"'), show_layout=False)
    assignment = config.get("assignment")
    if assignment is not None and not isinstance(assignment, str):
        raise LayoutError(_("grade.toml: assignment must be a string, e.g. \"matmul\""), show_layout=False)
    return student, dict(entries), assignment


def resolve_entries(submission: Submission, spec: AssignmentSpec, known_stage_keys: set[str]) -> dict[str, str]:
    """Stage name -> entry function. Keys: '<assignment>_<stage>' or '<stage>'; '<assignment>' overrides the default."""
    unknown = sorted(set(submission.entries) - known_stage_keys)
    if unknown:
        raise LayoutError(_("grade.toml [entries]: unknown key(s) {unknown}; valid keys are {valid}").format(
            unknown=unknown, valid=sorted(known_stage_keys)), show_layout=False)
    default = submission.entries.get(spec.name, submission.entry_default or spec.entry)
    resolved = {}
    for stage in spec.stages:
        resolved[stage.name] = submission.entries.get(f"{spec.name}_{stage.name}",
                                                      submission.entries.get(stage.name, default))
    return resolved


def stage_keys(specs: list[AssignmentSpec]) -> set[str]:
    keys = set()
    for spec in specs:
        keys.add(spec.name)
        for stage in spec.stages:
            keys |= {stage.name, f"{spec.name}_{stage.name}"}
    return keys


def check_entry_functions(submission: Submission, needed: dict[str, list[str]]) -> None:
    """Statically confirm the module defines each needed function (function -> stages needing it)."""
    path = submission.module_path
    if path is None:
        return  # the extension itself or torch.ops: bind_entry found the registration in the bindings
    source = path.read_text(encoding="utf-8", errors="replace")
    try:
        tree = ast.parse(source, filename=path.name)
    except SyntaxError as exc:
        raise ModuleSyntaxError(f"{path.name}:{exc.lineno}: {exc.msg}\n"
                                f"    {(exc.text or '').rstrip()}") from exc
    defined, dynamic = _top_level_names(tree)
    if dynamic:
        return  # star imports or a module __getattr__: leave it to the run to find out
    missing = {fn: stages for fn, stages in needed.items() if fn not in defined}
    if missing:
        lines = [f"  - {fn}  (serves stage{'s' if len(st) > 1 else ''} {', '.join(st)})" for fn, st in missing.items()]
        raise LayoutError(_("{file} does not define the entry function(s) the grader calls:").format(file=path.name)
                          + "\n" + "\n".join(lines) + "\n" + _("Define them at the top level of the module, or map "
                                                                "stages to your function names in grade.toml [entries]."))


def _top_level_names(tree: ast.Module) -> tuple[set[str], bool]:
    names: set[str] = set()
    dynamic = False
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
            dynamic |= node.name == "__getattr__"
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                names |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
        elif isinstance(node, ast.Import | ast.ImportFrom):
            for alias in node.names:
                if alias.name == "*":
                    dynamic = True
                names.add(alias.asname or alias.name.split(".")[0])
        elif isinstance(node, ast.If | ast.Try | ast.With):
            dynamic = True  # conditional definitions: do not second-guess them
    return names, dynamic


def _sources(root: Path, folder: str, suffix: str, purpose: str, problems: list[str]) -> list[Path]:
    """The files the build compiles: directly inside the folder (the build does not recurse)."""
    where = root / folder
    if not where.is_dir():
        problems.append(_("missing folder {folder} ({purpose})").format(folder=f"{folder}/", purpose=purpose))
        return []
    found = sorted(where.glob(f"*.{suffix}"))
    if not found:
        nested = sorted(p.relative_to(root) for p in where.rglob(f"*.{suffix}"))
        problems.append(_("{folder} holds no {suffix} file").format(folder=f"{folder}/", suffix=f".{suffix}") + (
            _(": {file} is in a subfolder, but only {pattern} is compiled").format(
                file=nested[0], pattern=f"{folder}/*.{suffix}") if nested else ""))
    return found


def special_files(root: Path) -> list[str]:
    """Entries that are not files, folders or links (FIFOs, sockets, devices), by lstat: nothing opens them."""
    found = []
    for folder, dirs, files in os.walk(root, followlinks=False):
        for name in [*dirs, *files]:
            mode = os.lstat(os.path.join(folder, name)).st_mode
            if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
                found.append(text_name(os.path.relpath(os.path.join(folder, name), root)))
    return sorted(found)


def refuse_special_files(root: Path) -> None:
    """A FIFO, socket or device in a submission would block (or feed without end) whatever reads it: layout
    detection, the hash, the compiler. Refused before anything reads the submission."""
    if found := special_files(root):
        raise LayoutError(_("not a regular file: {files}; a submission holds only files and folders (a FIFO, "
                            "socket or device cannot be graded): replace it with the file itself")
                          .format(files=", ".join(found[:10])), show_layout=False)


def _check_size(root: Path) -> None:
    count, total = 0, 0
    for path in root.rglob("*"):
        if path.is_symlink():
            target = path.resolve()
            if not target.is_relative_to(root.resolve()):
                raise LayoutError(_("{file} is a symlink pointing outside the submission").format(
                    file=path.relative_to(root)), show_layout=False)
        if path.is_file():
            count += 1
            total += path.stat().st_size
    if count > MAX_FILES or total > MAX_BYTES:
        raise LayoutError(_("the submission is too large ({count} files, {mib} MiB; limits {max_files} files, "
                            "{max_mib} MiB): remove build outputs and data files").format(
            count=count, mib=total >> 20, max_files=MAX_FILES, max_mib=MAX_BYTES >> 20), show_layout=False)


def _read_grade_toml(root: Path) -> dict:
    path = root / "grade.toml"
    if not path.is_file():
        return {}
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise LayoutError(_("grade.toml is not valid TOML: {error}").format(error=exc), show_layout=False) from exc
    unknown = sorted(set(data) - _TOP_KEYS)
    if unknown:
        raise LayoutError(_("grade.toml: unknown key(s) {unknown}; known keys are {known}").format(
            unknown=unknown, known=sorted(_TOP_KEYS)), show_layout=False)
    return data
