"""The replay on the WebAssembly engine (the default: protocol.replay_engine; DESIGN.md "Confinement by
construction"), shared by the replay of a grading run's journals (replay.py) and of the lab programs' (programs.py):
the engine made from a build's checked module on the trusted side, and one journal replayed on it.

Each caller keeps its own fallback: where the engine cannot be made, make_engine says why and leaves no library, so
the journals are replayed natively; where it cannot start, replay_journal answers -2 with the reason in
`message`, nothing replayed yet.
"""

from __future__ import annotations

import ctypes
import json
import os
from pathlib import Path

NO_MODULE = "no WebAssembly module was built"
NOT_STARTED = -2  # bang_emu_replay_wasm: the engine did not start, nothing was replayed (runtime/replay.cpp)


def engine_library(work: Path) -> Path:
    """Where make_engine leaves the engine's shared object."""
    from bang_emu.wasm import engine

    return work / engine.LIBRARY


def make_engine(wasm: Path, sites: Path, work: Path) -> str:
    """With a WebAssembly module `wasm` in the build (its launch sites' names in `sites`, build.py), its native code
    in `work`, made here from the checked module by wasm2c and gcc: "" when made, else why not (then the journals
    are replayed natively, and the caller says so)."""
    if not wasm.is_file():
        return NO_MODULE
    from bang_emu.wasm import engine

    try:
        names = [str(n) for n in json.loads(sites.read_text())]
        engine.compile_engine(wasm.read_bytes(), names, work)
    except (OSError, ValueError, engine.EngineError) as exc:
        return f"the WebAssembly engine could not be made from the kernels: {str(exc)[:1500]}"
    return ""


def replay_journal(library: ctypes.CDLL, engine: Path, sites: Path, journal: Path, inputs: Path, outputs: Path,
                   message: ctypes.Array, every_site: bool = False) -> int:
    """`journal` replayed by the runtime (`library`, loaded with the key) on the engine made by make_engine
    (`engine`), its launch sites' names in `sites`: bang_emu_replay_wasm's status (NOT_STARTED: nothing replayed,
    `message` says why). Each site's arguments are described to the runtime first, so capture and twin inputs
    see a launch as the native replay's invoker notes it (runtime/capture.cpp). `every_site`: a launch whose site
    the module lacks (the native device module may have it: a kernel the wasm build could not take) is
    NOT_STARTED too, for a caller whose journal has no calls to fail by name (a lab program's)."""
    from bang_emu.wasm import sites as site_names

    names = tuple(str(n) for n in json.loads(sites.read_text()))
    keys_launched = [k for k in dict.fromkeys(site_names.read_launch_keys(journal)) if k]
    table = site_names.site_table(keys_launched, names)
    if every_site and len(table) < len(keys_launched):
        lacking = next(k for k in keys_launched if k not in dict(table))
        message.value = f"the WebAssembly module has no launch site for {lacking[:300]}".encode()
        return NOT_STARTED
    layout = library.bang_emu_wasm_site_layout
    layout.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
    layout.restype = None
    for key, _ in table:
        layout(key.encode(), site_names.arg_layout(key).encode())
    keys = (ctypes.c_char_p * max(1, len(table)))(*[k.encode() for k, _ in table])
    index = (ctypes.c_uint64 * max(1, len(table)))(*[i for _, i in table])
    replay = library.bang_emu_replay_wasm
    replay.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(ctypes.c_uint64),
                       ctypes.c_size_t, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
    replay.restype = ctypes.c_int
    # /io is mounted noexec: the engine is loaded from a memory file of this process instead
    fd = os.memfd_create("bang-wasm-engine")
    os.write(fd, engine.read_bytes())
    return replay(str(journal).encode(), f"/proc/self/fd/{fd}".encode(), keys, index, len(table),
                  str(inputs).encode(), str(outputs).encode(), message, len(message))
