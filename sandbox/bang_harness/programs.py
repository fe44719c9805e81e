"""Standalone lab programs (a folder of `NN_*.mlu`, each with its own main()): build each unchanged, run each.

`python -m bang_harness build-programs`: every top-level `*.mlu` of /submission -> /build/programs/<stem> with
cncc-emu and the lab's own flags; /build/programs.json `{stem: {ok, log_tail}}`.
`python -m bang_harness run-programs`: each built program runs once, no key anywhere near it, its device journal in
/io/outputs/<stem>/journal (BANG_EMU_JOURNAL, opened by the runtime before main()); /io/outputs/<stem>/run.json
holds what the harness saw (exit status or signal, stdout and stderr tails): the host believes it only to name a
crash or a timeout, which earns nothing either way.
`python -m bang_harness replay-programs` (a sandbox of its own; DESIGN.md "Threat model"): each journal replayed
against the program's device module (`<stem>.module.so`, its kernels alone, confined), the replay's trace signed
with HMAC-SHA256(replay key, "program:" + stem) (protocol.program_key, so no program's records verify in
another's trace) and its launches captured (runtime/capture.cpp) into /io/outputs/<stem>/: what the host reads.
Each launch of the graded kernel gets the host's twin inputs first (/io/twin.json, protocol.PROGRAM_TWIN_FILE), so
an answer the program's host code computed and uploaded is not the answer the host checks.
On the WebAssembly engine (the default, as the extension's replay: DESIGN.md "Confinement by construction") the
build also makes each program's kernels a WebAssembly module (`<stem>.module.wasm`; where it cannot, a note in its
log and in `<stem>.wasm-note.txt`) and the replay runs them on the engine (wasm_replay.py), capture and twin alike.
Each replay child first writes /io/outputs/<stem>.engine.json (protocol.ENGINE_RECORD_SUFFIX, as the extension's):
a program whose engine cannot be made or started, or whose launch sites the module lacks, is replayed natively and
its record says why (the host names it in the grading). An engine replay that dies is not replayed again here: the
host asks for a native second opinion of that program (BANG_EMU_REPLAY_ENGINE=native, the same journal and twin).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from .paths import HarnessPaths
from .protocol import (
    ENGINE_RECORD_SUFFIX,
    KEY_FD_ENV,
    PROGRAM_TWIN_FILE,
    PROGRAM_TWIN_MAX_BYTES,
    REPLAY_ENGINE_ENV,
    ExitCode,
    program_key,
    replay_engine,
)
from .replay import ENGINE_DIR
from .run import JobError, key_pipe, make_undumpable, take_trace_key
from .wasm_replay import NATIVE_ENV, engine_library, make_engine, replay_either, replay_journal

LAB_FLAGS = ["--bang-arch=compute_30", "-O3"]  # the lab's test.sh
LOG_TAIL_CHARS = 8000
PROGRAM_TIMEOUT_SECONDS = float(os.environ.get("BANG_GRADER_PROGRAM_TIMEOUT", "600"))
CAPTURE_SEGMENT_BYTES = 64 << 20
CAPTURE_MAX_BYTES = 512 << 20


def program_sources(submission: Path) -> list[Path]:
    return sorted(p for p in submission.glob("*.mlu") if p.is_file() and not p.is_symlink())


def build_programs(paths: HarnessPaths) -> int:
    from bang_emu import device_module, driver, toolchain

    from .build import build_wasm

    out_dir = paths.build / "programs"
    out_dir.mkdir(parents=True, exist_ok=True)
    report: dict[str, dict[str, object]] = {}
    for src in program_sources(paths.submission):
        proc = toolchain.compile_mlu(src, out_dir / src.stem, LAB_FLAGS)
        log = proc.stdout + proc.stderr
        ok = proc.returncode == 0
        if ok:  # its kernels again, for the trusted replay (DESIGN.md "Threat model")
            obj = out_dir / f"{src.stem}.device.o"
            proc = toolchain.compile_mlu(src, obj, ["--emu-device-module", "-c", *LAB_FLAGS])
            linked = device_module.link([obj], module_path(paths, src.stem)) if proc.returncode == 0 else None
            ok = linked is not None and linked.ok
            log += proc.stdout + proc.stderr + (linked.message if linked is not None else "")
        if ok and replay_engine(os.environ) == "wasm":  # and for the WebAssembly replay (the default)
            archs = [driver.VIRTUAL_ARCH[f.split("=", 1)[1]] for f in LAB_FLAGS if f.startswith("--bang-arch=")]
            log += "\nnote: " + build_wasm([src], [], wasm_path(paths, src.stem), wasm_sites_path(paths, src.stem),
                                           archs=archs, note=wasm_note_path(paths, src.stem)) + "\n"
        report[src.stem] = {"ok": ok, "log_tail": log[-LOG_TAIL_CHARS:]}
    (paths.build / "programs.json").write_text(json.dumps(report, indent=1), encoding="utf-8")
    return ExitCode.OK


def module_path(paths: HarnessPaths, stem: str) -> Path:
    return paths.build / "programs" / f"{stem}.module.so"


def wasm_path(paths: HarnessPaths, stem: str) -> Path:
    """The program's kernels for the WebAssembly replay (built with BANG_EMU_REPLAY_ENGINE=wasm only)."""
    return paths.build / "programs" / f"{stem}.module.wasm"


def wasm_sites_path(paths: HarnessPaths, stem: str) -> Path:
    return paths.build / "programs" / f"{stem}.wasm-sites.json"


def wasm_note_path(paths: HarnessPaths, stem: str) -> Path:
    """Why the program's kernels did not build for the WebAssembly replay (build_wasm), where they did not."""
    return paths.build / "programs" / f"{stem}.wasm-note.txt"


def engine_dir(paths: HarnessPaths, stem: str) -> Path:
    """Where the replay makes the program's engine (wasm_replay.make_engine), on the trusted side."""
    return paths.io / ENGINE_DIR / stem


def replay_programs(paths: HarnessPaths) -> int:
    """The programs' journals (/io/journals/<stem>.journal), each replayed against the program's device module in a
    child of its own, its trace signed with the program's key and its launches captured into /io/outputs/<stem>/."""
    try:
        master = take_trace_key(paths)
    except JobError:
        return ExitCode.JOB_UNREADABLE
    if master is None:
        return ExitCode.JOB_UNREADABLE
    make_undumpable()
    from bang_emu import device_module

    engine = replay_engine(os.environ)
    for journal in sorted((paths.io / "journals").glob("*.journal")):
        stem = journal.stem
        module = module_path(paths, stem)
        if not module.is_file():
            continue
        out = paths.outputs / stem
        out.mkdir(parents=True, exist_ok=True)
        (out / "sites.json").write_text(json.dumps(device_module.site_records(module)))
        why = ""
        if engine == "wasm":  # made here, on the trusted side; where it cannot be, the child's record says why
            why = make_engine(wasm_path(paths, stem), wasm_sites_path(paths, stem), engine_dir(paths, stem),
                              note=wasm_note_path(paths, stem))
        _replay_program_child(stem, out, program_key(master, stem), engine, why)
    return ExitCode.OK


def _replay_program_child(stem: str, out: Path, key: bytes, engine: str, native_why: str) -> int | None:
    """One program's journal replayed by a child of its own (replay_program) on `engine`, natively where
    `native_why` says why: its exit status, None when stopped after its time. A child that died, or ran out of
    time, leaves the host its record in replay.json (and its engine record says which engine it died on)."""
    env = _program_env(out, capture=True)
    env.pop(NATIVE_ENV, None)
    env[REPLAY_ENGINE_ENV] = engine
    if native_why:
        env[NATIVE_ENV] = native_why
    fd = key_pipe(key)
    env[KEY_FD_ENV] = str(fd)
    try:
        proc = subprocess.run([sys.executable, "-m", "bang_harness", "replay-program", stem], env=env,
                              pass_fds=(fd,), capture_output=True, timeout=PROGRAM_TIMEOUT_SECONDS,
                              stdin=subprocess.DEVNULL)
        for line in proc.stderr.splitlines():  # the child's own sayings (device code cannot write to stderr)
            if line.startswith(HARNESS_PREFIX):
                print(line[:LOG_TAIL_CHARS].decode("utf-8", "replace"), file=sys.stderr)
        if proc.returncode != 0:  # died (a signal: -N) before its own replay.json: the host names it
            (out / "replay.json").write_text(json.dumps({
                "returncode": proc.returncode, "emulator_errors": emulator_errors(proc.stderr)}),
                encoding="utf-8")
        return proc.returncode
    except subprocess.TimeoutExpired:
        (out / "replay.json").write_text(json.dumps({"timed_out": True}), encoding="utf-8")
        return None
    finally:
        os.close(fd)


def replay_program(paths: HarnessPaths, stem: str) -> int:
    """One program's journal, in this fresh process (the runtime takes the key as it loads)."""
    import ctypes

    from bang_emu import toolchain

    library = ctypes.CDLL(str(toolchain.runtime_dir() / toolchain.LIB_NAME), mode=ctypes.RTLD_GLOBAL)
    out = paths.outputs / stem
    offsets = [int(o) for o in json.loads((out / "sites.json").read_text())]
    table = (ctypes.c_uint64 * max(1, len(offsets)))(*offsets)
    twin = _twin_plan(paths, stem)
    if twin is not None:
        kernel, seed, operands = twin
        flat = (ctypes.c_int32 * (3 * len(operands)))(*(x for op in operands for x in op))
        library.bang_emu_program_twin.argtypes = [ctypes.c_char_p, ctypes.c_uint64, ctypes.POINTER(ctypes.c_int32),
                                                  ctypes.c_size_t]
        library.bang_emu_program_twin(kernel.encode(), seed, flat, len(operands))
    message = ctypes.create_string_buffer(2048)
    journal = paths.io / "journals" / f"{stem}.journal"

    def on_engine() -> int:
        return replay_journal(library, engine_library(engine_dir(paths, stem)), wasm_sites_path(paths, stem),
                              journal, out, out, message, every_site=True)

    def natively() -> int:
        replay = library.bang_emu_replay
        replay.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t,
                           ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
        return replay(str(journal).encode(), str(module_path(paths, stem)).encode(), table, len(offsets),
                      str(out).encode(), str(out).encode(), message, len(message))

    status = replay_either(paths.outputs / f"{stem}{ENGINE_RECORD_SUFFIX}", message, on_engine, natively,
                           f"bang_harness replay-programs: {stem}")
    (out / "replay.json").write_text(json.dumps({"status": status, "message": message.value.decode("utf-8", "replace")}),
                                     encoding="utf-8")
    return ExitCode.OK


def _twin_plan(paths: HarnessPaths, stem: str) -> tuple[str, int, list[tuple[int, int, int]]] | None:
    """The host's twin plan for this program (kernel base name, seed, operand triples); None without one."""
    try:
        with open(paths.io / PROGRAM_TWIN_FILE, "rb") as fh:
            plan = json.loads(fh.read(PROGRAM_TWIN_MAX_BYTES))
        seed = plan["seeds"][stem]
        operands = [(int(a), int(r), int(c)) for a, r, c in plan["operands"]]
        return str(plan["kernel"]), int(seed) & (2**64 - 1), operands
    except (OSError, ValueError, KeyError, TypeError):
        return None


# Kept from the sandbox's environment: where the image's prebuilt runtime is, and the host's device.
KEPT_EMU_ENV = ("BANG_EMU_CACHE", "BANG_EMU_DEVICE")


def _program_env(out: Path, capture: bool) -> dict[str, str]:
    """`capture`: the launches' buffers copied out (the replay only: the host never reads the run's, and at the
    lab's shape they would add up to CAPTURE_MAX_BYTES beside the run's journal)."""
    env = {k: v for k, v in os.environ.items()
           if (not k.startswith("BANG_EMU_") or k in KEPT_EMU_ENV) and k != KEY_FD_ENV}
    env.update(BANG_EMU_TRACE=str(out / "trace.jsonl"), BANG_EMU_POISON="nan")
    if capture:
        env.update(BANG_EMU_CAPTURE_DIR=str(out), BANG_EMU_CAPTURE_SEGMENT_BYTES=str(CAPTURE_SEGMENT_BYTES),
                   BANG_EMU_CAPTURE_MAX_BYTES=str(CAPTURE_MAX_BYTES))
    return env


EMULATOR_ERROR_PREFIX = b"bang-emu: error: "
HARNESS_PREFIX = b"bang_harness replay-programs: "
EMULATOR_ERRORS_KEPT = 4


def emulator_errors(stderr: bytes) -> list[str]:
    """The emulator's own error lines of a replay child's stderr (no student host code runs there, and device
    code cannot write to it): what it reported before it died."""
    lines = [line[len(EMULATOR_ERROR_PREFIX):] for line in stderr.splitlines() if line.startswith(EMULATOR_ERROR_PREFIX)]
    return [line[:LOG_TAIL_CHARS // EMULATOR_ERRORS_KEPT].decode("utf-8", "replace")
            for line in lines[:EMULATOR_ERRORS_KEPT]]


def run_programs(paths: HarnessPaths) -> int:
    """Each built program once, journaled: it holds no key, and what it records decides nothing (the replay does)."""
    paths.outputs.mkdir(parents=True, exist_ok=True)
    built = paths.build / "programs"
    for exe in sorted(built.iterdir()) if built.is_dir() else []:
        if exe.is_file() and os.access(exe, os.X_OK) and not exe.name.endswith((".so", ".o")):
            _run_one(exe, paths.outputs / exe.name)
    return ExitCode.OK


def _run_one(exe: Path, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    env = _program_env(out, capture=False)
    env["BANG_EMU_JOURNAL"] = str(out / "journal")
    fds: list[int] = []
    status: dict[str, object] = {"exit_code": None, "timed_out": False}
    try:
        proc = subprocess.run([str(exe)], cwd=out, env=env, pass_fds=fds, capture_output=True,
                              timeout=PROGRAM_TIMEOUT_SECONDS, stdin=subprocess.DEVNULL)
        status.update(exit_code=proc.returncode, stdout_tail=proc.stdout[-LOG_TAIL_CHARS:].decode("utf-8", "replace"),
                      stderr_tail=proc.stderr[-LOG_TAIL_CHARS:].decode("utf-8", "replace"))
    except subprocess.TimeoutExpired:
        status["timed_out"] = True
    finally:
        for fd in fds:
            os.close(fd)
    (out / "run.json").write_text(json.dumps(status), encoding="utf-8")
