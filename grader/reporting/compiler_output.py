"""Reads g++/clang-style compiler output (cncc and cncc-emu both print it) for display.

Each line is classified so the template can colour errors, warnings, the echoed source line and the caret
under it; the `file:line:col: severity: message` lines are also collected so the report can point at them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

LineKind = Literal["error", "warning", "note", "source", "caret", "context", "plain"]

_DIAG = re.compile(
    r"^(?P<file>[^\s:][^:]*?):(?P<line>\d+):(?:(?P<col>\d+):)?\s*"
    r"(?P<sev>fatal error|error|warning|note):\s*(?P<msg>.*)$"
)
_TOOL_ERROR = re.compile(r"^[\w.+-]+: (?:fatal )?error: (?P<msg>.*)$")  # e.g. "cncc-emu: error: ..."
_SOURCE_ECHO = re.compile(r"^\s*(?P<line>\d+)\s\|(?P<text>.*)$")  # "   12 |     x = 1;"
_CARET = re.compile(r"^\s*\|\s*[\s~^]*\^[\s~^]*$|^\s*\|\s+~+\s*$")
_CONTEXT = re.compile(
    r"^(In file included from|\s+from |.*: In (function|member function|instantiation)|.*: At )"
)

# Paths as the sandbox saw them; the student knows their files relative to the submission root.
_SANDBOX_PREFIXES = ("/submission/", "/build/src/", "/build/")


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


def submission_relative(path: str, root: str | None = None) -> str:
    """A path as the student knows it: /submission/mlu/k.mlu, or <root>/mlu/k.mlu when the submission ran
    unsandboxed from its own folder, -> mlu/k.mlu."""
    if root:
        prefix = root.rstrip("/") + "/"
        if path.startswith(prefix):
            return path[len(prefix) :]
    for prefix in _SANDBOX_PREFIXES:
        if path.startswith(prefix):
            return path[len(prefix) :]
    return path.removeprefix("./")


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
