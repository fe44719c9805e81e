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
does for every instrumented store. The address is computed modulo 2^32 as the engine does not (an access whose
offset carries it past 4 GiB traps anyway, so its count does not matter). Bulk memory instructions
(memory.copy/fill/init) are refused: device code is compiled without them (build.py), and a count that silently
skipped them would undercharge.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from bang_emu.wasm import binary as wb
from bang_emu.wasm import layout

SPACES = ("gdram", "nram", "wram", "sram", "other")
STORE_HOOK = ("bang", "scalar_store_gdram")  # (address i32, bytes i32) -> (): the host marks the bytes written
# export name -> (is a store, space)
COUNTER_EXPORTS = {f"bang_count_{kind}_{space}": (kind == "store", space)
                   for kind in ("load", "store") for space in SPACES}
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


def _instrument(body: bytes, n_params: int, loads: dict[str, int] | None, stores: dict[str, int] | None,
                func_index: int, hook: int | None) -> tuple[bytes, int, int]:
    """`body` with its loads and stores counted (`loads`/`stores`: the counters by space; None: not counted, a
    store only tested for the GDRAM hook)."""
    groups, start = wb.function_body(body)
    base = n_params + sum(count for count, _ in groups)
    addr, ea = base, base + 1
    value_local = {wb.I32: base + 2, wb.I64: base + 3, wb.F32: base + 4, wb.F64: base + 5}
    out = bytearray(wb.u_leb(len(groups) + len(_SCRATCH)))
    for count, t in (*groups, *_SCRATCH):
        out += wb.u_leb(count) + bytes([t])
    r = wb.Reader(body, start)
    n_loads = n_stores = 0
    prev = start
    for op, at in wb.instructions(r):
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


def count_pass(wasm: bytes, uncounted: Collection[str] = ()) -> CountPassResult:
    """The module `wasm` with every load and store counted into exported i64 globals (COUNTER_EXPORTS), except in
    the functions named `uncounted` (build.library_math: libm and the compiler's helpers, which the native replay
    runs uninstrumented -- glibc, libgcc -- so they cost nothing there either); their scalar GDRAM stores still
    call the store hook, so every byte a kernel writes is marked whoever's code wrote it."""
    module = wb.Module.parse(wasm)
    names = wb.function_names(module)
    taken = {e.name for e in module.exports()} | {i.name for i in module.imports()}
    for name in COUNTER_EXPORTS:
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
    loads = {space: index[f"bang_count_load_{space}"] for space in SPACES}
    stores = {space: index[f"bang_count_store_{space}"] for space in SPACES}

    types = module.types()
    bodies = []
    total_loads = total_stores = 0
    for k, (type_index, body) in enumerate(zip(module.function_types(), module.code_bodies(), strict=True)):
        counted = names.get(n_imported_funcs + k) not in uncounted
        new, n_loads, n_stores = _instrument(body, len(types[type_index].params), loads if counted else None,
                                             stores if counted else None, n_imported_funcs + k, hook)
        bodies.append(wb.u_leb(len(new)) + new)
        total_loads += n_loads
        total_stores += n_stores
    module.set_section(wb.CODE, wb.vec(bodies))

    zero = b"\x42\x00\x0B"  # i64.const 0; end
    global_entries = [bytes([t, mut]) + init for t, mut, init in own_globals]
    global_entries += [bytes([wb.I64, 1]) + zero for _ in COUNTER_EXPORTS]
    module.set_section(wb.GLOBAL, wb.vec(global_entries))
    export_entries = [wb.name_bytes(e.name) + bytes([e.kind]) + wb.u_leb(e.index) for e in module.exports()]
    export_entries += [wb.name_bytes(name) + bytes([wb.KIND_GLOBAL]) + wb.u_leb(index[name])
                       for name in COUNTER_EXPORTS]
    module.set_section(wb.EXPORT, wb.vec(export_entries))
    return CountPassResult(module.to_bytes(), total_loads, total_stores)
