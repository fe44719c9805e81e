"""The replay's two engines side by side (issue 37): each submission graded twice in one run, its kernels replayed
natively (`BANG_EMU_REPLAY_ENGINE=native`) and on the WebAssembly engine (the default), and what the grade reads from
the replay compared -- score, verdict, every stage's verdict and modelled time, the integrity list -- with the wall
time of each grading. The fidelity pass the switch-over waits on: every line "same", times within 1%.

    .venv/bin/python benchmarks/replay_engines.py [--only SUBSTR ...] [--json out.json] [--sandbox docker] [--public]

Submissions: the reference kernels' stages, the bundled example, and the adversarial fixtures that attack the
native replay's confinement (their verdicts must not change, or change only towards catching them); with --public
also the public lab answers of tests/realcode (staged from their mirrors under /work/.mirror; absent ones are
listed as skipped). Every grading runs through engine_watch.py, so a journal the engine gave up on (the harness's
"replayed natively" line, which no grade shows) is a difference too: outcome "fallback".
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import engine_watch

REPO = Path(__file__).resolve().parents[1]
REFERENCE = REPO / "reference_kernels"
ADVERSARIAL = ["libm_modf_clock", "movnti_clock", "alloca_stack_lift", "va_start_clock", "stack_clash_array",
               "frame_probe_clock", "intrinsic_stream_clock", "memcpy_size_overflow", "vector_negative_count",
               "no_sanitize_kernel", "cached_clone", "decoy_kernel"]


def submissions() -> list[Submission]:
    stages = sorted(p for kind in ("sigmoid", "matmul") for p in (REFERENCE / kind).iterdir() if p.is_dir())
    paths = [*stages, REFERENCE / "example", *(REFERENCE / "adversarial" / name for name in ADVERSARIAL)]
    return [Submission(str(p.relative_to(REFERENCE)), p) for p in paths]


@dataclass(frozen=True)
class Submission:
    name: str
    path: Path
    options: tuple[str, ...] = ()  # more `grade submit` options (--assignment, --stages)


def public_answers(work: Path) -> list[Submission]:
    """The public lab answers of tests/realcode, staged into the handout layout under `work` (mirrors present)."""
    sys.path.insert(0, str(REPO))
    from tests.realcode import answers

    staged = []
    for answer in answers.ANSWERS:
        if not answers.available(answer):
            print(f"public/{answer.key}: skipped, no mirror of {answer.repo} at {answer.mirror}", flush=True)
            continue
        path = answers.stage(answer, work / "staged" / answer.key).path
        options = ("--assignment", answer.assignment, *(("--stages", answer.stages) if answer.stages else ()))
        staged.append(Submission(f"public/{answer.key}", path, options))
    return staged


def grade(submission: Submission, out: Path, engine: str, sandbox: str) -> tuple[dict | None, float, str, list]:
    env = {**os.environ, "BANG_EMU_REPLAY_ENGINE": engine}
    out.mkdir(parents=True, exist_ok=True)
    watch = out / "engine-watch.jsonl"
    env.update({engine_watch.WATCH_ENV: str(watch), "BANG_ENGINE_WATCH_LABEL": submission.name,
                "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "sandbox"), env.get("PYTHONPATH", "")])})
    started = time.monotonic()
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "engine_watch.py"), "submit",
                           str(submission.path), "--out", str(out), "--sandbox", sandbox, "--no-build-cache",
                           *submission.options], capture_output=True, text=True, env=env, cwd=REPO)
    seconds = time.monotonic() - started
    results = out / "results.json"
    if not results.is_file():
        return None, seconds, proc.stderr[-500:], engine_watch.read(watch)
    return json.loads(results.read_text()), seconds, "", engine_watch.read(watch)


def summary(result: dict | None) -> dict:
    if result is None:
        return {}
    stages = {s["name"]: (s["verdict"], (s.get("timing") or {}).get("median_us")) for s in result.get("stages", [])}
    build = result.get("build") or {}
    log = build.get("log_tail") or build.get("log") or ""
    return {"score": result.get("score"), "verdict": result.get("verdict"), "stages": stages,
            "integrity": sorted(str(i) for i in (result.get("integrity") or [])),
            "wasm_built": "built the kernels for the WebAssembly replay" in json.dumps(build)
            if isinstance(build, dict) else "built the kernels for the WebAssembly replay" in str(log)}


def compare(native: dict, wasm: dict) -> tuple[str, float]:
    if not native or not wasm:
        return "missing", 0.0
    worst = 0.0
    for name, (verdict, us) in native["stages"].items():
        w_verdict, w_us = wasm["stages"].get(name, (None, None))
        if w_verdict != verdict:
            return f"stage {name}: {verdict} -> {w_verdict}", worst
        if us and w_us:
            worst = max(worst, abs(w_us / us - 1))
    if (native["score"], native["verdict"]) != (wasm["score"], wasm["verdict"]):
        return f"score {native['score']} {native['verdict']} -> {wasm['score']} {wasm['verdict']}", worst
    if native["integrity"] != wasm["integrity"]:
        return "integrity differs", worst
    return ("same" if worst <= 0.01 else "time"), worst


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", nargs="*", help="substrings of the submissions' paths")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--sandbox", default="docker")
    ap.add_argument("--public", action="store_true", help="also the public lab answers (tests/realcode mirrors)")
    ap.add_argument("--no-references", action="store_true", help="only the public answers")
    args = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="replay-engines-") as td:
        subs = [] if args.no_references else submissions()
        if args.public or args.no_references:
            subs += public_answers(Path(td))
        for sub in subs:
            rel = sub.name
            if args.only and not any(o in rel for o in args.only):
                continue
            native, n_s, n_err, _ = grade(sub, Path(td) / rel / "native", "native", args.sandbox)
            wasm, w_s, w_err, watched = grade(sub, Path(td) / rel / "wasm", "wasm", args.sandbox)
            n, w = summary(native), summary(wasm)
            outcome, worst = compare(n, w)
            fallbacks = [line for r in watched for line in r.get("lines", []) if engine_watch.FALLBACK in line]
            made = any(r.get("engine_made") for r in watched)
            if outcome == "same" and fallbacks:
                outcome = f"fallback ({len(fallbacks)} journal(s) replayed natively)"
            rows.append({"submission": rel, "native": n, "wasm": w, "outcome": outcome, "worst_time_ratio": worst,
                         "seconds": [round(n_s, 1), round(w_s, 1)], "errors": [n_err, w_err],
                         "engine_made": made, "fallbacks": fallbacks})
            print(f"{rel:<42} {str(n.get('score')):>6} {str(w.get('score')):>6}  wasm built: "
                  f"{str(w.get('wasm_built')):<5} engine: {str(made):<5} worst time {worst * 100:6.3f}%  "
                  f"{n_s:6.1f} s {w_s:6.1f} s  {outcome}", flush=True)
            for line in fallbacks:
                print(f"    {line[:400]}", flush=True)
    same = sum(r["outcome"] == "same" for r in rows)
    print(f"\n{same} of {len(rows)} the same (scores, verdicts, integrity; every stage time within 1%; "
          f"no journal replayed natively)")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
