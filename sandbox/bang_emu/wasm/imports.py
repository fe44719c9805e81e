"""The import allow-list of a device module: its only imports may be the linear memory (`env.memory`) and the host's
`bang.*` functions that the wasm flavour of bang.h declares, each with the signature the header gives it. Anything
else -- a WASI call (`wasi_snapshot_preview1.fd_write`), an undefined C function turned import (`env.write`), a
global, a table, a second memory, a `bang.*` name the header does not have or with another signature -- is refused
with a message naming it.

The allowed names and signatures are not written here: build.py links a probe module that references every
BANG_IMPORT of the header and passes its imports in (one list: the header).
"""

from __future__ import annotations

import re
from pathlib import Path

from bang_emu.wasm import binary as wb

MEMORY_IMPORT = ("env", "memory")
HOST_MODULE = "bang"
# `BANG_IMPORT("name") <return type> <C name>(`
_DECLARED = re.compile(r'^\s*BANG_IMPORT\("([^"]+)"\)\s+[^;(]*?\b(\w+)\s*\(', re.M)


class ImportRefused(Exception):
    """The module imports something the host does not offer."""


def declared_imports(*headers: Path) -> dict[str, str]:
    """import name -> C function name, for every BANG_IMPORT declaration of the headers."""
    return {m.group(1): m.group(2) for header in headers for m in _DECLARED.finditer(header.read_text())}


def signatures(module: bytes) -> dict[str, wb.FuncType]:
    """The `bang.*` function imports of a module with their types (the probe's: the allow-list)."""
    mod = wb.Module.parse(module)
    types = mod.types()
    return {i.name: types[i.type_index] for i in mod.imports() if i.module == HOST_MODULE and i.kind == wb.KIND_FUNC}


def check_imports(module: bytes, allowed: dict[str, wb.FuncType]) -> list[str]:
    """The module's `bang.*` imports, sorted; ImportRefused naming the first import outside the allow-list."""
    mod = wb.Module.parse(module)
    types = mod.types()
    used, memories = [], 0
    for imp in mod.imports():
        kind = wb.KIND_NAMES.get(imp.kind, f"kind {imp.kind}")
        where = f"the device module imports the {kind} '{imp.qualified}'"
        if (imp.module, imp.name) == MEMORY_IMPORT and imp.kind == wb.KIND_MEMORY:
            memories += 1
            continue
        if imp.module != HOST_MODULE or imp.kind != wb.KIND_FUNC:
            raise ImportRefused(f"{where}: only env.memory and the bang.* builtins are offered to kernels (a call to "
                                "a function the device library does not have, such as WASI I/O, or a symbol left "
                                "undefined)")
        if imp.name not in allowed:
            raise ImportRefused(f"{where}: not a builtin the host provides (bang.h declares "
                                f"{len(allowed)}: {', '.join(sorted(allowed))})")
        if types[imp.type_index] != allowed[imp.name]:
            raise ImportRefused(f"{where} with the signature {types[imp.type_index]}; the host's is "
                                f"{allowed[imp.name]}")
        used.append(imp.name)
    if memories != 1:
        raise ImportRefused(f"the device module imports {memories} memories named env.memory; it must import exactly "
                            "one (the host owns the linear memory)")
    if mod.section(wb.MEMORY):
        raise ImportRefused("the device module defines a memory of its own; it must use the imported one")
    return sorted(used)

