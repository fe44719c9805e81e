"""The builtins of the wasm replay, read off the native device header (include/bang_emu/device.h, the one source):
every BANG builtin it declares (a function named `__...` at global scope, declared without a body) becomes

- in the wasm flavour of bang.h (build.py writes `bang_builtins.h` from wasm_header()): an import of module `bang`
  named by its signature, `__bang_add(float*,const float*,const float*,int)`, and an inline function of the
  native name and parameters that calls it (pointers pass as 32-bit offsets, `half`/`bfloat16_t` as their bits,
  64-bit integers as i64);
- in the runtime (toolchain.py writes `wasm_api_gen.h` from cpp_header(), included by runtime/wasm_host.cpp): the
  host function wasm2c's C calls for that import (`Z_bangZ_` + wasm2c's mangling of the name), which charges the
  module's scalar counts, turns each offset into this process's address inside the kernels' memory and calls the
  runtime's own builtin of that exact signature -- the one a native kernel calls, with its operand checks and its
  cost.

So a builtin is covered in wasm the moment it is declared natively; what cannot pass this way (a parameter of
another type: a vector register, a pointer to pointer) is left out and named by unsupported(), and device code
that calls it fails the wasm build by name. Loaded by path by toolchain.py: standard library only.
"""

from __future__ import annotations

import functools
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

INCLUDE = Path(__file__).resolve().parents[1] / "include"
DEVICE_H = INCLUDE / "bang_emu" / "device.h"
PREPROCESS = ["g++", "-std=c++17", "-E", "-x", "c++", "-D__BANG__", "-D__BANG_ARCH__=372", f"-I{INCLUDE}"]

_INT32 = {"int", "unsigned int", "unsigned", "short", "unsigned short", "char", "signed char", "unsigned char",
          "bool", "int8_t", "uint8_t", "int16_t", "uint16_t", "int32_t", "uint32_t", "mluMemcpyDirection_t",
          "bang_fusion_op_t"}
_INT64 = {"long", "unsigned long", "long long", "unsigned long long", "int64_t", "uint64_t", "size_t"}
_FLOATS = {"float": "float", "double": "double"}
_BITS = {"half", "bfloat16_t"}  # 16-bit classes: passed as their bits
_TYPE_WORDS = {"int", "char", "short", "long", "float", "double", "bool", "unsigned", "signed", "void"}
_TYPE_WORDS |= _INT32 | _INT64 | _BITS
_DECL = re.compile(r"^(?:extern \"C\" )?(?P<ret>[A-Za-z_][\w ]*?[\w*]) ?(?P<name>__[A-Za-z][\w]*) ?"
                   r"\((?P<params>[^()]*)\)$")


@dataclass(frozen=True)
class Param:
    native: str  # the native spelling, canonical ("const float*", "int", "half")
    kind: str  # "ptr", "i32", "i64", "f32", "f64", "bits"
    default: str = ""  # the declaration's default argument, kept by the wasm wrapper


@dataclass(frozen=True)
class Builtin:
    name: str
    ret: Param | None  # None: void
    params: tuple[Param, ...]

    @property
    def import_name(self) -> str:
        return f"{self.name}({','.join(p.native for p in self.params)})"


def _canonical(t: str) -> str:
    t = re.sub(r"\s+", " ", t.strip())
    t = re.sub(r"\s*\*\s*", "*", t)
    return t


def _param(text: str) -> Param | None:
    """One parameter's type (its name and any default dropped); None: a type the wasm replay cannot pass."""
    text, _, default = text.partition("=")
    text, default = text.strip(), default.strip()
    m = re.match(r"^(.*?)\b(\w+)$", text)
    if m and m.group(1).strip() and m.group(2) not in _TYPE_WORDS:
        text = m.group(1)
    t = _canonical(text)
    if t.endswith("*"):
        base = t.rstrip("*")
        if t.count("*") > 1 or base.replace("const ", "") not in (_TYPE_WORDS - {"unsigned", "signed"}):
            return None
        return Param(t, "ptr", default)
    bare = t.replace("const ", "")
    if bare in _INT32:
        return Param(bare, "i32", default)
    if bare in _INT64:
        return Param(bare, "i64", default)
    if bare in _FLOATS:
        return Param(bare, "f32" if bare == "float" else "f64", default)
    if bare in _BITS:
        return Param(bare, "bits", default)
    return None


def _device_h_text() -> str:
    """device.h preprocessed, only the lines that come from device.h itself (its includes' left out)."""
    out = subprocess.run([*PREPROCESS, str(DEVICE_H)], capture_output=True, text=True, check=True).stdout
    keep, lines = False, []
    for line in out.splitlines():
        marker = re.match(r'^# \d+ "([^"]+)"', line)
        if marker:
            keep = Path(marker.group(1)).resolve() == DEVICE_H
            continue
        if keep:
            lines.append(line)
    return "\n".join(lines)


def _top_level_statements(text: str) -> list[str]:
    """Statements at brace depth 0 (namespace bodies, inline bodies and class bodies skipped)."""
    statements, current, depth = [], [], 0
    for ch in text:
        if ch == "{":
            depth += 1
            current = []
        elif ch == "}":
            depth = max(0, depth - 1)
            current = []
        elif depth == 0:
            if ch == ";":
                statements.append(re.sub(r"\s+", " ", "".join(current)).strip())
                current = []
            else:
                current.append(ch)
    return statements


@functools.lru_cache(maxsize=1)
def declarations() -> tuple[tuple[Builtin, ...], tuple[str, ...]]:
    """(the builtins the wasm replay passes, the declarations it cannot: their text), in device.h's order, each
    signature once."""
    builtins, unsupported, seen = [], [], set()
    for statement in _top_level_statements(_device_h_text()):
        m = _DECL.match(statement)
        if not m or m.group("name").startswith("__builtin") or statement.startswith(("template", "typedef")):
            continue
        ret_text = m.group("ret").replace("inline ", "").replace("static ", "").strip()
        raw = [p for p in m.group("params").split(",") if p.strip() and p.strip() != "void"]
        params = [_param(p) for p in raw]
        ret = None if ret_text == "void" else _param(ret_text)
        if any(p is None for p in params) or (ret_text != "void" and (ret is None or ret.kind == "ptr")):
            unsupported.append(statement)
            continue
        b = Builtin(m.group("name"), ret, tuple(params))  # type: ignore[arg-type]
        if b.import_name not in seen:
            seen.add(b.import_name)
            builtins.append(b)
    return tuple(builtins), tuple(unsupported)


_INLINE_DEF = re.compile(r"^inline [\w ]+?\b(?P<name>__bang_\w+) ?\([^()]*\) ?\{", re.M)


@functools.lru_cache(maxsize=1)
def inline_definitions() -> tuple[str, ...]:
    """device.h's own top-level inline builtins, defined there in terms of other builtins (`__bang_float2int32` is
    `__bang_float2int32_tz`), each as its text: in the wasm header they follow the wrappers and call those."""
    text = _device_h_text()
    out = []
    for m in _INLINE_DEF.finditer(text):
        depth, end = 0, m.end() - 1
        for end in range(m.end() - 1, len(text)):
            depth += {"{": 1, "}": -1}.get(text[end], 0)
            if depth == 0:
                break
        out.append(re.sub(r"\s+", " ", text[m.start():end + 1]))
    return tuple(out)


def unsupported() -> tuple[str, ...]:
    return declarations()[1]


def mangle(name: str) -> str:
    """wasm2c 1.0.32's C name of an import `name` of module "bang" (engine.py checks it against wasm2c's header)."""
    return "Z_bangZ_" + "".join(ch if (ch.isascii() and (ch.isalnum() or ch == "_") and ch != "Z")
                                else f"Z{ord(ch):02X}" for ch in name)


_WASM_TYPE = {"ptr": "const void *", "i32": "int", "i64": "long long", "f32": "float", "f64": "double",
              "bits": "unsigned short"}
_HOST_TYPE = {"ptr": "uint32_t", "i32": "uint32_t", "i64": "uint64_t", "f32": "float", "f64": "double",
              "bits": "uint32_t"}


def _wasm_arg(p: Param, name: str) -> str:
    if p.kind == "ptr":
        return f"(const void *){name}"
    if p.kind == "bits":
        return f"__bang_wasm_bits({name})"
    return f"({_WASM_TYPE[p.kind]}){name}"


def _body(b: Builtin, call: str, bits: str, ret: str) -> str:
    """A wrapper's body: the call, its result returned through `bits` (a 16-bit class) or cast to `ret`."""
    if b.ret is None:
        return f"{call};"
    return f"return {bits}({call});" if b.ret.kind == "bits" else f"return ({ret}){call};"


def wasm_header() -> str:
    """The imports and the native-named wrappers, for the wasm flavour of bang.h (C++ device code)."""
    lines = ["/* Generated by bang_emu/wasm/api.py from include/bang_emu/device.h. Do not edit. */", "#pragma once"]
    for k, b in enumerate(declarations()[0]):
        wret = "void" if b.ret is None else _WASM_TYPE[b.ret.kind]
        wparams = ", ".join(_WASM_TYPE[p.kind] for p in b.params) or "void"
        lines.append(f'BANG_IMPORT("{b.import_name}") {wret} __bang_wasm_b{k}({wparams});')
        ret = "void" if b.ret is None else b.ret.native
        params = ", ".join(f"{p.native} a{i}" + (f" = {p.default}" if p.default else "")
                           for i, p in enumerate(b.params))
        call = f"__bang_wasm_b{k}({', '.join(_wasm_arg(p, f'a{i}') for i, p in enumerate(b.params))})"
        body = _body(b, call, f"__bang_wasm_from_bits<{ret}>", ret)
        lines.append(f"inline {ret} {b.name}({params}) {{ {body} }}")
    lines += ["/* device.h's inline builtins, as written there */", *inline_definitions()]
    return "\n".join(lines) + "\n"


def _native_arg(p: Param, name: str) -> str:
    if p.kind == "ptr":
        return f"reinterpret_cast<{p.native}>(bang_wasm_at({name}))"
    if p.kind == "bits":
        return f"bang_wasm_from_bits<{p.native}>({name})"
    return f"({p.native}){name}"


def cpp_header() -> str:
    """The runtime's host functions of every import (included by runtime/wasm_host.cpp, inside its helpers)."""
    lines = ["// Generated by bang_emu/wasm/api.py from include/bang_emu/device.h. Do not edit.", "#pragma once"]
    for b in declarations()[0]:
        hret = "void" if b.ret is None else _HOST_TYPE[b.ret.kind]
        params = "".join(f", {_HOST_TYPE[p.kind]} a{i}" for i, p in enumerate(b.params))
        call = f"::{b.name}({', '.join(_native_arg(p, f'a{i}') for i, p in enumerate(b.params))})"
        body = _body(b, call, "bang_wasm_to_bits", hret)
        lines.append(f'/* {b.import_name} */\nextern "C" BANG_WASM_EXPORT {hret} {mangle(b.import_name)}'
                     f"(void *{params}) {{ bang_wasm_charge(); {body} }}")
    return "\n".join(lines) + "\n"
