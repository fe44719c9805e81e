"""The replay on the WebAssembly engine (the default: protocol.replay_engine; DESIGN.md "Confinement by
construction"), shared by the replay of a grading run's journals (replay.py) and of the lab programs' (programs.py):
the engine made from a build's checked module on the trusted side, and one journal replayed on it.

Which engine replays a journal is one rule for both (replay_either): where the engine cannot be made, make_engine
says why and leaves no library; where it cannot start, replay_journal answers NOT_STARTED with the reason in
`message`, nothing replayed yet. Either way the journal is replayed natively, and its engine record (protocol.
ENGINE_RECORD_SUFFIX, written before any kernel runs) says so and why, for the host to name in the grading. An
engine replay that dies is not replayed again here: the host reads its record and decides (a native second
opinion, grader/orchestration: the disagreement policy).
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

from .protocol import WASM_NOTE_MAX_BYTES, replay_engine

NO_MODULE = "no WebAssembly module was built"
NOT_STARTED = -2  # bang_emu_replay_wasm: the engine did not start, nothing was replayed (runtime/replay.cpp)
NATIVE_ENV = "BANG_HARNESS_REPLAY_NATIVE"  # why a replay child replays natively (the engine could not be made)


def engine_library(work: Path) -> Path:
    """Where make_engine leaves the engine's shared object."""
    from bang_emu.wasm import engine

    return work / engine.LIBRARY


def make_engine(wasm: Path, sites: Path, work: Path, note: Path | None = None) -> str:
    """With a WebAssembly module `wasm` in the build (its launch sites' names in `sites`, build.py), its native code
    in `work`, made here from the checked module by wasm2c and gcc: "" when made, else why not (then the journals
    are replayed natively, and their engine records say why). Without a module, why is the build's `note` (why
    the kernels did not build for the engine), where it left one."""
    if not wasm.is_file():
        return _build_note(note) if note is not None else NO_MODULE
    from bang_emu.wasm import engine

    try:
        names = [str(n) for n in json.loads(sites.read_text())]
        engine.compile_engine(wasm.read_bytes(), names, work)
    except (OSError, ValueError, engine.EngineError) as exc:
        return f"the WebAssembly engine could not be made from the kernels: {str(exc)[:1500]}"
    return ""


def _build_note(note: Path) -> str:
    try:
        with note.open("rb") as fh:
            return fh.read(WASM_NOTE_MAX_BYTES).decode("utf-8", "replace") or NO_MODULE
    except OSError:
        return NO_MODULE


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


def write_engine_record(record: Path, engine: str, why: str) -> None:
    """Which engine replays a journal, and why natively where it does ({"engine": protocol.ENGINES, "why": str}):
    what the host reads (grader/orchestration/replay.engine_record)."""
    record.write_text(json.dumps({"engine": engine, "why": why[:WASM_NOTE_MAX_BYTES]}), encoding="utf-8")


def replay_either(record: Path, message: ctypes.Array, on_engine: Callable[[], int], natively: Callable[[], int],
                  say: str) -> int:
    """A journal replayed in this process on the engine the environment asks for (protocol.replay_engine), or
    natively where it asks for native, where the engine could not be made (NATIVE_ENV says why) or did not start
    (`on_engine` answered NOT_STARTED, `message` saying why): the replay's status. The engine `record` is written
    before any kernel runs, and again before a native one does: what the host reads is this process's. `say`
    heads the stderr line naming a native replay where the engine was asked for."""
    status, why = NOT_STARTED, os.environ.get(NATIVE_ENV, "")
    if replay_engine(os.environ) == "wasm" and not why:
        write_engine_record(record, "wasm", "")
        status = on_engine()
        if status == NOT_STARTED:  # the engine could not start: nothing replayed yet
            why = f"the WebAssembly engine did not start: {message.value.decode('utf-8', 'replace')}"
    if status == NOT_STARTED:
        write_engine_record(record, "native", why)
        if why:
            print(f"{say}: replayed natively: {why}", file=sys.stderr)
        status = natively()
    return status
