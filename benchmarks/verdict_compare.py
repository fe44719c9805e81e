"""Every verdict kept? The references, the known-bad fixtures and the adversarial corpus graded by two trees.

    .venv/bin/python benchmarks/verdict_compare.py --before REV [--only references,known_bad,adversarial]
        [--skip-slow] [--json out.json]

REV is checked out into a temporary git worktree (its own sources and image, built first if missing); "after" is
this tree. Each fixture is graded by both trees at once (`grade submit --json --seed corpus`, docker, a build cache
per tree) and compared: verdict, score, each case's verdict and findings, each stage's verdict, points and
modelled time, the integrity list. Messages are compared too but reported apart (they may name a work folder).
A speed change keeps every verdict (issue 41): the report lists every difference, and the exit status is 1 if any.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import tomllib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.worktrees import worktree  # noqa: E402

KERNELS = REPO / "reference_kernels"


def fixtures(groups: list[str], skip_slow: bool, only_slow: bool = False) -> list[Path]:
    found: list[Path] = []
    if "references" in groups:
        found += [KERNELS / "example"] + sorted(p for p in (KERNELS / "sigmoid").iterdir() if p.is_dir()) \
            + sorted(p for p in (KERNELS / "matmul").iterdir() if p.is_dir())
    slow: list[Path] = []  # last: the fixtures that run into a time limit
    for group in ("known_bad", "adversarial"):
        if group in groups:
            for expected in sorted((KERNELS / group).glob("*/expected.toml")):
                meta = tomllib.loads(expected.read_text())
                if meta.get("backend") == "mlu" or (skip_slow and meta.get("slow")):
                    continue
                (slow if meta.get("slow") else found).append(expected.parent)
    return slow if only_slow else found + slow


def grade(tree: Path, fixture: Path, out: Path, cache: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": f"{tree}:{tree / 'sandbox'}", "BANG_GRADER_BUILD_CACHE": str(cache)}
    argv = [sys.executable, "-m", "grader.cli", "submit", str(fixture), "--out", str(out), "--json", "--seed", "corpus",
            "--sandbox", "docker", "--no-setup"]
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=tree, env=env, timeout=3600)
    try:
        return json.loads(proc.stdout)
    except json.JSONDecodeError:
        return {"verdict": f"no JSON (exit {proc.returncode})", "stderr": proc.stderr[-2000:]}


def summary(result: dict) -> dict:
    """What must not change, and the messages apart."""
    cases = {c["name"]: {"verdict": c.get("verdict"), "findings": c.get("findings"),
                         "max_abs_error": c.get("max_abs_error")} for c in result.get("cases", [])}
    stages = {s["name"]: {"verdict": s.get("verdict"), "points": s.get("points"),
                          "time_us": (s.get("timing") or {}).get("median_us") if isinstance(s.get("timing"), dict)
                          else s.get("timing"), "trace": s.get("trace")} for s in result.get("stages", [])}
    kept = {"verdict": result.get("verdict"), "score": result.get("score"), "cases": cases, "stages": stages,
            "integrity": result.get("integrity")}
    messages = {"grading": result.get("message"), **{f"case {c['name']}": c.get("message")
                                                     for c in result.get("cases", [])},
                **{f"stage {s['name']}": s.get("message") for s in result.get("stages", [])}}
    return {"kept": kept, "messages": messages}


def differences(a: object, b: object, where: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b), key=str) for d in differences(a.get(k), b.get(k), f"{where}/{k}")]
    return [] if a == b else [f"{where}: {json.dumps(a)[:300]} -> {json.dumps(b)[:300]}"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", required=True)
    parser.add_argument("--only", default="references,known_bad,adversarial")
    parser.add_argument("--skip-slow", action="store_true")
    parser.add_argument("--only-slow", action="store_true", help="only the fixtures that run into a time limit")
    parser.add_argument("--names", help="only these fixtures (comma-separated, as printed: adversarial/busy_loop)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    todo = fixtures(args.only.split(","), args.skip_slow, args.only_slow)
    if args.names:
        todo = [f for f in todo if str(f.relative_to(KERNELS)) in args.names.split(",")]
    report: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="verdict-compare-") as tmp:
        root = Path(tmp)
        before = root / "before"  # a worktree of its own per run: two runs can go side by side
        with worktree(args.before, before):
            subprocess.run([sys.executable, "-m", "grader.cli", "images", "build"], cwd=before, check=True,
                           env={**os.environ, "PYTHONPATH": f"{before}:{before / 'sandbox'}",
                                "BANG_GRADER_KEEP_IMAGES": "10"}, capture_output=True)
            trees = {"before": before, "after": REPO}
            failed = 0
            with ThreadPoolExecutor(2) as pool:
                for fixture in todo:
                    name = str(fixture.relative_to(KERNELS))
                    jobs = {t: pool.submit(grade, tree, fixture, root / t / name, root / f"cache-{t}")
                            for t, tree in trees.items()}
                    graded = {t: job.result() for t, job in jobs.items()}
                    b, a = summary(graded["before"]), summary(graded["after"])
                    diff = differences(b["kept"], a["kept"])
                    said = differences(b["messages"], a["messages"])
                    failed += bool(diff)
                    report[name] = {"verdict": a["kept"]["verdict"], "score": a["kept"]["score"], "differences": diff,
                                    "message_differences": said}
                    print(f"{'SAME' if not diff else 'DIFF'} {name:<45} {b['kept']['verdict']} {b['kept']['score']}"
                          f" -> {a['kept']['verdict']} {a['kept']['score']}"
                          + (f"   ({len(said)} message(s) differ)" if said else ""), flush=True)
                    for line in diff + [f"message {m}" for m in said]:
                        print(f"    {line}", flush=True)
                    if args.json:
                        args.json.write_text(json.dumps(report, indent=1))
    print(f"\n{len(todo)} fixtures, {failed} with differences")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
