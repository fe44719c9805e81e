"""Launch sites: one name for a site, whichever compiler wrote it down, and the module's invokers exported under it.

A launch site is `bang_emu::ReplaySite<SiteTag<file hash, line, index>, F, D...>` on both sides (the rewriter's
launch form, read by the native bang_emu/device.h and by the wasm include/bang.h): the tag says where the `<<<>>>`
is, D the decayed argument types. The native journal records a site by g++'s `__PRETTY_FUNCTION__` of its key();
the wasm module has clang's instantiation of ReplaySite<...>::invoke, named (demangled) in its name section. Both
are reduced here to one site name, `bang_site:<hash>:<line>:<index>(<types>)`, with each type spelt by its meaning
on x86-64 (the journal's ABI): `long` is i64 whichever compiler wrote `long int` or `long long`, a pointer keeps
its pointee (`const f32*`). F, the lambda, is left out: it is the same source text on both sides and each compiler
spells it its own way.

export_sites() gives each invoker of a linked module an export of that name (and drops the export of
__wasm_call_ctors that only kept them alive); site_name() names a journal's launch record. Two invokers with one
name (types that differ natively but mean the same on x86-64) are refused.
"""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import BinaryIO

from bang_emu.wasm import binary as wb

PREFIX = "bang_site:"
KEEPER_EXPORT = "__wasm_call_ctors"  # exported by the link only to keep the invokers (build.LDFLAGS)
_LAUNCH = 8  # runtime/journal.h JournalKind::kLaunch

# one spelling per x86-64 meaning; keys are the words of a type (order-free), as g++ or clang prints them
_SCALARS = {
    frozenset({"bool"}): "bool", frozenset({"char"}): "char", frozenset({"signed", "char"}): "i8",
    frozenset({"unsigned", "char"}): "u8", frozenset({"short"}): "i16", frozenset({"short", "int"}): "i16",
    frozenset({"unsigned", "short"}): "u16", frozenset({"short", "unsigned", "int"}): "u16",
    frozenset({"int"}): "i32", frozenset({"unsigned", "int"}): "u32", frozenset({"unsigned"}): "u32",
    frozenset({"long"}): "i64", frozenset({"long", "int"}): "i64", frozenset({"unsigned", "long"}): "u64",
    frozenset({"long", "unsigned", "int"}): "u64", frozenset({"float"}): "f32", frozenset({"double"}): "f64",
    frozenset({"_Float16"}): "f16", frozenset({"half"}): "f16",
}
_LONG_LONG = re.compile(r"\blong\s+long\b")
_QUALIFIERS = {"const", "volatile", "struct", "class", "enum"}


class SiteError(Exception):
    """A site that cannot be named (a key in an unknown form) or two invokers with one name."""


def canonical_type(spelling: str) -> str:
    """`const float*` and `float const*` -> `const f32*`; `long int`, `long long`, `long` -> `i64`; a type not in
    the table (an enum, a class) keeps its name without qualifiers."""
    text = spelling.strip()
    stars = text.count("*")
    head = text.split("*", 1)[0] if stars else text
    words = _LONG_LONG.sub("long", head).replace("&", " ").split()
    const = "const" in words
    core = [w for w in words if w not in _QUALIFIERS]
    name = _SCALARS.get(frozenset(core), " ".join(core))
    return ("const " if const and stars else "") + name + "*" * stars


def _split_top(text: str) -> list[str]:
    """Split at commas outside <>, (), {} and []."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "<({[":
            depth += 1
        elif ch in ">)}]":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    tail = text[start:].strip()
    return parts + [tail] if tail else parts


def _name(file_hash: int, line: int, index: int, types: list[str]) -> str:
    return f"{PREFIX}{file_hash}:{line}:{index}({','.join(canonical_type(t) for t in types)})"


_NATIVE_KEY = re.compile(r"\[with Tag = bang_emu::SiteTag<(\d+)(?:ULL|ull)?, (-?\d+), (\d+)>; F = .*; "
                         r"D = \{(.*)\}\]$", re.S)


def site_name(key: str) -> str:
    """The site name of a native journal's launch key (g++'s __PRETTY_FUNCTION__ of ReplaySite<...>::key)."""
    m = _NATIVE_KEY.search(key)
    if not m:
        raise SiteError(f"not a launch-site key of the native device module: {key[:200]!r}")
    return _name(int(m.group(1)), int(m.group(2)), int(m.group(3)), _split_top(m.group(4)))


# x86-64 size and kind of each scalar site_name spells ('i'/'u' integral and its signedness, 'f' floating)
_SCALAR_FACTS = {"bool": (1, "u"), "char": (1, "i"), "i8": (1, "i"), "u8": (1, "u"), "i16": (2, "i"),
                 "u16": (2, "u"), "i32": (4, "i"), "u32": (4, "u"), "i64": (8, "i"), "u64": (8, "u"),
                 "f32": (4, "f"), "f64": (8, "f"), "f16": (2, "f")}


def arg_layout(key: str) -> str:
    """The arguments of a native journal's launch key as the runtime's wasm replay describes them for capture
    (runtime/capture.cpp note_packed_launch_args): per argument `<kind>,<bytes>,<pointee bytes>,<dtype>`, joined by
    ';' -- what device.h's describe_launch_arg makes natively: a pointer (p, 8 bytes, its pointee's size and f/i/u
    or '-'; void and pointers to anything but a scalar are raw bytes), an integer (i, its size, i or u), anything
    else (o; its size, 0 when the name alone does not say: an enum, a struct)."""
    m = _NATIVE_KEY.search(key)
    if not m:
        raise SiteError(f"not a launch-site key of the native device module: {key[:200]!r}")
    entries = []
    for spelling in _split_top(m.group(4)):
        name = canonical_type(spelling).removeprefix("const ")
        if name.endswith("*"):
            pointee = name[:-1]
            size, kind = _SCALAR_FACTS.get(pointee, (8 if pointee.endswith("*") else 1, "-"))
            entries.append(f"p,8,{size},{kind}")
        elif name in _SCALAR_FACTS:
            size, kind = _SCALAR_FACTS[name]
            entries.append(f"o,{size},0,-" if kind == "f" else f"i,{size},0,{kind}")
        else:
            entries.append("o,0,0,-")
    return ";".join(entries)


_WASM_INVOKER = re.compile(r"^bang_emu::ReplaySite<(.*)>::invoke\(unsigned char const\*, unsigned int\)$", re.S)
_WASM_TAG = re.compile(r"^bang_emu::SiteTag<(\d+)ull, (-?\d+), (\d+)>$")


def invoker_site(demangled: str) -> str | None:
    """The site name of a wasm invoker's (demangled) function name, None for any other function."""
    m = _WASM_INVOKER.match(demangled)
    if not m:
        return None
    args = _split_top(m.group(1))
    tag = _WASM_TAG.match(args[0]) if len(args) >= 2 else None
    if not tag:
        raise SiteError(f"an invoker with an unexpected name: {demangled[:200]!r}")
    return _name(int(tag.group(1)), int(tag.group(2)), int(tag.group(3)), args[2:])


def export_sites(wasm: bytes) -> tuple[bytes, dict[str, int]]:
    """The module with each site invoker exported under its site name and the keeper's export dropped; the sites
    (name -> function index)."""
    module = wb.Module.parse(wasm)
    sites: dict[str, int] = {}
    for index, name in sorted(wb.function_names(module).items()):
        site = invoker_site(name)
        if site is None:
            continue
        if site in sites:
            raise SiteError(f"two launch sites are both {site!r}: their argument types differ natively but not "
                            "on x86-64 (long and long long?); the replay could not tell them apart")
        sites[site] = index
    exports = [e for e in module.exports() if e.name != KEEPER_EXPORT]
    taken = [e.name for e in exports if e.name.startswith(PREFIX)]
    if taken:
        raise SiteError(f"the export name {taken[0]!r} is reserved for launch sites")
    entries = [wb.name_bytes(e.name) + bytes([e.kind]) + wb.u_leb(e.index) for e in exports]
    entries += [wb.name_bytes(name) + bytes([wb.KIND_FUNC]) + wb.u_leb(index) for name, index in sites.items()]
    module.set_section(wb.EXPORT, wb.vec(entries))
    return module.to_bytes(), sites


def launch_keys(journal: bytes) -> list[str]:
    """The site keys of a native journal's launch records (runtime/journal.h: "BEJ1", then records of u8 kind, u32
    length, payload; a launch's payload opens with its key as u32 length + bytes), in order, repeats kept; a
    malformed journal ends the list where it breaks (the replay reports it)."""
    return _launch_keys(io.BytesIO(journal))


def read_launch_keys(journal: Path) -> list[str]:
    """launch_keys of a journal file, reading only its launch records (the rest is skipped: a lab program's journal
    holds half a GiB of uploads)."""
    with open(journal, "rb") as stream:
        return _launch_keys(stream)


def _launch_keys(stream: BinaryIO) -> list[str]:
    keys: list[str] = []
    if stream.read(4) != b"BEJ1":
        return keys
    while len(head := stream.read(5)) == 5:
        kind, size = head[0], int.from_bytes(head[1:5], "little")
        if kind != _LAUNCH:
            stream.seek(size, io.SEEK_CUR)
            continue
        payload = stream.read(size)
        if len(payload) >= 4:
            n = int.from_bytes(payload[:4], "little")
            keys.append(payload[4:4 + n].decode(errors="replace"))
    return keys


def site_table(keys: list[str], site_names: tuple[str, ...]) -> list[tuple[str, int]]:
    """(journal key, index of its invoker among `site_names`) for each distinct key whose site the module has; a
    key without one is left out, so its launch fails the call's replay by name, as in the native replay."""
    table = []
    for key in dict.fromkeys(keys):
        try:
            name = site_name(key)
        except SiteError:
            continue
        if name in site_names:
            table.append((key, site_names.index(name)))
    return table
