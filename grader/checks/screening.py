"""Static screening of a submission's sources, on the host, before anything is built (issue 11, item 4).

It looks for the escape hatches a submission would need to step around the emulator's instrumentation or to
forge what the sandbox reports: kernel code compiled without the sanitizer instrumentation (`no_sanitize`
attributes, kernel code in a `.cpp`), inline assembly, loading or patching code at run time (`dlopen`,
`dlsym`, `mprotect`, `syscall`, `ptrace`, `ctypes`, `cffi`, `/proc/self/mem`), the emulator's own interface
(`BANG_EMU_*`, `bang_emu_*`), environment writes (`setenv`, `putenv`, `os.environ[...] = ...`), and paths of the
harness protocol (`/io/...`, the trace file, the key file). Honest kernels, bindings and wrappers need none of
these (tests/test_screening.py screens every reference kernel, the bundled example and the known-bad fixtures
and expects no finding).

C and C++ are tokenized, not grepped: comments are dropped (so `__asm__/**/volatile` or a name split by a
line continuation is still one token) and adjacent string literals are joined before they are looked at (so
`"BANG_" "EMU_DEVICE"` is still the emulator's variable), while a word inside a comment or an ordinary string
(`// no asm here`, `"mprotect"` in an error message) is not code and is not flagged unless the string is a
path or a name a hatch would use. Python is read with `ast`: imports, attribute and name uses, environment
writes, and string constants after folding `+` of constants.

Each finding carries the file, the line and the source line, and the action the assignment's
`[screening] action` sets: `zero_stages` (default: the stage points are withheld, the findings shown) or
`review` (the points stand; the submission is flagged for an instructor to look at).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grader.i18n import N_, _
from grader.results import GradeResult, ScreeningFinding

C_SUFFIXES = frozenset({".mlu", ".cpp", ".cc", ".cxx", ".c", ".h", ".hpp", ".hh", ".hxx", ".cuh", ".inl", ".ipp"})
HOST_CXX_SUFFIXES = frozenset({".cpp", ".cc", ".cxx", ".c"})  # compiled by the host compiler, uninstrumented
PY_SUFFIXES = frozenset({".py", ".pyi", ".pyx"})
MAX_FILE_BYTES = 2 << 20  # a larger source is not screened line by line: it is a finding of its own
MAX_FILES = 2000
MAX_TOTAL_BYTES = 8 << 20  # about 1 ms per KiB: a submission's sources screen in well under 10 s
MAX_FINDINGS = 200
SKIP_DIRS = frozenset({"__pycache__", ".git", ".venv", "node_modules", "build"})

# What each rule means, for messages and the report (English msgids: `_(RULES[rule])` shows them).
RULES: dict[str, str] = {
    "no_sanitize": N_("turns off the emulator's instrumentation of kernel memory accesses"),
    "inline_asm": N_("inline assembly runs code the emulator neither checks nor counts"),
    "kernel_outside_mlu": N_("kernel code in a host C++ file is compiled without the emulator's instrumentation"),
    "dynamic_loading": N_("loads or looks up code at run time (dlopen/dlsym), around the built extension"),
    "memory_protection": N_("changes memory protection or issues raw system calls (mprotect, syscall, ptrace)"),
    "proc_mem": N_("reads or writes process memory through /proc"),
    "ctypes": N_("ctypes/cffi call arbitrary C functions from Python (the emulator runtime's included)"),
    "emu_interface": N_("touches the emulator runtime's own variables or functions (BANG_EMU_*, bang_emu_*)"),
    "env_write": N_("changes the environment the emulator and the harness read"),
    "protocol_path": N_("names a file of the grading protocol (/io, the trace or key file)"),
    "grader_message": N_("imitates a message of the grader itself"),
    "harness_reach": N_("reaches into the grading harness or its callers (bang_harness, sys.modules, frames, gc)"),
    "unscreened": N_("a source file too large to screen"),
}

# C/C++ identifiers that are escape hatches wherever they appear as code.
C_IDENTS: dict[str, str] = {
    "asm": "inline_asm", "__asm": "inline_asm", "__asm__": "inline_asm",
    "dlopen": "dynamic_loading", "dlsym": "dynamic_loading", "dlvsym": "dynamic_loading",
    "dlmopen": "dynamic_loading", "dladdr": "dynamic_loading", "dl_iterate_phdr": "dynamic_loading",
    "mprotect": "memory_protection", "pkey_mprotect": "memory_protection", "syscall": "memory_protection",
    "ptrace": "memory_protection", "process_vm_readv": "memory_protection",
    "process_vm_writev": "memory_protection",
    "setenv": "env_write", "putenv": "env_write", "unsetenv": "env_write", "clearenv": "env_write",
}
# Python names/attributes that are escape hatches when used (ctypes-style handles included).
PY_IDENTS: dict[str, str] = {
    "dlopen": "dynamic_loading", "dlsym": "dynamic_loading", "CDLL": "ctypes", "PyDLL": "ctypes",
    "cdll": "ctypes", "pydll": "ctypes", "pythonapi": "ctypes", "LoadLibrary": "ctypes",
    "mprotect": "memory_protection", "pkey_mprotect": "memory_protection", "syscall": "memory_protection",
    "ptrace": "memory_protection", "process_vm_readv": "memory_protection",
    "process_vm_writev": "memory_protection",
    "putenv": "env_write", "unsetenv": "env_write",
    # The harness times and records calls in the student's process: its frames and objects are in reach.
    "_getframe": "harness_reach", "currentframe": "harness_reach", "f_back": "harness_reach",
    "f_globals": "harness_reach", "f_locals": "harness_reach", "get_referrers": "harness_reach",
    "get_objects": "harness_reach",
}
PY_MODULES: dict[str, str] = {"ctypes": "ctypes", "_ctypes": "ctypes", "cffi": "ctypes", "_cffi_backend": "ctypes",
                              "bang_harness": "harness_reach", "gc": "harness_reach"}
ENV_MUTATORS = frozenset({"update", "setdefault", "pop", "popitem", "clear", "__setitem__", "__delitem__"})
KERNEL_WORDS = frozenset({"__mlu_global__", "__mlu_func__", "__mlu_entry__", "__nram__", "__wram__",
                          "__mlu_shared__", "__mlu_device__", "__mlu_const__"})

NO_SANITIZE = re.compile(r"no_sanitize|disable_sanitizer_instrumentation|no_instrument_function", re.IGNORECASE)
EMU_NAME = re.compile(r"bang_emu_|BANG_EMU", re.IGNORECASE)
PROC_MEM = re.compile(r"/proc/[^/\s]+/(mem|maps|pagemap)\b")
PROTOCOL_PATH = re.compile(r"(^|[\s'\"=:(])/io(/|$)|trace\.key|\.trace\.jsonl|BANG_GRADER_IO")
# The grader's own wording ("internal error in the build harness", "(not your fault)", the error kind), in
# both languages of its catalogue (grader/locales: 不是你的问题, 评分程序出错, 沙箱出错).
GRADER_MESSAGE = re.compile(r"internal error in the|not your fault|harness_error|the grader failed|"
                            r"the sandbox failed|不是你的问题|评分程序(自身)?出错|沙箱出错", re.IGNORECASE)


@dataclass
class _Hit:
    rule: str
    line: int
    what: str


# -- C / C++ ---------------------------------------------------------------------------------------------

@dataclass
class _Token:
    kind: str  # ident | string | punct | directive
    text: str
    line: int


_STRING_PREFIX = re.compile(r"(u8|u|U|L)?R?$")


def c_tokens(source: str) -> Iterator[_Token]:
    """Identifiers, string/char literals, punctuation and preprocessor directive names of C/C++ source.

    Comments vanish, backslash-newline joins lines (line numbers still count them), raw strings are read
    whole. Numbers are skipped. Good enough to screen, not to compile."""
    i, n, line = 0, len(source), 1
    at_line_start = True
    while i < n:
        c = source[i]
        if c == "\\" and source.startswith("\n", i + 1):
            i += 2
            line += 1
            continue
        if c == "\n":
            line += 1
            i += 1
            at_line_start = True
            continue
        if c in " \t\r\f\v":
            i += 1
            continue
        if source.startswith("//", i):
            while i < n and source[i] != "\n":
                if source[i] == "\\" and source.startswith("\n", i + 1):  # a // comment continues too
                    line += 1
                    i += 1
                i += 1
            continue
        if source.startswith("/*", i):
            end = source.find("*/", i + 2)
            end = n if end < 0 else end + 2
            line += source.count("\n", i, end)
            i = end
            continue
        if c == "#" and at_line_start:
            j = i + 1
            while j < n and source[j] in " \t":
                j += 1
            k = j
            while k < n and (source[k].isalnum() or source[k] == "_"):
                k += 1
            yield _Token("directive", source[j:k], line)
            i = k
            at_line_start = False
            if source[j:k] == "include":  # <path> is a string here
                m = re.compile(r"[ \t]*<([^>\n]*)>").match(source, k)
                if m:
                    yield _Token("string", m.group(1), line)
                    i = m.end()
            continue
        at_line_start = False
        if c.isalpha() or c == "_":
            j = i
            while j < n and (source[j].isalnum() or source[j] == "_" or
                             (source[j] == "\\" and source.startswith("\n", j + 1))):
                j += 2 if source[j] == "\\" else 1
            word = source[i:j].replace("\\\n", "")
            start_line = line
            line += source.count("\n", i, j)
            if j < n and source[j] in "\"'" and _STRING_PREFIX.fullmatch(word):
                i = j
                if word.endswith("R") and source[j] == '"':
                    m = re.compile(r'"([^()\\ \n]{0,16})\(').match(source, j)
                    if m:
                        close = source.find(")" + m.group(1) + '"', m.end())
                        close = n if close < 0 else close
                        yield _Token("string", source[m.end():close], start_line)
                        line += source.count("\n", j, close)
                        i = close + len(m.group(1)) + 2
                        continue
                continue
            yield _Token("ident", word, start_line)
            i = j
            continue
        if c in "\"'":
            j = i + 1
            chars = []
            while j < n and source[j] != c:
                if source[j] == "\\" and j + 1 < n:
                    if source[j + 1] == "\n":
                        line += 1
                    else:
                        chars.append(source[j:j + 2])
                    j += 2
                    continue
                if source[j] == "\n":  # unterminated: stop at the end of the line
                    break
                chars.append(source[j])
                j += 1
            if c == '"':
                yield _Token("string", "".join(chars), line)
            i = j + 1
            continue
        if c.isdigit():
            j = i
            while j < n and (source[j].isalnum() or source[j] in "._'"):
                j += 1
            i = j
            continue
        if source.startswith("##", i):
            yield _Token("punct", "##", line)
            i += 2
            continue
        yield _Token("punct", c, line)
        i += 1


def screen_c(source: str, host_compiled: bool) -> list[_Hit]:
    hits: list[_Hit] = []
    tokens = list(c_tokens(source))
    index = 0
    while index < len(tokens):
        token = tokens[index]
        if token.kind == "string":
            # Adjacent literals are one string ("BANG_" "EMU_DEVICE"), reported at the first one's line.
            parts = [token.text]
            while index + 1 < len(tokens) and tokens[index + 1].kind == "string":
                index += 1
                parts.append(tokens[index].text)
            hits += _screen_string("".join(parts), token.line, c_names=True)
        elif token.kind == "ident":
            word = token.text
            if word in C_IDENTS:
                hits.append(_Hit(C_IDENTS[word], token.line, word))
            elif NO_SANITIZE.search(word):
                hits.append(_Hit("no_sanitize", token.line, word))
            elif EMU_NAME.match(word):
                hits.append(_Hit("emu_interface", token.line, word))
            elif host_compiled and word in KERNEL_WORDS:
                hits.append(_Hit("kernel_outside_mlu", token.line, word))
        elif token.kind == "directive" and token.text == "pragma":
            rest = [t.text for t in tokens[index + 1:index + 8] if t.line == token.line]
            if any("sanitize" in t.lower() for t in rest):
                hits.append(_Hit("no_sanitize", token.line, "#pragma " + " ".join(rest)))
        elif token.kind == "directive" and token.text in ("error", "warning"):
            rest = " ".join(t.text for t in tokens[index + 1:] if t.line == token.line)
            if GRADER_MESSAGE.search(rest):
                hits.append(_Hit("grader_message", token.line, f"#{token.text} {rest}"))
        index += 1
    return hits


def _screen_string(text: str, line: int, c_names: bool = False) -> list[_Hit]:
    hits = []
    if EMU_NAME.search(text):
        hits.append(_Hit("emu_interface", line, text))
    if PROC_MEM.search(text):
        hits.append(_Hit("proc_mem", line, text))
    if PROTOCOL_PATH.search(text):
        hits.append(_Hit("protocol_path", line, text))
    if GRADER_MESSAGE.search(text):
        hits.append(_Hit("grader_message", line, text))
    if NO_SANITIZE.search(text):  # __attribute__((no_sanitize("kernel-address"))) names it in a string too
        hits.append(_Hit("no_sanitize", line, text))
    name = text.strip()
    table = C_IDENTS if c_names else PY_IDENTS
    if name in table and name not in ("asm", "__asm", "__asm__"):  # dlsym(h, "mprotect"), getattr(libc, "ptrace")
        hits.append(_Hit(table[name], line, name))
    if not c_names and name in PY_MODULES:  # __import__("ctypes"), importlib.import_module("cffi")
        hits.append(_Hit(PY_MODULES[name], line, name))
    return hits


# -- Python ----------------------------------------------------------------------------------------------

def _folded(node: ast.AST) -> str | None:
    """The value of a string expression built only from constants ("BANG_" + "EMU", f"{'a'}b")."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _folded(node.left), _folded(node.right)
        return left + right if left is not None and right is not None else None
    if isinstance(node, ast.JoinedStr):
        parts = []
        for value in node.values:
            if isinstance(value, ast.FormattedValue):
                inner = _folded(value.value)
                if inner is None:
                    return None
                parts.append(inner)
            else:
                folded = _folded(value)
                if folded is None:
                    return None
                parts.append(folded)
        return "".join(parts)
    return None


def _is_environ(node: ast.AST) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr in ("environ", "environb")) or \
        (isinstance(node, ast.Name) and node.id in ("environ", "environb"))


def screen_python(source: str) -> list[_Hit]:
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return _screen_python_lines(source)
    hits: list[_Hit] = []
    seen_strings: set[int] = set()
    for node in ast.walk(tree):  # docstrings and other bare string statements do nothing: not screened
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            seen_strings.add(id(node.value))
        line = getattr(node, "lineno", 1)
        if isinstance(node, ast.Import):
            for alias in node.names:
                top = alias.name.split(".")[0]
                if top in PY_MODULES:
                    hits.append(_Hit(PY_MODULES[top], line, f"import {alias.name}"))
        elif isinstance(node, ast.ImportFrom):
            top = (node.module or "").split(".")[0]
            if top in PY_MODULES:
                hits.append(_Hit(PY_MODULES[top], line, f"from {node.module} import"))
            for alias in node.names:
                if alias.name in PY_IDENTS:
                    hits.append(_Hit(PY_IDENTS[alias.name], line, alias.name))
        elif isinstance(node, ast.Attribute):
            if node.attr in PY_IDENTS:
                hits.append(_Hit(PY_IDENTS[node.attr], line, node.attr))
            elif EMU_NAME.match(node.attr):
                hits.append(_Hit("emu_interface", line, node.attr))
            elif node.attr == "modules" and isinstance(node.value, ast.Name) and node.value.id == "sys":
                hits.append(_Hit("harness_reach", line, "sys.modules"))
            elif node.attr in ENV_MUTATORS and _is_environ(node.value):
                hits.append(_Hit("env_write", line, f"environ.{node.attr}"))
        elif isinstance(node, ast.Name):
            if node.id in PY_IDENTS:
                hits.append(_Hit(PY_IDENTS[node.id], line, node.id))
            elif EMU_NAME.match(node.id):
                hits.append(_Hit("emu_interface", line, node.id))
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, (ast.Store, ast.Del)) and \
                _is_environ(node.value):
            hits.append(_Hit("env_write", line, "environ[...] = ..." if isinstance(node.ctx, ast.Store)
                             else "del environ[...]"))
        elif isinstance(node, (ast.BinOp, ast.JoinedStr, ast.Constant)) and id(node) not in seen_strings:
            folded = _folded(node)
            if folded is not None:
                for child in ast.walk(node):  # the parts of a folded string are not screened again
                    seen_strings.add(id(child))
                hits += _screen_string(folded, line)
    return hits


_PY_LINE = re.compile(r"\b(import\s+(ctypes|cffi)|from\s+(ctypes|cffi)\b|ctypes\.|cffi\.|environ\s*\[[^\]]*\]\s*=|"
                      r"putenv|unsetenv|mprotect|ptrace|dlopen|dlsym)")


def _screen_python_lines(source: str) -> list[_Hit]:
    """A module that does not parse is screened line by line (the build reports its syntax error)."""
    hits = []
    for number, text in enumerate(source.splitlines(), 1):
        m = _PY_LINE.search(text)
        if m:
            word = m.group(0)
            rule = "env_write" if ("environ" in word or "env" in word) else \
                "ctypes" if ("ctypes" in word or "cffi" in word) else \
                "dynamic_loading" if word.startswith("dl") else "memory_protection"
            hits.append(_Hit(rule, number, word))
        for s in re.findall(r"""(['"])(.*?)\1""", text):
            hits += _screen_string(s[1], number)
    return hits


# -- the submission --------------------------------------------------------------------------------------

def _source_files(root: Path) -> Iterator[Path]:
    stack = [root]
    count = 0
    while stack:
        folder = stack.pop()
        try:
            entries = sorted(folder.iterdir())
        except OSError:
            continue
        for path in entries:
            if path.is_symlink():
                continue  # the layout check deals with symlinks; nothing outside the submission is read
            if path.is_dir():
                if path.name not in SKIP_DIRS:
                    stack.append(path)
            elif path.suffix.lower() in C_SUFFIXES | PY_SUFFIXES and path.is_file():
                count += 1
                if count > MAX_FILES:
                    return
                yield path


def _action(spec: Any) -> str:
    screening = getattr(spec, "screening", None)
    action = getattr(screening, "action", None)
    return action if action in ("zero_stages", "review") else "zero_stages"


def screen_submission(root: Path, spec: Any = None) -> list[ScreeningFinding]:
    """Findings for every escape hatch in the submission's sources, in file and line order.

    `spec` is the AssignmentSpec (its `screening.action` sets each finding's action); None means the default
    (zero_stages). Never raises for anything in the submission: unreadable files are skipped."""
    root = Path(root)
    action = _action(spec)
    findings: list[ScreeningFinding] = []
    total = 0
    for path in _source_files(root):
        relative = path.relative_to(root).as_posix()
        try:
            size = path.stat().st_size
            total += size
            if size > MAX_FILE_BYTES or total > MAX_TOTAL_BYTES:
                findings.append(ScreeningFinding(
                    rule="unscreened", message=_("{file} is {size} KiB: too large to screen (limits: {file_limit} "
                                                 "MiB a file, {total_limit} MiB in all)").format(
                        file=relative, size=size >> 10, file_limit=MAX_FILE_BYTES >> 20,
                        total_limit=MAX_TOTAL_BYTES >> 20),
                    file=relative, line=1, action=action))  # type: ignore[arg-type]
                continue
            source = path.read_bytes().decode("utf-8", errors="replace")
        except OSError:
            continue
        suffix = path.suffix.lower()
        if suffix in PY_SUFFIXES:
            hits = screen_python(source)
        else:
            hits = screen_c(source, host_compiled=suffix in HOST_CXX_SUFFIXES)
        lines = source.splitlines()
        done: set[tuple[str, int]] = set()
        for hit in sorted(hits, key=lambda h: h.line):
            if (hit.rule, hit.line) in done:
                continue
            done.add((hit.rule, hit.line))
            shown = lines[hit.line - 1].strip() if 0 < hit.line <= len(lines) else ""
            what = hit.what if len(hit.what) <= 80 else hit.what[:77] + "..."
            findings.append(ScreeningFinding(
                rule=hit.rule, message=f"{what!r}: {_(RULES[hit.rule])}", file=relative, line=hit.line,
                source_line=shown[:200], action=action))  # type: ignore[arg-type]
            if len(findings) >= MAX_FINDINGS:
                return findings
    return findings


def screening_note(findings: list[ScreeningFinding]) -> str:
    """One line for the result's message, or "" when there is nothing to say."""
    if not findings:
        return ""
    where = ", ".join(f"{f.file}:{f.line} ({f.rule})" for f in findings[:3])
    more = _(" and {n} more").format(n=len(findings) - 3) if len(findings) > 3 else ""
    if any(f.action == "zero_stages" for f in findings):
        return _("static screening: {n} escape hatch(es) found ({where}); the stage points are withheld (see "
                 "Screening in the report)").format(n=len(findings), where=where + more)
    return _("static screening: {n} escape hatch(es) found ({where}); flagged for review, points "
             "unchanged").format(n=len(findings), where=where + more)


def apply_screening(result: GradeResult, findings: list[ScreeningFinding]) -> GradeResult:
    """Records the findings on the result and applies their action: with `zero_stages`, every stage's
    performance points become 0 (correctness points stand) and the score drops by what they were worth;
    with `review`, nothing changes but the record and a note. Verdicts are left as they are: the screening
    says what the source contains, the verdict what the run did."""
    if not findings:
        return result
    stages = list(result.stages)
    withheld = 0.0
    if any(f.action == "zero_stages" for f in findings):
        for index, stage in enumerate(stages):
            if stage.points:
                withheld += stage.points
                message = "; ".join(m for m in (stage.message, _("points withheld by the static screening")) if m)
                stages[index] = stage.model_copy(update={"points": 0.0, "message": message})
    note = screening_note(findings)
    message = "\n".join(m for m in (result.message, note) if m)
    return result.model_copy(update={"screening": list(findings), "stages": stages,
                                     "score": round(max(result.score - withheld, 0.0), 4), "message": message})
