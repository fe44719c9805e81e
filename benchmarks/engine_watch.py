"""What the WebAssembly replay engine did in a grading (issue 37's fidelity pass): every line of the trusted replay's
stderr that names the engine -- above all "replayed natively: why", which the harness prints when a journal is
replayed natively (the kernels did not build for the engine, or it could not be made or started; the grading's
message says so too).

Measurement only: it wraps the grader's call of the replay (`execute.replay_staged`) in this process and appends what
the replay sandbox printed to $BANG_ENGINE_WATCH (one JSON object a line: the grading's label, the replay's exit,
the lines). Two ways in:

    # a pytest corpus: every grading of the session is watched, labelled with its test's id
    BANG_ENGINE_WATCH=/tmp/watch.jsonl PYTHONPATH=benchmarks:$PYTHONPATH pytest -p engine_watch tests/...
    # one `grade` command line (replay_engines.py runs its gradings this way)
    BANG_ENGINE_WATCH=/tmp/watch.jsonl python benchmarks/engine_watch.py submit <folder> --out <dir> ...
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

WATCH_ENV = "BANG_ENGINE_WATCH"
FALLBACK = "replayed natively"  # bang_harness/replay.py: every way the engine's replay is given up on
label = os.environ.get("BANG_ENGINE_WATCH_LABEL", "")


def engine_lines(stderr: str) -> list[str]:
    """The replay's stderr lines about the engine (and every line of a replay child that failed)."""
    return [line for line in stderr.splitlines()
            if FALLBACK in line or "WebAssembly" in line or "wasm" in line.lower()
            or "replay process exited" in line]


def install(log: Path) -> None:
    """Wrap execute.replay_staged so every replay's engine lines are appended to `log`."""
    from grader.orchestration import execute

    original = execute.replay_staged
    if getattr(original, "_watched", False):
        return

    def watched(*args: Any, **kwargs: Any) -> Any:
        started = time.monotonic()
        replay = original(*args, **kwargs)
        outcome = replay.outcome
        stderr = (outcome.stderr_tail if outcome is not None else "") or ""
        io = Path((kwargs.get("staged") or args[0]).io)
        made = any(io.glob("wasm-engine/*.so"))  # bang_harness/replay.py ENGINE_DIR: the engine was made
        record = {"label": label, "seconds": round(time.monotonic() - started, 2),
                  "exit": None if outcome is None else outcome.exit_code,
                  "engine": os.environ.get("BANG_EMU_REPLAY_ENGINE", "native"), "engine_made": made,
                  "fallbacks": sum(FALLBACK in line for line in stderr.splitlines()),
                  "lines": engine_lines(stderr)}
        with log.open("a") as fh:
            fh.write(json.dumps(record) + "\n")
        return replay

    watched._watched = True  # type: ignore[attr-defined]
    execute.replay_staged = watched

    from grader.orchestration import job

    grade_submission = job.grade_submission

    def graded(*args: Any, **kwargs: Any) -> Any:
        started = time.monotonic()
        result = grade_submission(*args, **kwargs)
        doc = json.loads(result.to_json())
        with log.open("a") as fh:
            fh.write(json.dumps({"label": label, "lines": [], "result": result_summary(doc),
                                 "seconds": round(time.monotonic() - started, 2)}) + "\n")
        return result

    job.grade_submission = graded


def result_summary(doc: dict) -> dict:
    """What the comparison reads of a results.json: score, verdict, each stage's verdict and modelled time."""
    return {"score": doc.get("score"), "verdict": doc.get("verdict"),
            "stages": {s["name"]: [s.get("verdict"), (s.get("timing") or {}).get("median_us")]
                       for s in doc.get("stages", [])},
            "integrity": sorted(str(i) for i in (doc.get("integrity") or []))}


def pytest_configure(config: Any) -> None:
    if os.environ.get(WATCH_ENV):
        install(Path(os.environ[WATCH_ENV]))


def pytest_runtest_setup(item: Any) -> None:
    global label
    label = item.nodeid


def read(log: Path) -> list[dict]:
    """The records of a watch file ([] when there is none)."""
    if not log.is_file():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def main() -> None:
    if os.environ.get(WATCH_ENV):
        install(Path(os.environ[WATCH_ENV]))
    from grader.cli.app import main as grade

    sys.argv = ["grade", *sys.argv[1:]]
    grade()


if __name__ == "__main__":
    main()
