"""Standalone lab programs (a folder of `NN_*.mlu`, each with its own main()): build each unchanged, run each.

`python -m bang_harness build-programs`: every top-level `*.mlu` of /submission -> /build/programs/<stem> with
cncc-emu and the lab's own flags; /build/programs.json `{stem: {ok, log_tail}}`.
`python -m bang_harness run-programs`: each built program runs once with /io/outputs/<stem>/ as its trace file
(`trace.jsonl`) and capture folder (runtime/capture.cpp). Its records are signed with a key of its own,
HMAC-SHA256(run key, "program:" + stem) (protocol.program_key), so no program's records verify in another's
trace. /io/outputs/<stem>/run.json holds what the harness saw (exit status, stdout tail): for display only.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from .paths import HarnessPaths
from .protocol import KEY_FD_ENV, ExitCode, program_key
from .run import JobError, key_pipe, make_undumpable, take_trace_key

LAB_FLAGS = ["--bang-arch=compute_30", "-O3"]  # the lab's test.sh
LOG_TAIL_CHARS = 8000
PROGRAM_TIMEOUT_SECONDS = float(os.environ.get("BANG_GRADER_PROGRAM_TIMEOUT", "600"))
CAPTURE_SEGMENT_BYTES = 64 << 20
CAPTURE_MAX_BYTES = 512 << 20


def program_sources(submission: Path) -> list[Path]:
    return sorted(p for p in submission.glob("*.mlu") if p.is_file() and not p.is_symlink())


def build_programs(paths: HarnessPaths) -> int:
    from bang_emu import toolchain

    out_dir = paths.build / "programs"
    out_dir.mkdir(parents=True, exist_ok=True)
    report: dict[str, dict[str, object]] = {}
    for src in program_sources(paths.submission):
        proc = toolchain.compile_mlu(src, out_dir / src.stem, LAB_FLAGS)
        report[src.stem] = {"ok": proc.returncode == 0, "log_tail": (proc.stdout + proc.stderr)[-LOG_TAIL_CHARS:]}
    (paths.build / "programs.json").write_text(json.dumps(report, indent=1), encoding="utf-8")
    return ExitCode.OK


def run_programs(paths: HarnessPaths) -> int:
    try:
        master = take_trace_key(paths)
    except JobError:
        return ExitCode.JOB_UNREADABLE
    make_undumpable()
    paths.outputs.mkdir(parents=True, exist_ok=True)
    built = paths.build / "programs"
    for exe in sorted(built.iterdir()) if built.is_dir() else []:
        if exe.is_file() and os.access(exe, os.X_OK):
            _run_one(exe, paths.outputs / exe.name, master)
    return ExitCode.OK


def _run_one(exe: Path, out: Path, master: bytes | None) -> None:
    out.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("BANG_EMU_")}
    env.update(BANG_EMU_TRACE=str(out / "trace.jsonl"), BANG_EMU_CAPTURE_DIR=str(out), BANG_EMU_POISON="nan",
               BANG_EMU_CAPTURE_SEGMENT_BYTES=str(CAPTURE_SEGMENT_BYTES),
               BANG_EMU_CAPTURE_MAX_BYTES=str(CAPTURE_MAX_BYTES))
    fds: list[int] = []
    if master is not None:
        fds.append(key_pipe(program_key(master, exe.name)))
        env[KEY_FD_ENV] = str(fds[0])
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
