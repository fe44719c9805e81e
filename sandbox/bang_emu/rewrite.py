"""Source rewriting that turns preprocessed BANG C into plain C++ for g++.

Works on `g++ -E` output (so macros and included headers are already expanded) and keeps every line
where it was, so compiler diagnostics still point at the student's file and line:

* `kernel<<<dim, type, queue>>>(args)` becomes a call of `::bang_emu::launch_cfg(...)` with the kernel's
  name and launch site; template kernels keep `kernel<T>` as the function expression.
* `__nram__` / `__wram__` / `__mlu_shared__` declarations become thread-local references into the
  emulated core's (or cluster's) on-chip arena, plus a size record in the object file's
  `.bang_emu_onchip` section, which the driver sums to refuse oversized arrays at build time (an asm record
  inside functions, so inline functions and templates mix freely with the rest).
* Function definitions are split into device code (a `__mlu_global__/__mlu_entry__/__mlu_func__/__mlu_device__`
  qualifier, or called from device code) and host code. Host functions of the student's files get
  `HOST_ATTRIBUTE` after their name: no kernel-address instrumentation, vectoriser on.
* Each non-template kernel is registered with a typed unpacker for cnrtInvokeKernel_V2/_V3.
"""

from __future__ import annotations

import bisect
import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bang_emu import spaces

ONCHIP_SECTION = ".bang_emu_onchip"

_LINE_MARKER = re.compile(r'^#\s*(?:line\s+)?(\d+)\s+"((?:[^"\\]|\\.)*)"([ \d]*)', re.M)
# _Source._literal_mask: where a literal or a directive line may start, and a literal's body up to what ends it (its
# quote or a newline; a backslash takes the character after it, a newline included)
_MASK_CANDIDATE = re.compile(r"[\"'#]")
_BLANKS = re.compile(r"[ \t]*")
_NEWLINE = re.compile(r"\n")
_LITERAL_BODY = {q: re.compile(rf"[^{q}\n\\]*(?:\\[\s\S][^{q}\n\\]*)*") for q in "\"'"}
_ONCHIP_KEYWORD = re.compile(r"\b(" + "|".join(spaces.ONCHIP_KEYWORDS) + r")\b")
_ATTRIBUTE = re.compile(r"__attribute__\s*\(\((?:[^()]|\([^()]*\))*\)\)")
_DECLARATOR = re.compile(r"^(?P<head>[\s\S]*?)(?P<name>[A-Za-z_]\w*)\s*(?P<dims>(?:\[[^\[\]]*\]\s*)*)$")


class RewriteError(Exception):
    """A construct the rewriter cannot translate; reported like a compiler error."""


@dataclass
class OnchipDecl:
    index: int
    space: int
    name: str
    file: str
    line: int


@dataclass
class RewriteResult:
    text: str
    onchip: list[OnchipDecl] = field(default_factory=list)
    launches: int = 0
    kernels: list[str] = field(default_factory=list)  # non-template kernels at global scope (C-linkage aliases)
    host_functions: list[str] = field(default_factory=list)  # compiled without instrumentation


class _Source:
    """Preprocessed text plus the literal mask and the line-marker map."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.in_literal = self._literal_mask(text)
        self._newlines: list[int] | None = None  # offsets of the text's newlines, once location() asks
        self.markers: list[tuple[int, int, str]] = []  # (offset of next line, line number, file)
        self.system: list[bool] = []  # per marker: inside a system header (flag 3)
        self.flags: list[list[str]] = []  # per marker: its flags (1 enter a file, 2 return to one, 3 system)
        for m in _LINE_MARKER.finditer(text):
            nl = text.find("\n", m.end())
            self.markers.append((nl + 1 if nl >= 0 else len(text), int(m.group(1)), m.group(2)))
            self.flags.append(m.group(3).split())
            self.system.append("3" in self.flags[-1])

    def entered_system(self) -> list[bool]:
        """Per marker: inside a system header *as entered* (flag 1 with 3), not as a later marker says: a
        `#pragma GCC system_header` (or its _Pragma) in a student's file cannot make that file a system header
        here. Linemarkers written in a student's file, which could fake an entry, are refused separately."""
        stack: list[bool] = []
        entered = []
        for flags in self.flags:
            if "1" in flags:
                stack.append("3" in flags)
            elif "2" in flags and len(stack) > 1:
                stack.pop()
            elif not stack:
                stack.append(False)  # the main file
            entered.append(stack[-1])
        return entered

    @staticmethod
    def _literal_mask(text: str) -> bytearray:
        """1 for each character of a string or character literal (its quotes included; a literal the line ends
        before closing takes that newline too) and of a line that starts with `#` (line markers, pragmas), else
        0. A `'` after a letter or digit is a digit separator (`1'000`). The scan jumps from one quote or `#` to
        the next (the header text in between is most of a preprocessed unit); tests/emu/test_rewrite_scan.py
        holds it to the character-by-character definition."""
        mask = bytearray(len(text))
        n = len(text)
        i = 0
        line_start = True  # at i: only blanks since the line began (a `#` there starts a directive line)
        while (found := _MASK_CANDIDATE.search(text, i)) is not None:
            k = found.start()
            if k > i:  # text[i:k] holds no quote and no `#`
                newline = text.rfind("\n", i, k)
                blank = _BLANKS.match(text, newline + 1 if newline >= 0 else i, k).end() == k
                line_start = blank if newline >= 0 else line_start and blank
            ch = text[k]
            if ch == "#":
                if line_start:
                    end = text.find("\n", k)
                    end = n if end < 0 else end
                    mask[k:end] = b"\x01" * (end - k)
                    i = end
                else:
                    line_start, i = False, k + 1
                continue
            if ch == "'" and k > 0 and text[k - 1].isalnum():
                line_start, i = False, k + 1  # a digit separator
                continue
            end = _LITERAL_BODY[ch].match(text, k + 1).end()  # at the closing quote, a newline or the end
            if end < n and text[end] == "\\":  # a backslash as the last character escapes past the end
                end += 2
            stop = min(end + 1, n)
            mask[k:stop] = b"\x01" * (stop - k)
            line_start, i = False, end + 1
        return mask

    def _marker_index(self, pos: int) -> int:
        """The last line marker at or before `pos`, -1 before the first."""
        return bisect.bisect_right(self.markers, pos, key=lambda marker: marker[0]) - 1

    def is_system(self, pos: int) -> bool:
        i = self._marker_index(pos)
        return i >= 0 and self.system[i]

    def location(self, pos: int) -> tuple[str, int]:
        i = self._marker_index(pos)
        if i < 0:
            return "<input>", self._newlines_before(pos) + 1
        start, line, file = self.markers[i]
        return file, line + self._newlines_before(pos) - self._newlines_before(start)

    def _newlines_before(self, pos: int) -> int:
        """How many newlines text[:pos] holds (their offsets found once: a unit's headers are most of its text, and
        counting from the last line marker each time cost a wasm rewrite a third of its time)."""
        if self._newlines is None:
            self._newlines = [m.start() for m in _NEWLINE.finditer(self.text)]
        return bisect.bisect_left(self._newlines, pos)


def _split_top(text: str, sep: str) -> list[str]:
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == sep and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return parts


def _split_initializer(declarator: str) -> tuple[str, str | None]:
    """`name[dims] = init` -> (name[dims], init); a comparison inside the dims (`sizeof(T) == 4 ? a : b`) is no
    initializer."""
    depth = 0
    for i, ch in enumerate(declarator):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif (ch == "=" and depth == 0 and declarator[i - 1 : i] not in ("=", "!", "<", ">")
              and declarator[i + 1 : i + 2] != "="):
            return declarator[:i], declarator[i + 1 :]
    return declarator, None


def _match_forward(text: str, pos: int, open_ch: str, close_ch: str, skip: bytearray | None = None) -> int:
    """Index just past the bracket closing the one at text[pos]; `skip`: a mask of characters not counted (inside
    literals)."""
    depth = 0
    for i in range(pos, len(text)):
        if skip is not None and skip[i]:
            continue
        if text[i] == open_ch:
            depth += 1
        elif text[i] == close_ch:
            depth -= 1
            if depth == 0:
                return i + 1
    raise RewriteError(f"unbalanced '{open_ch}'")


def _c_string(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


# ------------------------------------------------------------------------------------------ launches
def _callee_start(text: str, end: int) -> int:
    """Start of the kernel expression that ends at `end` (identifier, qualified, template-id)."""
    i = end
    while i > 0 and text[i - 1] in " \t\n":
        i -= 1
    while True:
        if i > 0 and text[i - 1] == ">":
            depth, j = 0, i - 1
            while j >= 0:
                if text[j] == ">":
                    depth += 1
                elif text[j] == "<":
                    depth -= 1
                    if depth == 0:
                        break
                j -= 1
            i = j
            while i > 0 and text[i - 1] in " \t":
                i -= 1
        j = i
        while j > 0 and (text[j - 1].isalnum() or text[j - 1] == "_"):
            j -= 1
        if j == i:
            raise RewriteError("cannot find the kernel name before '<<<'")
        i = j
        k = i
        while k > 0 and text[k - 1] in " \t":
            k -= 1
        if k >= 2 and text[k - 2 : k] == "::":
            i = k - 2
            while i > 0 and text[i - 1] in " \t":
                i -= 1
            if i == 0 or not (text[i - 1].isalnum() or text[i - 1] in "_>"):
                return k - 2  # leading '::'
            continue
        return i


def _file_hash(path: str) -> int:
    return int.from_bytes(hashlib.sha256(path.encode("utf-8", "surrogateescape")).digest()[:8], "little")


def _rewrite_launches(src: _Source, text: str) -> tuple[str, int]:
    out, pos, count = [], 0, 0
    search = 0
    while True:
        at = text.find("<<<", search)
        if at < 0:
            break
        if src.in_literal[at]:
            search = at + 3
            continue
        start = _callee_start(text, at)
        callee = text[start:at].strip()
        # the launch configuration ends at the first '>>>' outside brackets
        depth, j = 0, at + 3
        while j < len(text):
            ch = text[j]
            if ch in "([{":
                depth += 1
            elif ch in ")]}":
                depth -= 1
            elif depth == 0 and text.startswith(">>>", j):
                break
            j += 1
        else:
            raise RewriteError("'<<<' without a matching '>>>'")
        cfg = _split_top(text[at + 3 : j], ",")
        k = j + 3
        while k < len(text) and text[k] in " \t\n":
            k += 1
        if k >= len(text) or text[k] != "(":
            raise RewriteError(f"expected '(' after the launch configuration of {callee}")
        close = _match_forward(text, k, "(", ")")
        args = text[k + 1 : close - 1]
        file, line = src.location(at)
        if len(cfg) == 2:
            fn = "::bang_emu::launch_cfg2"
        elif len(cfg) in (3, 4):
            fn = "::bang_emu::launch_cfg"
            cfg = cfg[:3]
        else:
            raise RewriteError(f"launch of {callee} needs <<<dim, type, queue>>>")
        name = re.sub(r"\s+", "", callee)
        # A generic lambda calls the kernel, so template arguments are deduced from the launch arguments as
        # cncc does (`k<<<...>>>(float_ptr)` for `template <class T> k(T*)`); the raw callee text keeps its
        # line breaks, so later lines do not move.
        kernel_fn = f"[](auto &...__bang_emu_a) {{ {text[start:at]}(__bang_emu_a...); }}"
        # The site's tag names it alike in the extension and in the device module (trusted replay, device.h).
        tag = f"::bang_emu::SiteTag<{_file_hash(file)}ULL, {line}, {count}>"
        call = f"{fn}<{tag}>({_c_string(name)}, {_c_string(file)}, {line}, {', '.join(cfg)}, {kernel_fn}"
        call += (", " + args if args.strip() else "") + ")"
        out.append(text[pos:start])
        out.append(call)
        pos = close
        search = close
        count += 1
    out.append(text[pos:])
    return "".join(out), count


# ------------------------------------------------------------------------------------------ inline asm
_ASM = re.compile(r"\b(?:__asm__|__asm|asm)\b(\s*(?:volatile|__volatile__|__volatile|inline|goto)\b)*\s*\(")
_ASM_TEMPLATE = re.compile(r'\s*((?:"(?:[^"\\\n]|\\.)*"\s*)+)')
# the MLISA barrier real BANG code writes by hand (`__asm__ volatile("sync;\n\t")` in mlu-ops): __sync()
_ASM_BARRIERS = {"sync"}


def _asm_instructions(literals: str) -> list[str]:
    body = "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', literals))
    body = body.replace("\\n", ";").replace("\\t", " ")
    return [ins.strip() for ins in body.split(";") if ins.strip()]


def _refuse_stray_asm(src: _Source, text: str, start: int, system: Callable[[int], bool],
                      in_function: Callable[[int], bool]) -> None:
    """Device module: every asm outside a function body and outside the system headers (a top-level asm statement,
    an asm label naming a symbol) is refused, as every asm was before. Inside a body _asm_edits replaces each one (the barrier by `__sync()`, any
    other by a call that fails the build if it is compiled), exactly as in the normal build: no assembly of the
    student's reaches the module, and a kernel that builds normally builds here (an unused helper of mlu-ops'
    common.h with `fuse.nram` assembly included as a header)."""
    for m in _ASM.finditer(text, start):
        if src.in_literal[m.start()] or system(m.start()) or in_function(m.start()):
            continue
        file, line = src.location(m.start())
        raise RewriteError(f"{file}:{line}: inline assembly is not allowed in code the grader replays (it would "
                           "switch off or go around the emulator's checks)")


def _asm_edits(src: _Source, text: str, in_function: Callable[[int], bool]) -> list[tuple[int, int, str]]:
    """Inline assembly in the student's functions: the known barrier becomes `__sync()`; anything else a call to a
    function declared with GCC's error attribute, so the build fails at that line ("inline assembly is not supported
    by the emulator") if, and only if, the code is really compiled (an unused inline helper in a header is not).
    Assembly in system headers and asm labels of declarations are left alone."""
    edits = []
    for m in _ASM.finditer(text):
        at = m.start()
        if src.in_literal[at] or src.is_system(at) or not in_function(at):
            continue
        open_paren = m.end() - 1
        depth, close = 0, -1
        for i in range(open_paren, len(text)):
            if src.in_literal[i]:
                continue
            if text[i] == "(":
                depth += 1
            elif text[i] == ")":
                depth -= 1
                if depth == 0:
                    close = i + 1
                    break
        if close < 0:
            file, line = src.location(at)
            raise RewriteError(f"{file}:{line}: unbalanced '(' in inline assembly")
        lit = _ASM_TEMPLATE.match(text, open_paren + 1)
        instructions = _asm_instructions(lit.group(1)) if lit else []
        newlines = "\n" * text.count("\n", at, close)
        if instructions and all(ins in _ASM_BARRIERS for ins in instructions):
            edits.append((at, close, "__sync()" + newlines))
            continue
        shown = "; ".join(instructions)[:80].replace("\\", "\\\\").replace('"', "'") or "?"
        name = f"__bang_emu_asm_{len(edits)}_{at}"
        edits.append((at, close, f"({{ extern void {name}() __attribute__((error(\"inline assembly is not supported "
                                 f"by the emulator: '{shown}'\"))); {name}(); }})" + newlines))
    return edits


# ------------------------------------------------------------------------------------------ on-chip decls
def _statement_bounds(text: str, kw_start: int) -> tuple[int, int]:
    i = kw_start
    while i > 0 and text[i - 1] not in ";{}":
        i -= 1
    seg = text[i:kw_start]
    # drop line markers that precede the declaration inside the segment
    last_marker_line = seg.rfind("\n#")
    if last_marker_line >= 0:
        nl = seg.find("\n", last_marker_line + 1)
        i += nl + 1 if nl >= 0 else len(seg)
    depth, j = 0, kw_start
    while j < len(text):
        ch = text[j]
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == ";" and depth == 0:
            return i, j
        j += 1
    raise RewriteError("on-chip declaration without ';'")


def _translate_decl(stmt: str, space_kw: str, src_file: str, line: int, first_index: int,
                    in_function: bool = False) -> tuple[str, list[OnchipDecl]]:
    space = spaces.ONCHIP_KEYWORDS[space_kw]
    body = _ATTRIBUTE.sub(" ", stmt.replace(space_kw, " ", 1))
    newlines = "\n" * stmt.count("\n")
    body = " ".join(body.split())
    parts = _split_top(body, ",")
    storage = []
    head_words = []
    first, init0 = _split_initializer(parts[0])
    m = _DECLARATOR.match(first.strip())
    if not m:
        raise RewriteError(f"cannot parse the {space_kw} declaration '{stmt.strip()}'")
    for w in m.group("head").split():
        if w in ("static", "extern"):
            storage.append(w)
        elif w in ("thread_local", "__thread", "inline"):
            continue
        else:
            head_words.append(w)
    base = " ".join(head_words)
    if not base:
        raise RewriteError(f"the {space_kw} declaration '{stmt.strip()}' has no type")
    declarators = [(m.group("name"), m.group("dims").replace(" ", ""), init0)]
    for extra in parts[1:]:
        extra, init = _split_initializer(extra)
        mm = _DECLARATOR.match(extra.strip())
        if not mm or mm.group("head").strip().strip("*"):
            raise RewriteError(f"cannot parse the declarator '{extra.strip()}'")
        declarators.append((mm.group("name"), mm.group("dims").replace(" ", ""), init))
    is_extern = "extern" in storage
    store = " ".join(storage)
    pieces, decls = [], []
    for n, (name, dims, init) in enumerate(declarators):
        if is_extern:
            pieces.append(f"{store} thread_local {base} (&{name}){dims};")
            continue
        index = first_index + len(decls)
        decls.append(OnchipDecl(index, space, name, src_file, line))
        tag = _c_string(f"{name}@{src_file}:{line}")
        size = f"sizeof({base}{dims})"
        if in_function:
            # An asm record, not a section-attributed static: statics of inline functions and templates live in
            # COMDAT groups, and GCC refuses to mix those with plain ones in one section ("section type
            # conflict"). Inlined copies repeat the record; the driver counts each (index, size) once.
            rec = (f'__asm__ __volatile__(".pushsection {ONCHIP_SECTION},\\"a\\",@progbits\\n\\t.quad %c0, %c1\\n\\t'
                   f'.popsection" :: "i"({index}ull), "i"({size}));')
        else:
            rec = (f"static const unsigned long long __bang_emu_onchip_{index}[2] "
                   f'__attribute__((section("{ONCHIP_SECTION}"), used)) = {{{index}ull, {size}}};')
        alloc = f"::bang_emu::onchip_alloc({space}, {size}, {tag})"
        init_const = "" if re.search(r"\bconst\b", base) else "const "
        if init is None:
            value = f"*reinterpret_cast<{base}(*){dims}>({alloc})"
        else:
            value = (f"*[]() {{ {base} (*__p){dims} = reinterpret_cast<{base}(*){dims}>({alloc}); "
                     f"static {init_const}{base} __init{dims} = {init.strip()}; "
                     f"__builtin_memcpy((void *)__p, &__init, sizeof(__init)); return __p; }}()")
        pieces.append(f"{rec} {store} thread_local {base} (&{name}){dims} = {value};")
        del n
    return " ".join(pieces) + newlines, decls


def _onchip_edits(src: _Source, text: str, in_function: Callable[[int], bool]) -> tuple[list[tuple[int, int, str]], list[OnchipDecl]]:
    """Edits (start, end, replacement) of `text` (the untouched preprocessed source) that turn every on-chip
    declaration into emulated storage."""
    edits, pos, decls = [], 0, []
    for m in _ONCHIP_KEYWORD.finditer(text):
        if m.start() < pos or src.in_literal[m.start()]:
            continue
        start, end = _statement_bounds(text, m.start())
        if start < pos:
            continue
        stmt = text[start:end]
        if "(" in stmt.split(m.group(1))[0] and not stmt.lstrip().startswith(("static", "extern")):
            continue  # a cast or a parameter list, not a declaration: the macro expands it to nothing
        file, line = src.location(m.start())
        new, ds = _translate_decl(stmt, m.group(1), file, line, len(decls), in_function(m.start()))
        decls.extend(ds)
        edits.append((start, end + 1, new))
        pos = end + 1
    return edits, decls


def _apply_edits(text: str, edits: list[tuple[int, int, str]]) -> str:
    out, pos = [], 0
    for start, end, new in sorted(edits, key=lambda e: (e[0], e[1])):
        if start < pos:
            continue  # overlaps an edit already made (the on-chip statement wins)
        out.append(text[pos:start])
        out.append(new)
        pos = end
    out.append(text[pos:])
    return "".join(out)


def _strip_keywords(text: str) -> str:
    """Qualifiers left over (casts, parameter types, prototypes) mean nothing to g++; `__mlu_func__` is `inline`
    unless the declaration says `inline` itself (cncc's `__mlu_func__` is an always_inline attribute); so is
    `__mlu_vector__`."""
    in_literal = _Source._literal_mask(text)

    def repl(m: re.Match) -> str:
        if in_literal[m.start()]:
            return m.group(0)
        if m.group(0) not in ("__mlu_func__", "__mlu_vector__"):
            return ""
        a = max(text.rfind(";", 0, m.start()), text.rfind("}", 0, m.start()), text.rfind("{", 0, m.start()))
        b = text.find("(", m.end())
        around = text[a + 1 : m.start()] + " " + text[m.end() : b if b >= 0 else m.end()]
        return "" if re.search(r"\binline\b", around) else "inline"

    return _ANY_QUALIFIER.sub(repl, text)


# ------------------------------------------------------------------------------------------ functions
_ANY_QUALIFIER = re.compile(r"\b(__nram__|__wram__|__mlu_shared__|__mlu_global__|__mlu_entry__|__mlu_func__|"
                            r"__mlu_vector__|__mlu_device__|__mlu_host__)\b")
# `__mlu_vector__`: mlu-ops' functions on vector registers (kernels/utils/common.h); device code inlined like
# `__mlu_func__`
_DEVICE_QUALIFIER = re.compile(r"\b(__mlu_global__|__mlu_entry__|__mlu_func__|__mlu_vector__|__mlu_device__)\b")
_KERNEL_QUALIFIER = re.compile(r"\b(__mlu_global__|__mlu_entry__)\b")
_SCOPE_CHAR = re.compile(r"[{};]")
_IDENT_BEFORE = re.compile(r"([A-Za-z_]\w*)\s*$")
_DECLARATOR_STOP = re.compile(r"\[\[|[(=]")
_PARENS = re.compile(r"[()]")
_CALLED = re.compile(r"\b([A-Za-z_]\w*)\s*(?:<[^;{}()<>]*>\s*)?\(")
_NOT_DECLARATOR = {"__attribute__", "decltype", "alignas", "__declspec", "sizeof", "noexcept", "throw", "requires",
                   "if", "while", "for", "switch", "return", "__typeof__", "typeof", "__alignof__", "alignof",
                   "static_assert", "__asm__", "asm", "operator", "new", "delete", "catch", "try", "else", "do",
                   "case", "default", "__extension__"}
# a word before '(' that cannot be a function's name (`void (*f(int))(int)` and the like): leave such heads alone
_TYPE_WORDS = {"void", "int", "char", "float", "double", "long", "short", "unsigned", "signed", "bool", "auto",
               "const", "volatile", "struct", "class", "union", "enum", "typename", "template", "half", "inline",
               "static", "extern", "constexpr", "virtual", "explicit", "friend", "register", "mutable"}
# Host function definitions get this: no kernel-address instrumentation (their loads and stores are the host's, not
# the MLU's) and the vectoriser back, so a lab's CPU reference loops run at native speed.
HOST_ATTRIBUTE = ' [[gnu::no_sanitize_address, gnu::optimize("tree-vectorize")]] '


@dataclass
class FunctionDef:
    name: str | None
    name_end: int  # where an attribute may go: just after the declarator-id
    body_open: int
    body_close: int
    device: bool  # carries a __mlu_* qualifier, or is called from device code
    kernel: bool
    template: bool
    scope: str  # "global", "extern_c", "namespace", "class"
    user: bool  # defined in the student's sources (not a system or emulator header)
    file: str = ""
    line: int = 0


def _strip_template_prefix(head: str) -> tuple[str, int, bool]:
    """(rest, offset of rest in head, had a template header)."""
    i, had = 0, False
    while True:
        m = re.match(r"\s*template\s*<", head[i:])
        if not m:
            return head[i:], i, had
        had = True
        j, depth = i + m.end(), 1
        while j < len(head) and depth:
            if head[j] == "<":
                depth += 1
            elif head[j] == ">":
                depth -= 1
            j += 1
        i = j


def _find_declarator_paren(rest: str) -> tuple[int, str | None] | None:
    """Index in rest of the parameter list's '(' of a function declarator, and the name before it; None when the
    head declares no function."""
    n = len(rest)
    i = 0
    while (stop := _DECLARATOR_STOP.search(rest, i)) is not None:  # the next `[[`, `(` or `=`
        i = stop.start()
        if rest.startswith("[[", i):
            i = rest.find("]]", i) + 2 if rest.find("]]", i) >= 0 else n
            continue
        if rest[i] == "(":
            m = _IDENT_BEFORE.search(rest, 0, i)
            word = m.group(1) if m else None
            close, depth = -1, 0
            for paren in _PARENS.finditer(rest, i):
                depth += 1 if paren.group() == "(" else -1
                if depth == 0:
                    close = paren.start()
                    break
            if close < 0:
                return None
            if word in _NOT_DECLARATOR:
                i = close + 1
                continue
            if word is None or word in _TYPE_WORDS:
                return i, None
            return i, word
        if rest[i - 1 : i] not in ("<", ">", "!", "=") and rest[i + 1 : i + 2] != "=":
            return None  # an initializer
        i += 1
    return None


def _classify(head: str) -> tuple[str, dict]:
    # drop line markers (they sit on their own lines)
    clean = re.sub(r"(?m)^#.*$", lambda m: " " * len(m.group(0)), head)
    hs = clean.strip()
    if not hs:
        return "other", {}
    if re.fullmatch(r'extern\s*"C"', hs):
        return "ns", {"scope": "extern_c"}
    if re.fullmatch(r'extern\s*"C\+\+"', hs):
        return "ns", {"scope": "keep"}
    if re.search(r"\bnamespace\b[\s\w:]*$", hs) or re.fullmatch(r"(inline\s+)?namespace", hs):
        return "ns", {"scope": "namespace"}
    rest, off, is_template = _strip_template_prefix(clean)
    if not re.match(r"\s*(?:[A-Za-z_:~]|\[\[)", rest):
        return "other", {}  # `, member(3) {` of a constructor's init list and other fragments
    found = _find_declarator_paren(rest)
    if found is None:
        if re.search(r"\b(class|struct|union)\b", rest) and not re.search(r"\benum\b", rest):
            return "class", {}
        return "other", {}
    paren, name = found
    name_end = None
    if name is not None:
        m = _IDENT_BEFORE.search(rest, 0, paren)
        name_end = off + m.end(1)
        before = rest[: m.start(1)].rstrip()
        if before.endswith(("~", "operator")):
            name = None
    return "func", {"name": name, "name_end": name_end, "template": is_template}


def scan_functions(src: _Source, text: str, user_file: Callable[[str], bool] | None = None) -> list[FunctionDef]:
    """Function definitions of the translation unit (namespace and class scope), each classified as device
    code (a __mlu_* qualifier, or called from device code) or host code."""
    mask = src.in_literal
    stack: list[tuple[str, object]] = [("ns", "global")]
    funcs: list[FunctionDef] = []
    boundary = 0
    for m in _SCOPE_CHAR.finditer(text):
        pos = m.start()
        if mask[pos]:
            continue
        ch = text[pos]
        if ch == ";":
            boundary = pos + 1
            continue
        if ch == "{":
            kind, top = "other", stack[-1]
            entry: object = None
            if top[0] in ("ns", "class"):
                head = text[boundary:pos]
                kind, info = _classify(head)
                if kind == "ns":
                    outer = top[1] if top[0] == "ns" else "namespace"
                    scope = info["scope"]
                    entry = outer if scope == "keep" else ("namespace" if outer == "namespace" else scope)
                elif kind == "func":
                    scope = top[1] if top[0] == "ns" else "class"
                    name_end = boundary + info["name_end"] if info["name_end"] is not None else pos
                    file, line = src.location(name_end)
                    user = not src.is_system(name_end) and (user_file(file) if user_file else True)
                    entry = FunctionDef(info["name"], name_end, pos, -1, bool(_DEVICE_QUALIFIER.search(head)),
                                        bool(_KERNEL_QUALIFIER.search(head)), info["template"], str(scope), user,
                                        file, line)
            stack.append((kind, entry))
            boundary = pos + 1
        else:
            if len(stack) > 1:
                kind, entry = stack.pop()
                if kind == "func" and isinstance(entry, FunctionDef):
                    entry.body_close = pos
                    funcs.append(entry)
            boundary = pos + 1
    # a function that device code calls is device code too (cncc would refuse a host function there; the emulator
    # keeps it instrumented so its accesses are still checked and costed)
    called: set[str] = set()
    pending = [f for f in funcs if f.device]
    while pending:
        for f in pending:
            called.update(_CALLED.findall(text, f.body_open, f.body_close))
        pending = [f for f in funcs if not f.device and f.name in called]
        for f in pending:
            f.device = True
    return sorted(funcs, key=lambda f: f.body_open)


# What the device module (trusted replay, DESIGN.md "Threat model") refuses in the student's part of a unit: ways
# to run code the instrumentation does not check (attributes that switch it off, load-time resolvers, assembly
# outside functions) or to change the emulator's own templates (reopening or specialising namespace bang_emu).
_DEVICE_MODULE_REFUSED = re.compile(
    r"\bnamespace\s+bang_emu\b"
    r"|\btemplate\s*<[^;{]*?>\s*(?:struct|class|union)?[^;{(]*?\bbang_emu\s*::"
    r"|\b(?:__)?(?:no_sanitize\w*|no_address_safety_analysis|disable_sanitizer_instrumentation|ifunc|"
    r"target_clones|naked|symver|no_stack_protector|interrupt)(?:__)?\b"
    # an attribute that compiles one function for another instruction set (target builtins, masked and
    # non-temporal stores); `optimize(...)` is neutralised instead (_neutralise)
    r"|\b(?:__)?target(?:__)?\s*\(\s*\""
    r"|\b__asan_\w*"
    r"|\b__(?:real|wrap)_\w+"  # the device module's checked libm wrappers (`ld --wrap`) and what they wrap
)

# Issue 37: what stores, moves the stack or jumps where the instrumentation does not see it. Compiler builtins are
# allowed by name, not refused by name: only the pure ones (values in, a value out, or a store the sanitizer
# instruments: __builtin_memcpy/memset, the overflow builtins) and the math builtins of the pure libm functions.
# Everything else -- target builtins (__builtin_ia32_movnti64, masked stores), __builtin_alloca*,
# __builtin_setjmp/longjmp, __builtin_va_start/va_copy/va_arg, __builtin_stack_restore, __builtin_frame_address,
# __builtin_apply, __builtin_eh_return ... -- is refused in the student's part of a device module.
_BUILTIN = re.compile(r"\b__builtin_(\w+)")
_PURE_BUILTINS = re.compile(
    r"(?:expect(?:_with_probability)?|unreachable|trap|assume_aligned|assume|constant_p|offsetof|object_size|"
    r"dynamic_object_size|types_compatible_p|choose_expr|is_constant_evaluated|addressof|launder|bit_cast|"
    r"LINE|FILE|FUNCTION|classify_type|"
    r"(?:clz|ctz|clrsb|ffs|popcount|parity)(?:l|ll|g)?|bswap(?:16|32|64|128)|"
    r"(?:huge_val|inf|nan|nans)(?:f|l|f16|f32|f64|f128|f32x|f64x|d32|d64|d128)?|"
    r"isnan|isinf|isinf_sign|isfinite|isnormal|signbit[fl]?|fpclassify|isgreater(?:equal)?|isless(?:equal|greater)?|"
    r"isunordered|iseqsig|issignaling|"
    r"(?:add|sub|mul)(?:_overflow(?:_p)?|s?l{0,2}_overflow)|"  # the result's store is instrumented
    r"memcpy|memmove|memset|memcmp|bcmp|strlen|strcmp|strncmp|"  # expanded or called, instrumented either way
    r"abs|labs|llabs|imaxabs|"
    r"prefetch|speculation_safe_value|complex|conj[fl]?|creal[fl]?|cimag[fl]?|"
    r"shuffle|shufflevector|convertvector)$")
_VA_BUILTINS = {"va_list", "va_end", "va_start", "va_arg", "va_copy"}
# headers whose only content is x86 target builtins (intrinsics: _mm_stream_si64, _mm_maskmoveu_si128 ...)
_INTRINSIC_HEADER = re.compile(r"(?:^|/)(?:\w*intrin|mm_malloc|mm3dnow|cpuid)\.h$")
# calls that move the stack pointer or jump back into a frame, under their library names
_STACK_CALL = re.compile(r"\b(?:alloca|_?_?setjmp|_?_?longjmp|_?_?sigsetjmp|_?_?siglongjmp|getcontext|setcontext|"
                         r"swapcontext|makecontext)\s*\(")
# pragmas that change the instruction set of the functions after them (enable target builtins)
_PRAGMA = re.compile(r"^[ \t]*#[ \t]*pragma[ \t]+GCC[ \t]+target\b", re.M)
# Honest code carries these (tuning an inner loop, silencing a warning), and all they could do here is take back
# our options (stack-clash protection, the VLA error): they are blanked instead of refused (_neutralise), so the
# device module's flags stand and the student loses nothing.
_NEUTRAL_PRAGMA = re.compile(r"^[ \t]*#[ \t]*pragma[ \t]+GCC[ \t]+(?:(?:optimize|push_options|pop_options|"
                             r"reset_options)\b|diagnostic\b[^\n]*(?:vla|error|pedantic))[^\n]*", re.M)
_ATTRIBUTE_LIST = re.compile(r"\b__attribute__\s*\(\s*\(|\[\s*\[")
_OPTIMIZE_ATTRIBUTE = re.compile(r"(?:\b(?:gnu|__gnu__)\s*::\s*)?\b(?:__)?optimize(?:__)?\s*\(")
# the variadic builtins that store into a va_list, rewritten to go through a checked store of it (_va_edits)
_VA_STORE = re.compile(r"\b__builtin_(va_start|va_arg|va_copy)\s*\(")


def _student_start(src: _Source) -> int:
    """Where the student's text begins: the first line marker naming the main file after the forced includes
    (nothing the student wrote can come before it, so a forged marker later cannot move it)."""
    if not src.markers:
        return 0
    main = src.markers[0][2]
    for start, _line, file in src.markers[1:]:
        if file == main:
            return start
    return 0


# A line marker or #line written in a source file: it could make the student's text look like a system header's.
_MARKER_DIRECTIVE = re.compile(r"^[ \t]*#[ \t]*(?:line\b|[0-9])", re.M)


def check_device_module(src: _Source, text: str, student_file: Callable[[str], bool]) -> None:
    """Refuses, with the line, what a device module may not contain (RewriteError). `student_file(path)`: a file
    that is neither a system header nor the emulator's own."""
    entered = src.entered_system()
    named = dict.fromkeys(f for (_start, _line, f), system in zip(src.markers, entered, strict=True) if not system)
    for file in named:
        if file.startswith("<") or not student_file(file):
            continue
        try:
            raw = Path(file).read_text(errors="replace")
        except OSError:
            continue
        m = _MARKER_DIRECTIVE.search(raw)
        if m:
            line = raw.count("\n", 0, m.start()) + 1
            raise RewriteError(f"{file}:{line}: line markers and #line are not allowed in code the grader replays")
    start = _student_start(src)
    system = _system_predicate(src)
    # (inline assembly: _refuse_stray_asm and _asm_edits, once function bodies are known)
    for m in _DEVICE_MODULE_REFUSED.finditer(text, start):
        if src.in_literal[m.start()] or system(m.start()):
            continue
        file, line = src.location(m.start())
        raise RewriteError(f"{file}:{line}: '{m.group(0).strip()[:60]}' is not allowed in code the grader replays (it "
                           "would switch off or go around the emulator's checks)")
    _check_escapes(src, text, start, _trusted_predicate(src, student_file))


def _system_predicate(src: _Source) -> Callable[[int], bool]:
    """pos -> inside a system header as entered (_Source.entered_system)."""
    entered = src.entered_system()

    def system(pos: int) -> bool:
        i = src._marker_index(pos)
        return i >= 0 and entered[i]

    return system


def _trusted_predicate(src: _Source, student_file: Callable[[str], bool]) -> Callable[[int], bool]:
    """pos -> not the student's text (a system header, or a file that is not the student's)."""
    system = _system_predicate(src)
    return lambda pos: system(pos) or not student_file(src.location(pos)[0])


def _match_code(src: _Source, pos: int, open_ch: str, close_ch: str) -> int:
    """Index just past the bracket closing the one at src.text[pos], brackets inside literals not counted; -1 if
    none closes it."""
    try:
        return _match_forward(src.text, pos, open_ch, close_ch, src.in_literal)
    except RewriteError:
        return -1


def _blank(chars: list[str], begin: int, end: int) -> None:
    for i in range(begin, end):
        if chars[i] != "\n":
            chars[i] = " "


def _neutralise(src: _Source, start: int, trusted: Callable[[int], bool]) -> str:
    """Issue 37: the student's `#pragma GCC optimize/push_options/pop_options/reset_options`, diagnostic pragmas
    naming vla/error/pedantic and `optimize(...)` attributes, blanked (same length, same lines): honest code uses
    them to tune or to silence a warning, and here they could only take back the device module's own options
    (stack-clash protection, the VLA error), which therefore stand. `target` pragmas and attributes stay refused
    (they enable other instructions)."""
    text = src.text
    chars: list[str] | None = None
    for m in _NEUTRAL_PRAGMA.finditer(text, start):
        if not trusted(m.start()):
            chars = chars if chars is not None else list(text)
            _blank(chars, m.start(), m.end())
    for m in _ATTRIBUTE_LIST.finditer(text, start):
        if src.in_literal[m.start()] or trusted(m.start()):
            continue
        opening = m.start() if text[m.start()] == "[" else text.index("(", m.start())
        end = _match_code(src, opening, text[opening], "]" if text[opening] == "[" else ")")
        if end < 0:
            continue  # unbalanced: g++ says so
        for a in _OPTIMIZE_ATTRIBUTE.finditer(text, m.end(), end):
            if src.in_literal[a.start()]:
                continue
            close = _match_code(src, a.end() - 1, "(", ")")
            if close < 0 or close > end:
                continue
            chars = chars if chars is not None else list(text)
            _blank(chars, a.start(), close)
    return text if chars is None else "".join(chars)


def _va_edits(src: _Source, text: str, start: int, trusted: Callable[[int], bool]) -> list[tuple[int, int, str]]:
    """Issue 37: va_start, va_arg and va_copy store into the va_list they are given (its offsets and pointers)
    with stores the instrumentation does not see; a va_list placed on the replay's memory made them a way to
    write it. In the student's text each is rewritten to take the va_list's address once, store to every word of
    it through an instrumented (checked) store, and only then run the builtin on that same address: an honest
    variadic helper keeps working, a placed va_list is stopped by the check like any store."""
    edits = []
    for m in _VA_STORE.finditer(text, start):
        if src.in_literal[m.start()] or trusted(m.start()):
            continue
        close = _match_code(src, m.end() - 1, "(", ")")
        if close < 0:
            continue
        args = _split_top(text[m.end():close - 1], ",")
        if len(args) < 2:
            continue  # g++ refuses it
        target, rest = args[0], ",".join(args[1:])
        # va_start/va_copy take the va_list object itself (an array); va_arg also takes a parameter (decayed)
        address = f"&({target})" if m.group(1) != "va_arg" else f"&({target})[0]"
        use = "*__bang_emu_va" if m.group(1) != "va_arg" else "__bang_emu_va"
        edits.append((m.start(), close,
                      f"({{ __typeof__({address}) __bang_emu_va = {address}; "
                      "::bang_emu_va_touch((void *)__bang_emu_va, sizeof *__bang_emu_va); "
                      f"__builtin_{m.group(1)}({use},{rest}); }})"))
    return edits


def _check_escapes(src: _Source, text: str, start: int, trusted: Callable[[int], bool]) -> None:
    """Issue 37: refuses, in the student's files, what would store, move the stack or jump past the
    instrumentation (RewriteError naming it): builtins off the pure list, alloca/setjmp and their kin, x86
    intrinsic headers, and pragmas that change the instruction set or the compiler's options."""
    why = ("it stores through a pointer, moves the stack or jumps where the emulator's checks do not see it, "
           "and a BANG kernel never needs it")
    for m in _BUILTIN.finditer(text, start):
        if src.in_literal[m.start()] or trusted(m.start()) or _PURE_BUILTINS.match(m.group(1)):
            continue
        if m.group(1) in _VA_BUILTINS:  # the type, the no-op va_end, and what _va_edits makes a checked store
            continue
        if _pure_math(m.group(1)):
            continue
        file, line = src.location(m.start())
        raise RewriteError(f"{file}:{line}: the compiler builtin '{m.group(0)}' is not allowed in code the grader "
                           f"replays: {why} (only pure builtins are: __builtin_expect, __builtin_clz, "
                           "__builtin_memcpy, __builtin_expf ...)")
    for m in _STACK_CALL.finditer(text, start):
        if src.in_literal[m.start()] or trusted(m.start()):
            continue
        file, line = src.location(m.start())
        raise RewriteError(f"{file}:{line}: '{m.group(0).rstrip('( ')}' is not allowed in code the grader "
                           f"replays: {why}")
    for offset, _line, file in src.markers:
        if offset >= start and _INTRINSIC_HEADER.search(file):
            marker = text.rfind("\n", 0, max(offset - 1, 0)) + 1  # the line marker entering it
            where, line = src.location(marker)  # the line of the #include in the file that includes it
            raise RewriteError(f"{where}:{line}: including '{file}' (x86 intrinsics) is not allowed in code the "
                               f"grader replays: target builtins such as non-temporal and masked stores escape the "
                               "emulator's checks, and a BANG kernel never needs them")
    for m in _PRAGMA.finditer(text, start):
        if trusted(m.start()):
            continue
        file, line = src.location(m.start())
        raise RewriteError(f"{file}:{line}: '{m.group(0).strip()[:60]}' is not allowed in code the grader "
                           "replays: it changes the instruction set or the compiler's options (stack-clash "
                           "protection, the VLA error) for the functions that follow")


def _pure_math(name: str) -> bool:
    """`__builtin_expf` and the like: a math builtin of a pure libm function (device_module.PURE_LIBM)."""
    from bang_emu.device_module import pure_libm_name

    return pure_libm_name(name)


def rewrite(preprocessed: str, default_device: str | None = None,
            user_file: Callable[[str], bool] | None = None, device_module: bool = False) -> RewriteResult:
    """Rewrite one preprocessed translation unit. `user_file(path)` tells the student's files from headers; host
    functions defined there are compiled without instrumentation, except in a device module (`device_module`:
    every function instrumented, and what could escape the checks refused)."""
    src = _Source(preprocessed)
    va: list[tuple[int, int, str]] = []
    if device_module:
        student_file = user_file or (lambda f: not f.startswith("/usr/"))
        neutral = _neutralise(src, _student_start(src), _trusted_predicate(src, student_file))
        if neutral is not preprocessed:
            preprocessed, src = neutral, _Source(neutral)
        check_device_module(src, preprocessed, student_file)
        va = _va_edits(src, preprocessed, _student_start(src), _trusted_predicate(src, student_file))
        user_file = lambda f: False  # noqa: E731 -- no function runs uninstrumented
    if user_file is None:  # without the driver's predicate: everything but the emulator's own headers
        user_file = lambda f: not f.startswith("<") and not re.search(r"/(bang_emu|torch_mlu_emu)/include/", f)  # noqa: E731
    funcs = scan_functions(src, preprocessed, user_file)
    bodies = [(f.body_open, f.body_close) for f in funcs]
    starts = [b[0] for b in bodies]

    def in_function(pos: int) -> bool:
        # bodies are disjoint (nested blocks are not scanned), so the last one starting before pos decides
        i = bisect.bisect_right(starts, pos) - 1
        return i >= 0 and bodies[i][0] < pos < bodies[i][1]

    if device_module:
        _refuse_stray_asm(src, preprocessed, _student_start(src), _system_predicate(src), in_function)
    edits, decls = _onchip_edits(src, preprocessed, in_function)
    edits += _asm_edits(src, preprocessed, in_function) + va
    host_functions = []
    kernel_names: list[str] = []
    seen: dict[str, int] = {}
    for f in funcs:
        if f.name:
            seen[f.name] = seen.get(f.name, 0) + 1
    registrations = 0
    for f in funcs:
        if not f.device and f.user and f.name and f.scope != "class":
            edits.append((f.name_end, f.name_end, HOST_ATTRIBUTE))
            host_functions.append(f.name)
        if (f.kernel and f.name and not f.template and f.scope in ("global", "extern_c", "namespace")
                and seen.get(f.name) == 1 and not device_module):  # (a replay launches by site, not address)
            # cnrtInvokeKernel_V2/_V3 find the kernel by its address and unpack the parameter buffer by its type
            reg = (f" static const bool __bang_emu_kreg_{registrations} = ::bang_emu::register_kernel("
                   f"(const void *)&{f.name}, &::bang_emu::PackedCall<decltype(&{f.name})>::invoke, "
                   f"{_c_string(f.name)}, {_c_string(f.file)}, {f.line});")
            edits.append((f.body_close + 1, f.body_close + 1, reg))
            registrations += 1
            if f.scope == "global":
                kernel_names.append(f.name)
    text = _strip_keywords(_apply_edits(preprocessed, edits))
    src2 = _Source(text)
    text, launches = _rewrite_launches(src2, text)
    if default_device:
        text += f"\nstatic int __bang_emu_default_device = (::bang_emu::set_default_device({_c_string(default_device)}), 0);\n"
    return RewriteResult(text=text, onchip=decls, launches=launches, kernels=kernel_names,
                         host_functions=host_functions)
