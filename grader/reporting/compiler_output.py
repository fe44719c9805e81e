"""Reads g++/clang-style compiler output (cncc and cncc-emu both print it) for display.

Each line is classified so the template can colour errors, warnings, the echoed source line and the caret
under it; the `file:line:col: severity: message` lines are also collected so the report can point at them.

`student_errors` is the view a student reads first: each error at a line of their own submission, with that
line. A kernel is compiled through the emulator's launch templates (`bang_emu::launch`, `std::apply`), so g++
prints long instantiation chains through the emulator's, torch's and the C++ library's headers around every
error; those stay in the full log (folded in the report). An error reported inside such a header is pointed
back at the student's innermost line in its chain; with no student line at all, or for a `__bang_*` builtin the
emulator does not declare, the cause is the grader's, and the view says so (`limitation`).
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from grader.reporting.submission_files import read_submission_file, submission_relative

LineKind = Literal["error", "warning", "note", "source", "caret", "context", "plain"]

_DIAG = re.compile(
    r"^(?P<file>[^\s:][^:]*?):(?P<line>\d+):(?:(?P<col>\d+):)?\s*"
    r"(?P<sev>fatal error|error|warning|note):\s*(?P<msg>.*)$"
)
_TOOL_ERROR = re.compile(r"^[\w.+-]+: (?:fatal )?error: (?P<msg>.*)$")  # e.g. "cncc-emu: error: ..."
_SOURCE_ECHO = re.compile(r"^\s*(?P<line>\d+)\s\|(?P<text>.*)$")  # "   12 |     x = 1;"
_CARET = re.compile(r"^\s*\|\s*[\s~^]*\^[\s~^]*$|^\s*\|\s+~+\s*$")
_CONTEXT = re.compile(
    r"^(In file included from|\s+from |.*: In (function|member function|instantiation)|.*: At |"
    r".*:\d+:(\d+:)?\s+(required|recursively required) (from|by)|.*:\d+:(\d+:)?\s+\[ skipping)"
)
# a location in a context line: "In file included from f:12," / "   from f:3:" / "f:58:25:   required from ..."
_CONTEXT_AT = re.compile(r"^(?:In file included from |\s+from )?(?P<file>[^\s:][^:]*?):(?P<line>\d+)(?::\d+)?[:,]")
_UNDECLARED_BUILTIN = re.compile(r"['‘`](?P<name>__bang_\w+)['’] (?:was not declared|that depend)"
                                 r"(?:.*did you mean ['‘`](?P<hint>\w+)['’])?")
# Headers that are not the student's: the emulator's (bang_emu), torch's, pybind11's, the C++ library's.
_EMULATOR_MARK = "bang_emu"
_LIBRARY_MARKS = ("/usr/include/", "/usr/lib/gcc/", "site-packages/", "dist-packages/", "/torch/", "pybind11")


@dataclass(frozen=True)
class CompilerLine:
    kind: LineKind
    text: str


@dataclass(frozen=True)
class CompilerMessage:
    severity: Literal["error", "warning", "note"]
    file: str
    line: int
    column: int | None
    message: str


@dataclass(frozen=True)
class CompilerOutput:
    lines: list[CompilerLine]
    messages: list[CompilerMessage]
    omitted_lines: int

    @property
    def errors(self) -> list[CompilerMessage]:
        return [m for m in self.messages if m.severity == "error"]


def _origin(path: str, root: str | None) -> Literal["student", "emulator", "library"]:
    if _EMULATOR_MARK in path:
        return "emulator"
    relative = submission_relative(path, root)
    if relative.startswith(("/", "<")) or any(mark in path for mark in _LIBRARY_MARKS):
        return "library"  # an absolute path outside the submission, <command-line>, <built-in>
    return "student"


def _header_name(path: str) -> str:
    """A header path shortened to what identifies it (bang_emu/device.h, c++/12/tuple, torch/...)."""
    for mark in ("/include/", "site-packages/", "dist-packages/"):
        if mark in path:
            return path.rsplit(mark, 1)[1]
    return Path(path).name


Limitation = Literal["missing_builtin", "emulator", "toolchain"]

# Directives that make the compiler print a location the source chose (#line, GNU linemarkers "# 12 "f""), also
# spelled with the %: digraph or a comment between; lines spliced with a backslash are joined before matching.
_LOCATION_DIRECTIVE = re.compile(rb"^[ \t]*(?:#|%:)(?:[ \t]|/\*.*?\*/)*(?:line\b|[0-9])", re.MULTILINE)
_SCAN_FILES, _SCAN_BYTES = 2000, 4 << 20


def locations_forgeable(submission_root: str | None) -> bool:
    """Whether the compiler's output may name files the submission chose rather than the files it read: a
    location directive in any of its files (`#line 212 "/opt/bang_emu/...h"`), or a file name holding a line
    break (printed as is, it starts a line of its own). Without the submission to look at: assumed so."""
    if not submission_root or not Path(submission_root).is_dir():
        return True
    seen = 0
    for folder, dirs, files in os.walk(submission_root, followlinks=False):
        if any(ord(c) < 32 for name in [*dirs, *files] for c in name):
            return True
        for name in files:
            seen += 1
            path = os.path.join(folder, name)
            try:
                if seen > _SCAN_FILES or not stat.S_ISREG(os.lstat(path).st_mode):
                    continue
                with open(path, "rb") as fh:
                    text = fh.read(_SCAN_BYTES)
            except OSError:
                continue
            if _LOCATION_DIRECTIVE.search(re.sub(rb"\\\r?\n", b"", text)):
                return True
    return False


@dataclass(frozen=True)
class StudentError:
    """One compile error as a student reads it: where in their submission, what, and whose fault."""

    file: str  # relative to the submission; a shortened header name when no line of the submission is involved
    line: int
    column: int | None
    message: str
    source: str | None  # the submission's line, as the compiler echoed it or read from the submission
    reported_in: str | None = None  # the header g++ reported the error in, when it was pointed back here
    limitation: Limitation | None = None  # the grader's cause, not the student's (see student_errors)
    builtin: str | None = None  # the __bang_* name for a missing_builtin


def _edit_distance(a: str, b: str) -> int:
    row = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, cb in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (ca != cb))
    return row[-1]


def _read_line(root: str | None, file: str, line: int) -> str | None:
    if not root:
        return None
    lines = read_submission_file(Path(root), file)
    return lines[line - 1] if lines and 0 < line <= len(lines) else None


def student_errors(output: str, submission_root: str | None = None, limit: int = 20) -> list[StudentError]:
    """The compile errors in `output` at the student's own lines, first to last, each once.

    An error inside a header is placed at the innermost submission line of the context g++ printed before
    it (the chain of "required from" / "In file included from"). `limitation` marks what is not the student's
    mistake: `missing_builtin`, a `__bang_*` name the emulator does not declare (unless g++'s suggestion is a
    near spelling: then it is a typo); `emulator` / `toolchain`, an error whose whole chain lies in the
    emulator's / the libraries' headers.
    """
    raw = output.replace("\r\n", "\n").splitlines()
    errors: list[StudentError] = []
    seen: set[tuple[str, int]] = set()
    context: list[tuple[str, int]] = []
    # The grader is blamed only on evidence the submission cannot write: the names g++ prints are believed
    # when no file of the submission can choose them (locations_forgeable), and only before the first
    # diagnostic at the submission's own code, whose message (a static_assert's, a #pragma message's) may
    # carry lines of its own.
    forgeable = locations_forgeable(submission_root)
    blame_grader = not forgeable
    for i, row in enumerate(raw):
        match = _DIAG.match(row)
        if match is None:
            if _CONTEXT.match(row) and (at := _CONTEXT_AT.match(row)):
                context.append((at["file"], int(at["line"])))
            continue
        chain, context = context, []
        path, line, message = match["file"], int(match["line"]), match["msg"].strip()
        origin = _origin(path, submission_root)
        if match["sev"] not in ("error", "fatal error"):
            blame_grader = blame_grader and origin != "student"
            continue
        echoed = _SOURCE_ECHO.match(raw[i + 1]) if i + 1 < len(raw) else None
        reported_in: str | None = None
        limitation: Limitation | None = None
        if origin == "student":
            file, column = submission_relative(path, submission_root), int(match["col"]) if match["col"] else None
            source = echoed["text"][1:] if echoed and int(echoed["line"]) == line else None
        else:
            mine = next(((f, n) for f, n in chain if _origin(f, submission_root) == "student"), None)
            if mine is None:
                file, column, source = _header_name(path), None, echoed["text"][1:] if echoed else None
                if blame_grader:
                    limitation = "emulator" if origin == "emulator" or any(
                        _origin(f, submission_root) == "emulator" for f, _ in chain) else "toolchain"
            else:
                reported_in, column = _header_name(path), None
                file, line, source = submission_relative(mine[0], submission_root), mine[1], None
        if source is None and limitation is None:
            source = _read_line(submission_root, file, line)
        blame_grader = blame_grader and origin != "student"
        builtin = None
        if (missing := _UNDECLARED_BUILTIN.search(message)) and limitation is None and not forgeable:
            hint = missing["hint"]
            if not hint or _edit_distance(missing["name"], hint) > 2:
                limitation, builtin = "missing_builtin", missing["name"]
        if column and source and column > len(source) + 1:
            column = None  # a column of cncc-emu's rewritten launch line, not of the line the student wrote
        error = StudentError(file, line, column, message, source.rstrip() if source else None, reported_in,
                             limitation, builtin)
        # One error per line: g++ reports an undeclared name in a template twice (at definition, without its
        # "did you mean", and at instantiation, with it); the later "was not declared" is the one to show.
        if (file, line) in seen:
            if "was not declared" in message:
                errors = [error if (e.file, e.line) == (file, line) else e for e in errors]
            continue
        seen.add((file, line))
        errors.append(error)
        if len(errors) >= limit:
            break
    return errors


def parse_compiler_output(text: str, max_lines: int = 400) -> CompilerOutput:
    raw = text.replace("\r\n", "\n").splitlines()
    shown, omitted = raw[:max_lines], max(0, len(raw) - max_lines)
    lines: list[CompilerLine] = []
    messages: list[CompilerMessage] = []
    for row in shown:
        if match := _DIAG.match(row):
            severity = "error" if "error" in match["sev"] else match["sev"]
            messages.append(
                CompilerMessage(
                    severity=severity,  # type: ignore[arg-type]
                    file=submission_relative(match["file"]),
                    line=int(match["line"]),
                    column=int(match["col"]) if match["col"] else None,
                    message=match["msg"].strip(),
                )
            )
            lines.append(CompilerLine(severity, row))  # type: ignore[arg-type]
        elif _TOOL_ERROR.match(row):
            lines.append(CompilerLine("error", row))
        elif _SOURCE_ECHO.match(row):
            lines.append(CompilerLine("source", row))
        elif _CARET.match(row):
            lines.append(CompilerLine("caret", row))
        elif _CONTEXT.match(row):
            lines.append(CompilerLine("context", row))
        else:
            lines.append(CompilerLine("plain", row))
    return CompilerOutput(lines=lines, messages=messages, omitted_lines=omitted)
