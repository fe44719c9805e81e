"""`python -m bang_harness replay`: the trusted replay of a grading run's device journals (DESIGN.md "Threat
model").

It runs in a sandbox of its own, started by the host after the run's processes are gone: no student host code
(Python, binding, the host half of a .mlu file) ever runs here. The host writes into /io the run's journals
(`journals/*.journal`), its own fresh inputs (`replay-inputs/<call>.<k>.bin`), `replay.json` and the key file.
Each journal is replayed by a child process of its own (its device buffers sit at the addresses the run had,
which another journal's would clash with), the runtime loaded first with the key, then the device module
(`/build/device/module.so`, built from the kernels alone). Per call the runtime writes `outputs/<call>.trace.jsonl`
(signed), `<call>.out.bin` and `<call>.replay.json`; a child that hangs is killed at its share of the time, and
its unfinished calls simply have no status, which the host reports.

`python -m bang_harness make-engine` makes the WebAssembly engine alone, in a sandbox of its own where nothing
else runs: the host keeps it by the module's hash and stages it into each later replay's /io (WASM_ENGINE), so a
module's engine is made once, not by every replay (wasm2c and gcc: most of a replay's CPU seconds).
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

from .paths import HarnessPaths
from .protocol import (
    DEVICE_MODULE,
    ENGINE_RECORD_SUFFIX,
    JOURNAL_SUFFIX,
    KEY_FD_ENV,
    REPLAY_INPUTS,
    REPLAY_JOURNALS,
    REPLAY_PROFILE,
    REPLAY_SECONDS_PER_CALL,
    WASM_ENGINE,
    WASM_MODULE,
    WASM_NOTE,
    WASM_SITES,
    ExitCode,
    replay_engine,
)
from .replay_forks import ReplayForks, ServerGone
from .replay_ops import OpPolicy, OpRunner
from .run import key_pipe, make_undumpable, take_trace_key
from .wasm_replay import NATIVE_ENV, replay_either, replay_journal
from .wasm_replay import make_engine as build_engine

REPLAY_JOB = "replay.json"  # {"device": name, "calls_per_journal": {journal name: calls}, "device_ops": policy}
SITES_FILE = "sites.json"
ENGINE_DIR = WASM_ENGINE.split("/", 1)[0]  # under /io: the WebAssembly module made native code here (engine.py)


def run_replay(paths: HarnessPaths, key: bytes | None = None, job_text: bytes | None = None,
               forks: ReplayForks | None = None) -> int:
    """The replay of `paths.io` (a sandbox's /io, or one replay's folder under it: replay_session.py, which
    hands in the replay's `key`, its verified job and its fork server); without them, both are read from /io, and
    the fork server is this process's own, forked before the key is read (replay_forks.py)."""
    if key is not None:
        return _run_replay(paths, key, job_text, forks)
    make_undumpable()  # before the fork: the server inherits it
    own = ReplayForks.start(replay_one)
    try:
        key = take_trace_key(paths)
        if key is None:
            print("bang_harness replay: no key file", file=sys.stderr)
            return ExitCode.JOB_UNREADABLE
        return _run_replay(paths, key, job_text, own)
    finally:
        if own is not None:
            own.close()


def _run_replay(paths: HarnessPaths, key: bytes, job_text: bytes | None, forks: ReplayForks | None) -> int:
    make_undumpable()
    job = json.loads(job_text if job_text is not None else (paths.io / REPLAY_JOB).read_bytes())
    module = paths.build / DEVICE_MODULE
    outputs = paths.outputs
    outputs.mkdir(parents=True, exist_ok=True)
    from bang_emu import device_module

    sites = paths.io / SITES_FILE
    sites.write_text(json.dumps(device_module.site_records(module)))
    env = {k: v for k, v in os.environ.items() if k != KEY_FD_ENV}
    env["BANG_GRADER_IO"] = str(paths.io)  # each journal's child replays this folder (HarnessPaths.from_env)
    env.update({"BANG_EMU_DEVICE": str(job.get("device") or "mlu370-x8"), "BANG_EMU_POISON": "nan"})
    profile: dict[str, object] = {}
    if replay_engine(os.environ) == "wasm":
        with _timed(profile, "engine"):
            staged = (paths.io / WASM_ENGINE).is_file() and (paths.build / WASM_MODULE).is_file()
            why = "" if staged else _make_engine(paths)
        profile["engine"] = "staged" if staged else "made" if not why else "native"
        if why:
            env[NATIVE_ENV] = why  # each journal's engine record says it (the host reports a native replay)
    failed = False
    children: list[dict[str, object]] = []
    for journal in sorted((paths.io / REPLAY_JOURNALS).glob(f"*{JOURNAL_SUFFIX}")):
        calls = int(job.get("calls_per_journal", {}).get(journal.name, 1))
        child: dict[str, object] = {"journal": journal.name, "calls": calls}
        with _timed(child, ""):
            status = _replay_child(journal, key, env, calls, forks, child)
        children.append(child)
        # A kernel's faults are the trace's and a signal is the kernels' doing (the calls it did not reach have
        # no status: the host says so); an exit status of its own is the harness failing. Whether the engine's
        # account of a call stands is the host's to decide (a second opinion, grader/orchestration/replay.py).
        if status is not None and status > 0:
            print(f"bang_harness replay: {journal.name}: the replay process exited with {status}", file=sys.stderr)
            failed = True
    profile["children"] = children
    (outputs / REPLAY_PROFILE).write_text(json.dumps(profile))
    return ExitCode.REPLAY_FAILED if failed else ExitCode.OK


class _timed:
    """Records a step's wall and CPU seconds (its children's, reaped: wasm2c, gcc, a journal's replay process)."""

    def __init__(self, into: dict[str, object], name: str) -> None:
        self.into, self.prefix = into, f"{name}_" if name else ""

    def __enter__(self) -> None:
        self.wall, self.cpu = time.monotonic(), _children_cpu()

    def __exit__(self, *exc: object) -> None:
        self.into[f"{self.prefix}wall_s"] = round(time.monotonic() - self.wall, 3)
        self.into[f"{self.prefix}cpu_s"] = round(_children_cpu() - self.cpu, 3)


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _replay_child(journal: Path, key: bytes, env: dict[str, str], calls: int, forks: ReplayForks | None = None,
                  profile: dict[str, object] | None = None) -> int | None:
    """One journal replayed by a child process of its own -- forked by the replay's fork server (replay_forks.py),
    else a fresh interpreter -- : its exit status, None when stopped after its time."""
    seconds = REPLAY_SECONDS_PER_CALL * max(1, calls)
    if forks is not None and forks.alive:
        try:
            status, cpu = forks.replay(journal, env, key, seconds)
        except ServerGone as exc:
            if exc.started:  # while its process ran: as a signal ending it (the kernels' doing, reported per call)
                print(f"bang_harness replay: {journal.name}: {exc} during its replay", file=sys.stderr)
                return -signal.SIGKILL
            print(f"bang_harness replay: {journal.name}: {exc}; replayed by a fresh interpreter", file=sys.stderr)
        else:
            if profile is not None:
                profile["forked_cpu_s"] = cpu  # a grandchild's: not in this process's RUSAGE_CHILDREN
            if status is None:
                print(f"bang_harness replay: {journal.name} stopped after its time", file=sys.stderr)
            return status
    fd = key_pipe(key)
    try:
        proc = subprocess.Popen([sys.executable, "-m", "bang_harness", "replay-one", str(journal)],
                                env={**env, KEY_FD_ENV: str(fd)}, pass_fds=(fd,))
    finally:
        os.close(fd)
    try:
        return proc.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        print(f"bang_harness replay: {journal.name} stopped after its time", file=sys.stderr)
        return None


def _make_engine(paths: HarnessPaths) -> str:
    """The WebAssembly engine for this replay, made here, on the trusted side (wasm_replay.make_engine): "" when it
    is ready, else why the journals are replayed natively (the build's note when the kernels did not build for
    it)."""
    return build_engine(paths.build / WASM_MODULE, paths.build / WASM_SITES, paths.io / ENGINE_DIR,
                        note=paths.build / WASM_NOTE)


def make_engine(paths: HarnessPaths) -> int:
    """`make-engine`: the engine alone, into /io/WASM_ENGINE, in a sandbox where nothing of the student's runs (the
    host keeps it by the module's hash). Its failure is said on stderr and left to the replays to meet again."""
    from bang_emu.wasm import engine

    if engine.LIBRARY != Path(WASM_ENGINE).name:
        raise RuntimeError(f"protocol.WASM_ENGINE ({WASM_ENGINE}) does not name engine.LIBRARY ({engine.LIBRARY})")
    why = _make_engine(paths)
    if why:
        print(f"bang_harness make-engine: {why}", file=sys.stderr)
        return ExitCode.REPLAY_FAILED
    return ExitCode.OK


def _engine_library(paths: HarnessPaths) -> Path:
    return paths.io / WASM_ENGINE


def _replay_wasm(library: ctypes.CDLL, paths: HarnessPaths, journal: Path, message: ctypes.Array) -> int:
    return replay_journal(library, _engine_library(paths), paths.build / WASM_SITES, journal, paths.io / REPLAY_INPUTS,
                          paths.outputs, message)


def replay_one(paths: HarnessPaths, journal: Path) -> int:
    """One journal, in this fresh process: the runtime takes the key from KEY_FD_ENV as it loads."""
    from bang_emu import toolchain

    library = ctypes.CDLL(str(toolchain.runtime_dir() / toolchain.LIB_NAME), mode=ctypes.RTLD_GLOBAL)
    offsets = [int(o) for o in json.loads((paths.io / SITES_FILE).read_text())]
    table = (ctypes.c_uint64 * max(1, len(offsets)))(*offsets)
    message = ctypes.create_string_buffer(2048)
    replay = library.bang_emu_replay
    replay.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t,
                       ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
    replay.restype = ctypes.c_int
    # torch operators the run journaled are run here by the replay itself (replay_ops.py)
    job = json.loads((paths.io / REPLAY_JOB).read_text())
    runner = OpRunner(library, OpPolicy.from_json(job.get("device_ops")))
    runner.install()
    record = paths.outputs / f"{journal.stem}{ENGINE_RECORD_SUFFIX}"

    def natively() -> int:
        return replay(str(journal).encode(), str(paths.build / DEVICE_MODULE).encode(), table, len(offsets),
                      str(paths.io / REPLAY_INPUTS).encode(), str(paths.outputs).encode(), message, len(message))

    status = replay_either(record, message, lambda: _replay_wasm(library, paths, journal, message), natively,
                           f"bang_harness replay: {journal.name}")
    if status != 0:
        print(f"bang_harness replay: {journal.name}: {message.value.decode('utf-8', 'replace')}", file=sys.stderr)
    return ExitCode.OK
