"""The WebAssembly binary format, read and written in Python (no dependency): LEB128, sections, the import,
export, type, function, global, data and code sections, and the instruction stream of a function body, as far as
the import check (imports.py) and the counter pass (counting.py) need them.

A module is kept as its list of sections (id, payload bytes); sections nobody edits are written back unchanged.
The instruction decoder knows the MVP opcodes, sign extension, the saturating truncations and bulk memory; any
other prefix (SIMD 0xFD, threads 0xFE) raises WasmError naming the opcode, so nothing is passed through unread.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

MAGIC = b"\0asm\x01\0\0\0"
# section ids
CUSTOM, TYPE, IMPORT, FUNCTION, TABLE, MEMORY, GLOBAL, EXPORT, START, ELEMENT, CODE, DATA, DATA_COUNT = (
    0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12)
TAG = 13
# the order known sections must appear in (custom sections may sit anywhere)
SECTION_ORDER = (TYPE, IMPORT, FUNCTION, TABLE, MEMORY, TAG, GLOBAL, EXPORT, START, ELEMENT, DATA_COUNT, CODE, DATA)
# external kinds (imports, exports)
KIND_FUNC, KIND_TABLE, KIND_MEMORY, KIND_GLOBAL, KIND_TAG = 0, 1, 2, 3, 4
KIND_NAMES = {KIND_FUNC: "function", KIND_TABLE: "table", KIND_MEMORY: "memory", KIND_GLOBAL: "global",
              KIND_TAG: "tag"}
# value types
I32, I64, F32, F64, V128, FUNCREF, EXTERNREF = 0x7F, 0x7E, 0x7D, 0x7C, 0x7B, 0x70, 0x6F
VALTYPE_NAMES = {I32: "i32", I64: "i64", F32: "f32", F64: "f64", V128: "v128", FUNCREF: "funcref",
                 EXTERNREF: "externref"}
END, ELSE, BLOCK, LOOP, IF = 0x0B, 0x05, 0x02, 0x03, 0x04
I32_CONST, I64_CONST = 0x41, 0x42

# memory instructions: opcode -> (name, value type stored/loaded, is a store)
LOADS = {0x28: ("i32.load", I32), 0x29: ("i64.load", I64), 0x2A: ("f32.load", F32), 0x2B: ("f64.load", F64),
         0x2C: ("i32.load8_s", I32), 0x2D: ("i32.load8_u", I32), 0x2E: ("i32.load16_s", I32),
         0x2F: ("i32.load16_u", I32), 0x30: ("i64.load8_s", I64), 0x31: ("i64.load8_u", I64),
         0x32: ("i64.load16_s", I64), 0x33: ("i64.load16_u", I64), 0x34: ("i64.load32_s", I64),
         0x35: ("i64.load32_u", I64)}
STORES = {0x36: ("i32.store", I32), 0x37: ("i64.store", I64), 0x38: ("f32.store", F32), 0x39: ("f64.store", F64),
          0x3A: ("i32.store8", I32), 0x3B: ("i32.store16", I32), 0x3C: ("i64.store8", I64),
          0x3D: ("i64.store16", I64), 0x3E: ("i64.store32", I64)}
# 0xFC sub-opcodes that read or write linear memory (bulk memory)
BULK_MEMORY = {8: "memory.init", 10: "memory.copy", 11: "memory.fill"}


class WasmError(Exception):
    """A malformed module, or one using something this reader does not know."""


# ------------------------------------------------------------------------------------------------ LEB128
def u_leb(value: int) -> bytes:
    if value < 0:
        raise ValueError("unsigned LEB128 of a negative number")
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def s_leb(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        done = (value == 0 and not byte & 0x40) or (value == -1 and byte & 0x40)
        out.append(byte if done else byte | 0x80)
        if done:
            return bytes(out)


class Reader:
    """A cursor over bytes with the format's primitive readers."""

    def __init__(self, data: bytes, pos: int = 0, end: int | None = None) -> None:
        self.data = data
        self.pos = pos
        self.end = len(data) if end is None else end

    def at_end(self) -> bool:
        return self.pos >= self.end

    def byte(self) -> int:
        if self.pos >= self.end:
            raise WasmError("unexpected end of data")
        b = self.data[self.pos]
        self.pos += 1
        return b

    def bytes(self, n: int) -> bytes:
        if self.pos + n > self.end:
            raise WasmError("unexpected end of data")
        b = self.data[self.pos:self.pos + n]
        self.pos += n
        return b

    def _leb(self, signed: bool) -> int:
        result = shift = 0
        while True:
            b = self.byte()
            result |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                return result - (1 << shift) if signed and b & 0x40 else result
            if shift > 70:
                raise WasmError("LEB128 too long")

    def u(self) -> int:
        return self._leb(False)

    def s(self) -> int:
        return self._leb(True)

    def name(self) -> str:
        raw = self.bytes(self.u())
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise WasmError(f"a name is not UTF-8: {raw!r}") from e

    def limits(self) -> tuple[int, int | None, int]:
        """(min, max or None, flags)."""
        flags = self.u()
        lo = self.u()
        hi = self.u() if flags & 1 else None
        return lo, hi, flags

    def const_expr(self) -> bytes:
        """A constant expression up to and including its `end` (global initialisers, data offsets)."""
        start = self.pos
        for op, _ in instructions(self):
            if op == END:
                return self.data[start:self.pos]
        raise WasmError("constant expression without end")


def vec(items: list[bytes]) -> bytes:
    return u_leb(len(items)) + b"".join(items)


def name_bytes(s: str) -> bytes:
    raw = s.encode("utf-8")
    return u_leb(len(raw)) + raw


# ------------------------------------------------------------------------------------------------ module
@dataclass
class Import:
    module: str
    name: str
    kind: int
    type_index: int = -1  # functions
    desc: tuple = ()  # memory/table limits, global (type, mutable)

    @property
    def qualified(self) -> str:
        return f"{self.module}.{self.name}"


@dataclass
class Export:
    name: str
    kind: int
    index: int


@dataclass
class FuncType:
    params: tuple[int, ...]
    results: tuple[int, ...]

    def __str__(self) -> str:
        show = lambda ts: ", ".join(VALTYPE_NAMES.get(t, hex(t)) for t in ts)  # noqa: E731
        return f"({show(self.params)}) -> ({show(self.results)})"


@dataclass
class Module:
    sections: list[tuple[int, bytes]] = field(default_factory=list)

    @classmethod
    def parse(cls, data: bytes) -> Module:
        if data[:8] != MAGIC:
            raise WasmError("not a WebAssembly 1.0 binary (bad magic or version)")
        r = Reader(data, 8)
        sections = []
        last = -1
        while not r.at_end():
            sid = r.byte()
            size = r.u()
            payload = r.bytes(size)
            if sid != CUSTOM:
                if sid not in SECTION_ORDER:
                    raise WasmError(f"unknown section id {sid}")
                order = SECTION_ORDER.index(sid)
                if order <= last:
                    raise WasmError(f"section {sid} out of order")
                last = order
            sections.append((sid, payload))
        return cls(sections)

    def to_bytes(self) -> bytes:
        return MAGIC + b"".join(bytes([sid]) + u_leb(len(p)) + p for sid, p in self.sections)

    def section(self, sid: int) -> bytes | None:
        for s, payload in self.sections:
            if s == sid:
                return payload
        return None

    def set_section(self, sid: int, payload: bytes) -> None:
        """Replace section `sid`, or insert it where the order puts it."""
        for i, (s, _) in enumerate(self.sections):
            if s == sid:
                self.sections[i] = (sid, payload)
                return
        rank = SECTION_ORDER.index(sid)
        at = len(self.sections)
        for i, (s, _) in enumerate(self.sections):
            if s != CUSTOM and SECTION_ORDER.index(s) > rank:
                at = i
                break
        self.sections.insert(at, (sid, payload))

    def _vector(self, sid: int) -> tuple[Reader, int]:
        payload = self.section(sid)
        if payload is None:
            return Reader(b""), 0
        r = Reader(payload)
        return r, r.u()

    def types(self) -> list[FuncType]:
        r, n = self._vector(TYPE)
        out = []
        for _ in range(n):
            if r.byte() != 0x60:
                raise WasmError("a type that is not a function type")
            params = tuple(r.byte() for _ in range(r.u()))
            results = tuple(r.byte() for _ in range(r.u()))
            out.append(FuncType(params, results))
        return out

    def imports(self) -> list[Import]:
        r, n = self._vector(IMPORT)
        out = []
        for _ in range(n):
            module, name, kind = r.name(), r.name(), r.byte()
            if kind == KIND_FUNC:
                out.append(Import(module, name, kind, type_index=r.u()))
            elif kind == KIND_TABLE:
                out.append(Import(module, name, kind, desc=(r.byte(), *r.limits())))
            elif kind == KIND_MEMORY:
                out.append(Import(module, name, kind, desc=r.limits()))
            elif kind == KIND_GLOBAL:
                out.append(Import(module, name, kind, desc=(r.byte(), r.byte())))
            elif kind == KIND_TAG:
                out.append(Import(module, name, kind, desc=(r.byte(), r.u())))
            else:
                raise WasmError(f"import {module}.{name} of unknown kind {kind}")
        return out

    def exports(self) -> list[Export]:
        r, n = self._vector(EXPORT)
        return [Export(r.name(), r.byte(), r.u()) for _ in range(n)]

    def function_types(self) -> list[int]:
        """The type index of each function defined in the module (not the imported ones)."""
        r, n = self._vector(FUNCTION)
        return [r.u() for _ in range(n)]

    def globals(self) -> list[tuple[int, int, bytes]]:
        """The module's own globals: (value type, mutable, initialiser expression)."""
        r, n = self._vector(GLOBAL)
        return [(r.byte(), r.byte(), r.const_expr()) for _ in range(n)]

    def data_segments(self) -> list[tuple[int | None, int]]:
        """(start address of an active segment with a constant i32 offset, else None; length in bytes)."""
        r, n = self._vector(DATA)
        out = []
        for _ in range(n):
            flags = r.u()
            start: int | None = None
            if flags in (0, 2):
                if flags == 2:
                    r.u()  # memory index
                expr = Reader(r.const_expr())
                if expr.byte() == I32_CONST:
                    start = expr.s() & 0xFFFFFFFF
            elif flags != 1:
                raise WasmError(f"data segment with flags {flags}")
            size = r.u()
            r.bytes(size)
            out.append((start, size))
        return out

    def code_bodies(self) -> list[bytes]:
        r, n = self._vector(CODE)
        return [r.bytes(r.u()) for _ in range(n)]


# ------------------------------------------------------------------------------------------------ code
def _block_type(r: Reader) -> None:
    b = r.data[r.pos] if r.pos < r.end else -1
    if b == 0x40 or b in VALTYPE_NAMES:
        r.pos += 1
    else:
        r.s()  # a type index (s33)


def instructions(r: Reader) -> Iterator[tuple[int, int]]:
    """(opcode, offset of the opcode) for each instruction until the reader's end, immediates skipped. Prefixed
    opcodes are yielded as 0xFC00 | sub-opcode. Unknown opcodes raise WasmError."""
    while not r.at_end():
        at = r.pos
        op = r.byte()
        if op in (BLOCK, LOOP, IF):
            _block_type(r)
        elif op in (0x0C, 0x0D, 0x10, 0x12, 0x20, 0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0xD2):
            r.u()
        elif op == 0x0E:  # br_table
            for _ in range(r.u() + 1):
                r.u()
        elif op in (0x11, 0x13):  # call_indirect, return_call_indirect
            r.u()
            r.u()
        elif op == 0x1C:  # select with types
            for _ in range(r.u()):
                r.byte()
        elif 0x28 <= op <= 0x3E:  # memarg
            r.u()
            r.u()
        elif op in (0x3F, 0x40):  # memory.size, memory.grow
            r.u()
        elif op == I32_CONST or op == I64_CONST:
            r.s()
        elif op == 0x43:
            r.bytes(4)
        elif op == 0x44:
            r.bytes(8)
        elif op == 0xD0:  # ref.null
            r.byte()
        elif op == 0xFC:
            sub = r.u()
            if sub <= 7:
                pass
            elif sub == 8:  # memory.init data, mem
                r.u()
                r.u()
            elif sub in (9, 13, 15, 16, 17):
                r.u()
            elif sub in (10, 12, 14):
                r.u()
                r.u()
            elif sub == 11:
                r.u()
            else:
                raise WasmError(f"unknown instruction 0xFC {sub} at byte {at}")
            op = 0xFC00 | sub
        elif op in (0x00, 0x01, ELSE, END, 0x0F, 0x1A, 0x1B, 0xD1) or 0x45 <= op <= 0xC4:
            pass
        else:
            raise WasmError(f"instruction 0x{op:02X} at byte {at} is not supported (SIMD, threads and other "
                            "proposals are not enabled for device code)")
        yield op, at


def function_body(body: bytes) -> tuple[list[tuple[int, int]], int]:
    """A code entry's locals [(count, type)] and the offset where its instructions begin."""
    r = Reader(body)
    local_groups = [(r.u(), r.byte()) for _ in range(r.u())]
    return local_groups, r.pos


def function_names(module: Module) -> dict[int, str]:
    """The "name" custom section's function names (index -> name; wasm-ld writes them demangled), or {}."""
    for sid, payload in module.sections:
        if sid != CUSTOM:
            continue
        r = Reader(payload)
        if r.name() != "name":
            continue
        while not r.at_end():
            kind, size = r.byte(), r.u()
            end = r.pos + size
            if kind == 1:
                return {r.u(): r.name() for _ in range(r.u())}
            r.pos = end
    return {}
