"""Source rewriting that turns preprocessed BANG C into plain C++ for g++.

Works on `g++ -E` output (so macros and included headers are already expanded) and keeps every line
where it was, so compiler diagnostics still point at the student's file and line:

* `kernel<<<dim, type, queue>>>(args)` becomes a call of `::bang_emu::launch_cfg(...)` with the kernel's
  name and launch site; template kernels keep `kernel<T>` as the function expression.
* `__nram__` / `__wram__` / `__mlu_shared__` declarations become thread-local references into the
  emulated core's (or cluster's) on-chip arena, plus a size record in the object file's
  `.bang_emu_onchip` section, which the driver sums to refuse oversized arrays at build time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

SPACE_CODES = {"__nram__": 2, "__wram__": 3, "__mlu_shared__": 4}
SPACE_NAMES = {2: "NRAM", 3: "WRAM", 4: "SRAM"}
ONCHIP_SECTION = ".bang_emu_onchip"

_LINE_MARKER = re.compile(r'^#\s*(?:line\s+)?(\d+)\s+"((?:[^"\\]|\\.)*)"', re.M)
_ONCHIP_KEYWORD = re.compile(r"\b(__nram__|__wram__|__mlu_shared__)\b")
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


class _Source:
    """Preprocessed text plus the literal mask and the line-marker map."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.in_literal = self._literal_mask(text)
        self.markers: list[tuple[int, int, str]] = []  # (offset of next line, line number, file)
        for m in _LINE_MARKER.finditer(text):
            nl = text.find("\n", m.end())
            self.markers.append((nl + 1 if nl >= 0 else len(text), int(m.group(1)), m.group(2)))

    @staticmethod
    def _literal_mask(text: str) -> bytearray:
        mask = bytearray(len(text))
        i, n = 0, len(text)
        line_start = True
        while i < n:
            ch = text[i]
            if line_start and ch == "#":  # line markers / pragmas: skip the whole line
                j = text.find("\n", i)
                j = n if j < 0 else j
                for k in range(i, j):
                    mask[k] = 1
                i = j
                continue
            if ch in "\"'":
                if ch == "'" and i > 0 and (text[i - 1].isalnum()):
                    i += 1  # digit separator like 1'000
                    continue
                j = i + 1
                while j < n and text[j] != ch and text[j] != "\n":
                    j += 2 if text[j] == "\\" else 1
                for k in range(i, min(j + 1, n)):
                    mask[k] = 1
                i = j + 1
                line_start = False
                continue
            line_start = ch == "\n" or (line_start and ch in " \t")
            i += 1
        return mask

    def location(self, pos: int) -> tuple[str, int]:
        lo, hi = 0, len(self.markers)
        while lo < hi:
            mid = (lo + hi) // 2
            if self.markers[mid][0] <= pos:
                lo = mid + 1
            else:
                hi = mid
        if lo == 0:
            return "<input>", self.text.count("\n", 0, pos) + 1
        start, line, file = self.markers[lo - 1]
        return file, line + self.text.count("\n", start, pos)


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


def _match_forward(text: str, pos: int, open_ch: str, close_ch: str) -> int:
    """Index just past the bracket closing the one at text[pos]."""
    depth = 0
    for i in range(pos, len(text)):
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
        call = f"{fn}({_c_string(name)}, {_c_string(file)}, {line}, {', '.join(cfg)}, {kernel_fn}"
        call += (", " + args if args.strip() else "") + ")"
        out.append(text[pos:start])
        out.append(call)
        pos = close
        search = close
        count += 1
    out.append(text[pos:])
    return "".join(out), count


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


def _translate_decl(stmt: str, space_kw: str, src_file: str, line: int, first_index: int) -> tuple[str, list[OnchipDecl]]:
    space = SPACE_CODES[space_kw]
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
        rec = (f"static const unsigned long long __bang_emu_onchip_{index}[2] "
               f'__attribute__((section("{ONCHIP_SECTION}"), used)) = {{{index}ull, {size}}};')
        alloc = f"::bang_emu::onchip_alloc({space}, {size}, {tag})"
        if init is None:
            value = f"*reinterpret_cast<{base}(*){dims}>({alloc})"
        else:
            value = (f"*[]() {{ {base} (*__p){dims} = reinterpret_cast<{base}(*){dims}>({alloc}); "
                     f"static const {base} __init{dims} = {init.strip()}; "
                     f"__builtin_memcpy(__p, &__init, sizeof(__init)); return __p; }}()")
        pieces.append(f"{rec} {store} thread_local {base} (&{name}){dims} = {value};")
        del n
    return " ".join(pieces) + newlines, decls


def _rewrite_onchip(src: _Source, text: str) -> tuple[str, list[OnchipDecl]]:
    # positions refer to `text`, which must be the untouched preprocessed source
    out, pos, decls = [], 0, []
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
        new, ds = _translate_decl(stmt, m.group(1), file, line, len(decls))
        decls.extend(ds)
        out.append(text[pos:start])
        out.append(new)
        pos = end + 1
    out.append(text[pos:])
    text = "".join(out)
    # keywords left over (casts, parameter types) mean nothing to g++
    src2 = _Source(text)
    return _ONCHIP_KEYWORD.sub(lambda m: m.group(0) if src2.in_literal[m.start()] else "", text), decls


def rewrite(preprocessed: str, default_device: str | None = None) -> RewriteResult:
    """Rewrite one preprocessed translation unit."""
    src = _Source(preprocessed)
    text, decls = _rewrite_onchip(src, preprocessed)
    src2 = _Source(text)
    text, launches = _rewrite_launches(src2, text)
    if default_device:
        text += f"\nstatic int __bang_emu_default_device = (::bang_emu::set_default_device({_c_string(default_device)}), 0);\n"
    return RewriteResult(text=text, onchip=decls, launches=launches)
