"""The scalar counting pass: a rewrite of the linked module's binary so that every load and store of its code bumps
one of ten i64 counters -- loads and stores, each by the space its effective address falls in (GDRAM, NRAM, WRAM,
SRAM, other: the stack and the module's data; layout.space_bounds) -- the scalar work the cost model charges, each
space at its own cycles as the native emulator does.

The counters are wasm globals added here, after the kernel was compiled and linked: a global is not in linear
memory, so no store can reach it, and no code of the kernel can name it (a kernel that declares a global of the
same name only gets an import, which the import check refuses; an export of the same name is refused here). They
are exported (COUNTER_EXPORTS) for the host, which reads and resets them around each builtin and at the end.

Each access becomes, in front of the untouched original instruction (stack [.., addr] or [.., addr, value]):

    (store only: local.set $value)
    local.tee $addr  local.get $addr  i32.const offset  i32.add  local.tee $ea
    i32.const GDRAM_BASE  i32.ge_u
    if   counter[gdram] += 1      (a store also: local.get $ea  i32.const size  call $bang.scalar_store_gdram)
    else local.get $ea  i32.const SRAM_END  i32.ge_u
         if counter[other] += 1 else ... (sram, wram, nram, other by the layout's bounds) end
    end
    (store only: local.get $value)

with the scratch locals appended to each function. A scalar store into GDRAM also tells the host
(`bang.scalar_store_gdram(address, bytes)`, declared by the wasm bang.h and kept by its site keeper): the host marks
the bytes as written by a kernel (the replay's provenance, which the output check reads) as the native runtime
does for every instrumented store.

Where the kernel is (lines.py): one more i32 global, WHERE_EXPORT, holds the code site of the statement running, a
number the build's line table (the module's custom section lines.SECTION) turns into its file and line. The host
reads it when a builtin is called or the kernel traps or faults, to name the statement as the native replay's
symboliser names it from a return address. What must hold: when a marked instruction runs (MARKED: a call, a load
or store, one that can trap) whose site is known (the `sites` count_pass is given: instructions with a line of the
student's own files; library code keeps its caller's), `where` is that site. `_mark_plan` places the sets
(`i32.const site  global.set $where`) as few as that allows, since every access pays for one it runs: in straight-line
code only where the site changes (a call, a loop's head or a merge at an `end` forgets what `where` holds), and a
block, loop or if whose marked instructions all have one site and which calls nothing is marked once before it --
a loop over one statement (a scalar matmul's inner product) runs no set at all. The address is computed modulo 2^32 as the engine does not (an access whose
offset carries it past 4 GiB traps anyway, so its count does not matter). Bulk memory instructions
(memory.copy/fill/init) are refused: device code is compiled without them (build.py), and a count that silently
skipped them would undercharge.
"""

from __future__ import annotations

import bisect
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass

from bang_emu.wasm import binary as wb
from bang_emu.wasm import layout

SPACES = ("gdram", "nram", "wram", "sram", "other")
STORE_HOOK = ("bang", "scalar_store_gdram")  # (address i32, bytes i32) -> (): the host marks the bytes written
# export name -> (is a store, space)
COUNTER_EXPORTS = {f"bang_count_{kind}_{space}": (kind == "store", space)
                   for kind in ("load", "store") for space in SPACES}
WHERE_EXPORT = "bang_where"  # i32: the code site last marked (0: none yet; lines.SECTION names the others)
# instructions marked with their site before they run, besides loads and stores: calls (a builtin's checks, and
# library code, which keeps its caller's site) and those that can trap
_CALLS = (0x10, 0x11)  # call, call_indirect
_TRAPPING = {0x00, 0x6D, 0x6E, 0x6F, 0x70, 0x7F, 0x80, 0x81, 0x82, *range(0xA8, 0xAC), *range(0xAE, 0xB2)}
MARKED = frozenset({*_CALLS, *_TRAPPING, *wb.LOADS, *wb.STORES})
_SCRATCH = ((3, wb.I32), (1, wb.I64), (1, wb.F32), (1, wb.F64))  # addr, ea, i32 value; then i64, f32, f64 values


class CountPassError(Exception):
    """The module cannot be instrumented (a name taken, an access the pass cannot attribute)."""


@dataclass
class CountPassResult:
    wasm: bytes
    loads: int  # load instructions instrumented
    stores: int


def _bump(global_index: int) -> bytes:
    return (b"\x23" + wb.u_leb(global_index) + b"\x42\x01\x7C" + b"\x24" + wb.u_leb(global_index))


def _i32(value: int) -> bytes:
    return b"\x41" + wb.s_leb(value if value < 1 << 31 else value - (1 << 32))


def _set(global_index: int, value: int) -> bytes:
    return _i32(value) + b"\x24" + wb.u_leb(global_index)


def _classify(addr: int, ea: int, offset: int, counters: dict[str, int] | None, gdram_hook: bytes = b"") -> bytes:
    """Computes the effective address into $ea and bumps its space's counter (layout.space_bounds, top down: each
    test `ea >= bound` opens an if whose else holds the next); `gdram_hook` runs in the GDRAM branch. With no
    `counters`, only the GDRAM test and its hook."""
    if counters is None:
        code = b"\x22" + wb.u_leb(addr) + b"\x20" + wb.u_leb(addr) + (_i32(offset) + b"\x6A" if offset else b"")
        gdram = dict(layout.space_bounds())["gdram"]
        return code + b"\x22" + wb.u_leb(ea) + _i32(gdram) + b"\x4F" + b"\x04\x40" + gdram_hook + b"\x0B"
    code = b"\x22" + wb.u_leb(addr) + b"\x20" + wb.u_leb(addr)
    if offset:
        code += _i32(offset) + b"\x6A"  # i32.add
    code += b"\x22" + wb.u_leb(ea)
    bounds = layout.space_bounds()
    for k, (space, bound) in enumerate(bounds):
        if k:
            code += b"\x20" + wb.u_leb(ea)
        code += _i32(bound) + b"\x4F" + b"\x04\x40" + _bump(counters[space])  # i32.ge_u; if
        if space == "gdram":
            code += gdram_hook
        code += b"\x05"  # else
    code += _bump(counters["other"])
    return code + b"\x0B" * len(bounds)


def _store_bytes(op: int) -> int:
    name = wb.STORES[op][0]
    return {"8": 1, "16": 2, "32": 4}.get(name.rpartition("store")[2], 8 if name[1:3] == "64" else 4)


def _mark_plan(instructions: list[tuple[int, int]], sites: Mapping[int, int]) -> dict[int, int]:
    """Where to set `where` (an instruction's offset -> the site to set before it) so that each instruction of
    `sites` (offset -> site) runs with its site there. `known` is the site `where` surely holds at the point reached
    (None: not known). A region (block/loop/if to its end) that calls nothing and whose sites are one is set once
    before its opener (none at all if it has none) and not looked into: nothing in it changes `where`."""
    opener_end: dict[int, int] = {}
    summary: dict[int, tuple[set[int], bool]] = {}  # opener index -> (sites inside, calls anything)
    open_: list[tuple[int, set[int], list[bool]]] = [(-1, set(), [False])]
    for i, (op, at) in enumerate(instructions):
        if op in (wb.BLOCK, wb.LOOP, wb.IF):
            open_.append((i, set(), [False]))
            continue
        if op == wb.END and len(open_) > 1:
            start, inner, calls = open_.pop()
            opener_end[start], summary[start] = i, (inner, calls[0])
            open_[-1][1].update(inner)
            open_[-1][2][0] |= calls[0]
            continue
        if at in sites:
            open_[-1][1].add(sites[at])
        if op in _CALLS:
            open_[-1][2][0] = True
    plan: dict[int, int] = {}
    known: int | None = None
    entered: list[int | None] = []  # for each open region looked into: `known` at its opener
    i = 0
    while i < len(instructions):
        op, at = instructions[i]
        if op in (wb.BLOCK, wb.LOOP, wb.IF):
            inner, calls = summary.get(i, ({0, -1}, True))
            if not calls and len(inner) <= 1:
                if inner and known != (site := next(iter(inner))):
                    plan[at] = known = site
                i = opener_end[i] + 1
                continue
            entered.append(known)
            if op == wb.LOOP:
                known = None  # reached again from its own branches
        elif op == wb.ELSE and entered:
            known = entered[-1]
        elif op == wb.END and entered:
            entered.pop()
            known = None  # branches to it merge here
        else:
            site = sites.get(at)
            if site is not None and known != site:
                plan[at] = known = site
            if op in _CALLS:
                known = None  # the callee sets its own sites
        i += 1
    return plan


def _instrument(body: bytes, n_params: int, loads: dict[str, int] | None, stores: dict[str, int] | None,
                func_index: int, hook: int | None, where: int, marks: dict[int, int]) -> tuple[bytes, int, int]:
    """`body` with its loads and stores counted (`loads`/`stores`: the counters by space; None: not counted, a
    store only tested for the GDRAM hook) and the instructions at the offsets of `marks` (offset in `body` ->
    site) marked (global `where` set to the site)."""
    groups, start = wb.function_body(body)
    base = n_params + sum(count for count, _ in groups)
    addr, ea = base, base + 1
    value_local = {wb.I32: base + 2, wb.I64: base + 3, wb.F32: base + 4, wb.F64: base + 5}
    out = bytearray(wb.u_leb(len(groups) + len(_SCRATCH)))
    for count, t in (*groups, *_SCRATCH):
        out += wb.u_leb(count) + bytes([t])
    code = list(wb.instructions(wb.Reader(body, start)))
    plan = _mark_plan(code, marks) if marks else {}
    n_loads = n_stores = 0
    prev = start
    for op, at in code:
        if at in plan:
            out += body[prev:at] + _set(where, plan[at])
            prev = at
        if op in wb.LOADS or op in wb.STORES:
            memarg = wb.Reader(body, at + 1)
            memarg.u()
            offset = memarg.u()
            if op in wb.LOADS and loads is None:
                continue
            out += body[prev:at]
            prev = at
            if op in wb.STORES:
                local = value_local[wb.STORES[op][1]]
                call = b"" if hook is None else (b"\x20" + wb.u_leb(ea) + _i32(_store_bytes(op)) + b"\x10"
                                                 + wb.u_leb(hook))
                out += (b"\x21" + wb.u_leb(local) + _classify(addr, ea, offset, stores, call)
                        + b"\x20" + wb.u_leb(local))
                n_stores += 1
            else:
                out += _classify(addr, ea, offset, loads)
                n_loads += 1
        elif op >> 8 == 0xFC and op & 0xFF in wb.BULK_MEMORY:
            raise CountPassError(f"function {func_index} uses {wb.BULK_MEMORY[op & 0xFF]}, which the counter pass "
                                 "cannot attribute to a space (device code is built without bulk memory)")
    out += body[prev:]
    return bytes(out), n_loads, n_stores


def body_offsets(module: wb.Module) -> list[int]:
    """Where each function's body (its code entry after the size) starts in the code section's payload: the
    addresses of DWARF's line table for wasm, and of `sites`."""
    payload = module.section(wb.CODE) or b""
    r = wb.Reader(payload)
    starts = []
    for _ in range(r.u() if payload else 0):
        size = r.u()
        starts.append(r.pos)
        r.pos += size
    return starts


def marked_instructions(module: wb.Module) -> Iterator[int]:
    """The code-section offset of every instruction count_pass can mark (MARKED), in order."""
    starts = body_offsets(module)
    for start, body in zip(starts, module.code_bodies(), strict=True):
        _, first = wb.function_body(body)
        for op, at in wb.instructions(wb.Reader(body, first)):
            if op in MARKED:
                yield start + at


def count_pass(wasm: bytes, uncounted: Collection[str] = (), sites: Mapping[int, int] | None = None) -> CountPassResult:
    """The module `wasm` with every load and store counted into exported i64 globals (COUNTER_EXPORTS), except in
    the functions named `uncounted` (build.library_math: libm and the compiler's helpers, which the native replay
    runs uninstrumented -- glibc, libgcc -- so they cost nothing there either); their scalar GDRAM stores still
    call the store hook, so every byte a kernel writes is marked whoever's code wrote it. `sites` (an instruction's
    offset in the code section, as code_offsets gives it -> its site, a positive number; lines.py) are marked in
    the exported i32 global WHERE_EXPORT."""
    module = wb.Module.parse(wasm)
    names = wb.function_names(module)
    taken = {e.name for e in module.exports()} | {i.name for i in module.imports()}
    for name in (*COUNTER_EXPORTS, WHERE_EXPORT):
        if name in taken:
            raise CountPassError(f"the module already has an import or export named '{name}' (a counter's name)")
    imports = module.imports()
    funcs = [i for i in imports if i.kind == wb.KIND_FUNC]
    hook = next((k for k, i in enumerate(funcs) if (i.module, i.name) == STORE_HOOK), None)
    n_imported_globals = sum(1 for i in imports if i.kind == wb.KIND_GLOBAL)
    n_imported_funcs = sum(1 for i in imports if i.kind == wb.KIND_FUNC)
    own_globals = module.globals()
    first = n_imported_globals + len(own_globals)
    index = {name: first + k for k, name in enumerate(COUNTER_EXPORTS)}
    where = first + len(COUNTER_EXPORTS)
    loads = {space: index[f"bang_count_load_{space}"] for space in SPACES}
    stores = {space: index[f"bang_count_store_{space}"] for space in SPACES}

    types = module.types()
    bodies = []
    total_loads = total_stores = 0
    marks: dict[int, dict[int, int]] = {}
    starts = body_offsets(module)
    for offset, site in sorted((sites or {}).items()):
        k = bisect.bisect_right(starts, offset) - 1
        if k < 0 or site <= 0:
            raise CountPassError(f"a code site at {offset} outside every function, or numbered {site}")
        marks.setdefault(k, {})[offset - starts[k]] = site
    for k, (type_index, body) in enumerate(zip(module.function_types(), module.code_bodies(), strict=True)):
        counted = names.get(n_imported_funcs + k) not in uncounted
        new, n_loads, n_stores = _instrument(body, len(types[type_index].params), loads if counted else None,
                                             stores if counted else None, n_imported_funcs + k, hook, where,
                                             marks.get(k, {}))
        bodies.append(wb.u_leb(len(new)) + new)
        total_loads += n_loads
        total_stores += n_stores
    module.set_section(wb.CODE, wb.vec(bodies))

    zero = b"\x42\x00\x0B"  # i64.const 0; end
    global_entries = [bytes([t, mut]) + init for t, mut, init in own_globals]
    global_entries += [bytes([wb.I64, 1]) + zero for _ in COUNTER_EXPORTS]
    global_entries += [bytes([wb.I32, 1]) + b"\x41\x00\x0B"]  # where: i32.const 0; end
    module.set_section(wb.GLOBAL, wb.vec(global_entries))
    export_entries = [wb.name_bytes(e.name) + bytes([e.kind]) + wb.u_leb(e.index) for e in module.exports()]
    export_entries += [wb.name_bytes(name) + bytes([wb.KIND_GLOBAL]) + wb.u_leb(index[name])
                       for name in COUNTER_EXPORTS]
    export_entries += [wb.name_bytes(WHERE_EXPORT) + bytes([wb.KIND_GLOBAL]) + wb.u_leb(where)]
    module.set_section(wb.EXPORT, wb.vec(export_entries))
    return CountPassResult(module.to_bytes(), total_loads, total_stores)
