"""Struct kernel arguments: the journal's x86-64 layout, derived from clang, and the readers the wasm build appends.

The native journal records a launch's arguments as g++ laid them out on x86-64 (`ReplaySite::pack`: each argument's
bytes, a struct whole with its padding; pointers and long 8 bytes). The wasm invoker (include/bang.h) reads a
pointer, a number or an enum by its x86-64 size; a struct needs its x86-64 layout, which differs from wasm32's
wherever it holds a pointer or a long (torch_mlu's `struct AddressList { void *addresses[31]; }`: 248 bytes natively,
124 in wasm32). It is never guessed: clang lays out the same translation unit for x86_64-linux-gnu
(`-fdump-record-layouts`), and the Itanium C++ ABI that clang and g++ share fixes every offset.

1. layout pass (build.py runs it only when the unit's first compile stopped at bang.h's static_assert for a struct
   argument without a reader, NOT_DERIVED): the rewritten translation unit compiled `-fsyntax-only` for x86-64
   (the wasi headers' own size static_asserts fail there; only the dump is read). bang.h's invoker takes
   `sizeof(X86Probe<T>)` there for every struct argument T, so the dump names T (`struct X86Probe<struct
   AddressList>`) and lays it out, nested structs expanded. An array of structs is not expanded in the dump: for
   each, the text gets `sizeof(X86ElementProbe<N, element type>)` and the pass runs again (at most MAX_ROUNDS).
2. readers: for each struct, `bang_emu::X86Reader<T>` with the journal's size of T and a read() of each member by
   name at its x86-64 offset (bang.h's read_field: a pointer member mapped into linear memory, a long narrowed, an
   array element by element, a struct element through its own reader), and static_asserts that each member's x86-64
   size as bang.h computes it fits before the next member's offset, so a reading that would straddle two members
   does not compile.

Refused by name (RecordError; the build fails, the native replay stands): a struct clang cannot name (an anonymous
namespace's or a function's own), bit-fields, unions, base classes and virtual tables, unnamed members, a struct
the pass did not lay out.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

MAX_ROUNDS = 4  # layout passes: arrays of structs of arrays of structs ... this deep
X86_FLAGS = ["--target=x86_64-linux-gnu", "-std=c++17", "-fno-exceptions", "-fno-rtti", "-fsyntax-only", "-w",
             "-ferror-limit=0", "-nostdinc", "-nostdinc++", "-Xclang", "-fdump-record-layouts", "-x", "c++"]
# bang.h's X86Arg static_assert for a struct argument without a reader: build.py derives the readers when it fires
NOT_DERIVED = "this struct kernel argument's x86-64 layout (the journal's) was not derived by the wasm build"
SITE_MARK = "::bang_emu::launch_cfg"  # the rewriter's launch form: a text without it has no invoker, no argument

_PROBE = re.compile(r"^struct bang_emu::X86Probe<(?P<type>.*)>$")
_ELEMENT_PROBE = re.compile(r"^struct bang_emu::X86ElementProbe<(?P<n>\d+), (?P<type>.*)>$")
_LINE = re.compile(r"^\s*(?P<offset>\d+)(?P<bits>:\d+-\d+)? \|(?P<indent> +)(?P<text>.*?)\s*$")
_SIZE = re.compile(r"\[sizeof=(\d+),")
_FIELD = re.compile(r"^(?P<type>.*?)\s*\b(?P<name>[A-Za-z_]\w*)$")


class RecordError(Exception):
    """A struct kernel argument whose x86-64 layout the wasm build cannot derive or read; the message names it."""


@dataclass
class Member:
    depth: int
    offset: int
    type: str
    name: str
    bits: bool
    children: list[Member] = field(default_factory=list)


@dataclass
class Layout:
    name: str  # as clang prints it (`struct AddressList`)
    size: int
    members: list[Member]


def parse_dump(dump: str) -> dict[str, Layout]:
    """Every record of a -fdump-record-layouts output, by its header line (`struct X86Probe<struct AddressList>`),
    members as a tree (a nested struct's members under it)."""
    out: dict[str, Layout] = {}
    for block in dump.split("*** Dumping AST Record Layout")[1:]:
        lines = [line for line in block.splitlines() if line.strip()]
        if not lines:
            continue
        head = _LINE.match(lines[0])
        size = _SIZE.search(block)
        if not head or not size:
            continue
        root: list[Member] = []
        stack: list[Member] = []
        for line in lines[1:]:
            m = _LINE.match(line)
            if not m:
                continue
            depth = (len(m.group("indent")) - 1) // 2
            text = m.group("text")
            f = _FIELD.match(text)
            member = Member(depth, int(m.group("offset")), f.group("type") if f else text, f.group("name") if f
                            else "", bool(m.group("bits")))
            if text.startswith("(") or text.endswith(")"):  # (base), (vtable pointer), an unnamed member's type
                member.name = ""
                member.type = text
            while stack and stack[-1].depth >= depth:
                stack.pop()
            (stack[-1].children if stack else root).append(member)
            stack.append(member)
        out[head.group("text")] = Layout(head.group("text"), int(size.group(1)), root)
    return out


def _refusal(what: str, member: Member, why: str) -> RecordError:
    return RecordError(f"the struct kernel argument {what}: member {member.type} {member.name or '(unnamed)'} at "
                       f"x86-64 offset {member.offset}: {why}; the wasm replay cannot read its journal bytes")


@dataclass
class Leaf:
    path: str  # `.addresses`, `.inner.p`
    offset: int
    array: bool


def _leaves(what: str, members: list[Member], prefix: str) -> list[Leaf]:
    out: list[Leaf] = []
    for m in members:
        if m.bits:
            raise _refusal(what, m, "a bit-field (its bits are not at a byte offset)")
        if not m.name:
            raise _refusal(what, m, "a base class, a virtual table or an unnamed member")
        if m.type.startswith("union ") or m.type.startswith("union"):
            raise _refusal(what, m, "a union (which member holds a pointer is not known)")
        if m.children:
            out += _leaves(what, m.children, f"{prefix}.{m.name}")
        else:
            out.append(Leaf(f"{prefix}.{m.name}", m.offset, "[" in m.type))
    return out


def _type_name(printed: str) -> str:
    """clang's printed name as C++ source (`struct ns::Foo<int>`), or RecordError if it names no type there."""
    if "(anonymous" in printed or "(unnamed" in printed or "(lambda" in printed:
        raise RecordError(f"the struct kernel argument {printed}: it has no name the generated reader could use "
                          "(an anonymous namespace's, a function's own or unnamed); the wasm replay cannot read it")
    return printed


def _element_type(owner: str, path: str) -> str:
    return (f"std::remove_cv_t<std::remove_all_extents_t<std::remove_reference_t<decltype(std::declval<{owner} &>()"
            f"{path})>>>")


@dataclass
class _Record:
    type: str  # C++ spelling
    what: str  # for messages
    layout: Layout
    leaves: list[Leaf]


def _x86_pass(text: str, stem: Path, round_: int) -> dict[str, Layout]:
    src = stem.with_name(f"{stem.name}.x86-layout-{round_}.ii")
    src.write_text(text)
    proc = subprocess.run(["clang-19", *X86_FLAGS, str(src)], capture_output=True, text=True)
    return parse_dump(proc.stdout)


def readers(text: str, stem: Path) -> str:
    """The X86Reader specialisations for every struct argument of the rewritten translation unit `text` (appended
    to it by build.py), "" when it has none; RecordError for a struct whose layout cannot be derived or read. The
    layout passes' sources are written beside `stem` (`<stem>.x86-layout-<round>.ii`)."""
    if SITE_MARK not in text:
        return ""
    layouts = _x86_pass(text, stem, 0)
    records: dict[str, _Record] = {}  # by clang's printed name: one reader per type
    pending: list[_Record] = []
    for header, lay in layouts.items():
        m = _PROBE.match(header)
        if m and m.group("type") not in records:
            inner = lay.members[0] if len(lay.members) == 1 else None
            if inner is None:
                raise RecordError(f"internal: the layout of {header} is not one member")
            rec = _Record(_type_name(m.group("type")), m.group("type"), lay, [])
            rec.leaves = _leaves(rec.what, inner.children, "")
            records[m.group("type")] = rec
            pending.append(rec)
    probes: list[tuple[_Record, Leaf]] = []
    for round_ in range(1, MAX_ROUNDS + 1):
        # arrays of structs: their elements' layouts, asked for by number (the types are spelled via the owner)
        asks = [(rec, leaf) for rec in pending for leaf in rec.leaves if leaf.array]
        pending = []
        if not asks:
            break
        extra = []
        for rec, leaf in asks:
            n = len(probes)
            probes.append((rec, leaf))
            elem = _element_type(rec.type, leaf.path)
            extra.append(f"static_assert(sizeof(std::conditional_t<bang_emu::is_record_arg<{elem}>(), "
                         f"bang_emu::X86ElementProbe<{n}, {elem}>, char>) > 0, \"\");")
        text = text + "\n" + "\n".join(extra) + "\n"
        layouts = _x86_pass(text, stem, round_)
        for header, lay in layouts.items():
            m = _ELEMENT_PROBE.match(header)
            if not m or int(m.group("n")) >= len(probes) or m.group("type") in records:
                continue
            owner, leaf = probes[int(m.group("n"))]
            if len(lay.members) != 1:
                raise RecordError(f"internal: the layout of {header} is not one member")
            rec = _Record(_element_type(owner.type, leaf.path), m.group("type"), lay, [])
            rec.leaves = _leaves(rec.what, lay.members[0].children, "")
            records[m.group("type")] = rec
            pending.append(rec)
    else:
        if pending and any(leaf.array for rec in pending for leaf in rec.leaves):
            raise RecordError(f"the struct kernel argument {pending[0].what}: arrays of structs nested more than "
                              f"{MAX_ROUNDS} deep; the wasm replay cannot read it")
    # every class first (sizes only), then the reads, which need the element readers' sizes
    return ("".join(_reader_class(rec) for rec in records.values())
            + "".join(_reader_read(rec) for rec in records.values()))


def _reader_class(rec: _Record) -> str:
    return (f"\n/* the x86-64 layout of {rec.what} (clang -fdump-record-layouts, bang_emu/wasm/records.py) */\n"
            f"template <>\nstruct bang_emu::X86Reader<{rec.type}> {{\n"
            f"  static constexpr bool derived = true;\n  static constexpr size_t size = {rec.layout.size};\n"
            f"  static void read(const unsigned char *p, {rec.type} &o, int index);\n}};\n")


def _reader_read(rec: _Record) -> str:
    reads, checks = [], []
    ends = [leaf.offset for leaf in rec.leaves[1:]] + [rec.layout.size]
    for leaf, end in zip(rec.leaves, ends, strict=True):
        reads.append(f"  ::bang_emu::read_field(p + {leaf.offset}, o{leaf.path}, index);")
        checks.append(f"  static_assert({leaf.offset} + ::bang_emu::x86_size<decltype(o{leaf.path})>() <= {end}, "
                      f"\"{rec.what}{leaf.path}: its x86-64 size overruns the next member's offset\");")
    return (f"/* {rec.what} */\ninline void bang_emu::X86Reader<{rec.type}>::read(const unsigned char *p, {rec.type} &o, "
            f"int index) {{\n" + "\n".join(checks + reads) + "\n}\n")
