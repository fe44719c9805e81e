"""Which statement of the student's source a module's code is running (issue 37): natively the runtime names an
error's line by symbolising the return address of the builtin, or of the ASan callback, that found it (-g1,
addr2line); a wasm kernel has no native return addresses, so the build gives each place that can find an error a
number, a *code site*, and the module itself says which one it is at.

At build time the kernels are compiled with line tables (-gline-tables-only, which changes no instruction: the code
section is the same bytes with or without it) and linked keeping them; llvm-symbolizer reads, for every instruction
the counting pass can mark (counting.MARKED: calls, instructions that can trap, loads and stores), the innermost
frame of its inlining chain that lies in the student's own files -- the line the native symboliser names, whose
builtin calls are calls in the student's code (build.compile_unit says which files are the student's: those its
preprocessed text names that are neither the emulator's headers nor the system's). Each distinct (file, line) becomes
a site, numbered from 1 in code order; the counting pass makes the module's `where` global (counting.WHERE_EXPORT)
hold the site whenever a marked instruction runs, and the table of sites travels inside the module, in its custom
section SECTION, the debug sections dropped (strip_debug): the module grows by the table and the sets of `where`
only, and stays a function of the sources and their paths, as deterministic as before.

On the trusted side the engine's glue (engine.py) turns the section, read and checked by `table`, into the C tables
the replay's host reads (runtime/wasm_host.cpp): a builtin's error, a trap or a fault names the site's file and line
as the native replay names its statement.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from bang_emu.wasm import binary as wb

SECTION = "bang.lines"
SYMBOLIZER = "llvm-symbolizer-19"
COMPILE_FLAGS = ["-gline-tables-only"]
MAX_FILES = 4096
MAX_SITES = 1 << 20
MAX_NAME_BYTES = 4096
SYMBOLIZER_SECONDS = 300


class LinesError(Exception):
    """A line-table section that is malformed or too large (engine.py refuses the module's lines, not the module)."""


@dataclass(frozen=True)
class Lines:
    files: tuple[str, ...] = ()
    sites: tuple[tuple[int, int], ...] = ()  # site n (from 1) is sites[n - 1]: (index into files, line)
    marks: dict[int, int] = field(default_factory=dict)  # code-section offset of an instruction -> its site

    def section(self) -> bytes:
        """The custom section's payload (after its name): files as names, then sites as (file, line) LEB pairs."""
        return (wb.vec([wb.name_bytes(f) for f in self.files])
                + wb.vec([wb.u_leb(f) + wb.u_leb(line) for f, line in self.sites]))


def symbolize(debug_module: Path, offsets: Iterable[int], own_files: Collection[str]) -> Lines:
    """The sites of `offsets` (code-section offsets) in `debug_module`, a module linked with its line tables: each
    offset whose inlining chain has a frame in one of `own_files` (the student's, as the compiler named them) is
    marked with that innermost frame's (file, line). An offset without one (library code, whose own line tables
    name its sources, headers, the invokers) is left unmarked: the code keeps the site of its caller. Lines() when
    the symboliser is absent or fails: the module then has no sites, and the replay names the launch's line, as
    before this existed."""
    wanted = list(offsets)
    if not wanted:
        return Lines()
    try:
        proc = subprocess.run([SYMBOLIZER, f"--obj={debug_module}", "--inlines", "--output-style=JSON"],
                              input="".join(f"{o:#x}\n" for o in wanted), capture_output=True, text=True,
                              timeout=SYMBOLIZER_SECONDS)
    except (OSError, subprocess.SubprocessError):
        return Lines()
    answers = proc.stdout.splitlines()
    if proc.returncode != 0 or len(answers) != len(wanted):
        return Lines()
    files: dict[str, int] = {}
    sites: dict[tuple[int, int], int] = {}
    marks: dict[int, int] = {}
    for offset, answer in zip(wanted, answers, strict=True):
        try:
            frames = json.loads(answer).get("Symbol") or []
        except (ValueError, AttributeError):
            return Lines()
        frame = next((f for f in frames if isinstance(f, dict) and f.get("Line", 0) > 0 and f.get("FileName")
                      and f["FileName"] in own_files), None)
        if frame is None:
            continue
        name = str(frame["FileName"])
        if len(name.encode()) > MAX_NAME_BYTES or (name not in files and len(files) == MAX_FILES):
            continue
        where = (files.setdefault(name, len(files)), int(frame["Line"]))
        if where not in sites and len(sites) == MAX_SITES:
            continue
        marks[offset] = sites.setdefault(where, len(sites) + 1)
    return Lines(tuple(files), tuple(sorted(sites, key=sites.__getitem__)), marks)


def strip_debug(module: bytes) -> bytes:
    """The module without its DWARF sections (custom sections named .debug_*): what wasm-ld's --strip-debug
    leaves. The code section is untouched, so a line table's offsets still hold."""
    parsed = wb.Module.parse(module)
    parsed.sections = [(sid, payload) for sid, payload in parsed.sections
                       if not (sid == wb.CUSTOM and wb.Reader(payload).name().startswith(".debug_"))]
    return parsed.to_bytes()


def with_table(module: bytes, lines: Lines) -> bytes:
    """The module with the sites' table as its custom section SECTION (appended; replacing one there)."""
    parsed = wb.Module.parse(module)
    parsed.sections = [(sid, payload) for sid, payload in parsed.sections
                       if not (sid == wb.CUSTOM and wb.Reader(payload).name() == SECTION)]
    parsed.sections.append((wb.CUSTOM, wb.name_bytes(SECTION) + lines.section()))
    return parsed.to_bytes()


def table(module: bytes) -> tuple[tuple[str, ...], tuple[tuple[int, int], ...]]:
    """The files and sites of a module's SECTION, checked (every file index in range, names and counts within the
    limits, no bytes left over; a control character of a name, which would break the runtime's one-line messages,
    read as '?'); empty when the module has none; LinesError when it is malformed."""
    try:
        parsed = wb.Module.parse(module)
        for sid, payload in parsed.sections:
            if sid != wb.CUSTOM:
                continue
            r = wb.Reader(payload)
            if r.name() != SECTION:
                continue
            n_files = r.u()
            if n_files > MAX_FILES:
                raise LinesError(f"{n_files} files in the line table (at most {MAX_FILES})")
            files = []
            for _ in range(n_files):
                size = r.u()
                if size > MAX_NAME_BYTES:
                    raise LinesError(f"a file name of {size} bytes in the line table")
                name = r.bytes(size).decode("utf-8", errors="replace")
                files.append("".join("?" if ord(ch) < 0x20 or ord(ch) == 0x7F else ch for ch in name))
            n_sites = r.u()
            if n_sites > MAX_SITES:
                raise LinesError(f"{n_sites} sites in the line table (at most {MAX_SITES})")
            sites = tuple((r.u(), r.u()) for _ in range(n_sites))
            if not r.at_end():
                raise LinesError("bytes after the line table")
            if any(f >= n_files or not 0 < line < 1 << 31 for f, line in sites):
                raise LinesError("a site of the line table names no file or no line")
            return tuple(files), sites
    except wb.WasmError as e:
        raise LinesError(f"the line table is malformed: {e}") from e
    return (), ()
