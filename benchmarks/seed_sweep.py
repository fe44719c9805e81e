"""Seed sweep through the real sandbox: every reference kernel (and the bundled example) must pass on every seed a
class can draw, every known-bad fixture must fail on every one (issue 27).

    .venv/bin/python benchmarks/seed_sweep.py                      # every submission, 50 random seeds each
    .venv/bin/python benchmarks/seed_sweep.py --seeds 10 --only sigmoid/ --only example
    .venv/bin/python benchmarks/seed_sweep.py --known-bad-seeds 10 --extra DIR:sigmoid   # a public answer too
    .venv/bin/python benchmarks/seed_sweep.py --mode separate --seeds 5 --only sigmoid/pipeline   # the comparison

Each submission is built once (the build cache) and graded on every seed by `grade_on_seeds`, which runs every
seed's rounds in one run-phase sandbox (`--seeds-per-sandbox` at a time), printing one line per seed as
`grade submit --seed S` would grade it; `--mode separate` grades each seed with its own `grade_submission` (a
sandbox per seed, as a batch per seed would). A reference *fails* a seed when any case fails or a stage it is the
reference for is not correct; a known-bad fixture (graded on its assignment's last stage, which checks every case
group) *passes* a seed when every case passes. Exits 1 when a
reference failed or a known-bad fixture passed on any seed.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "sandbox")]

from grader.orchestration.options import GradeOptions  # noqa: E402
from grader.orchestration.pipeline import grade_on_seeds, grade_submission  # noqa: E402
from grader.results import GradeResult  # noqa: E402
from grader.spec import load_assignment  # noqa: E402

KINDS = ("reference", "known_bad")


@dataclass(frozen=True)
class Target:
    label: str
    path: Path
    assignment: str
    kind: str  # reference | known_bad
    stages: tuple[str, ...] | None = None  # the stages it is the reference for (None: every stage)
    may_fail: tuple[str, ...] = ()  # groups it fails by design on every seed (a public answer without fp16)


def targets() -> list[Target]:
    """Every reference kernel, the bundled example and every known-bad fixture, from reference_kernels/."""
    refs = ROOT / "reference_kernels"
    found = [Target(f"sigmoid/{d.name}", d, "sigmoid", "reference", (d.name,))
             for d in sorted((refs / "sigmoid").iterdir()) if d.is_dir()]
    found.append(Target("example", refs / "example", "matmul", "reference"))
    found += [Target(f"matmul/{d.name}", d, "matmul", "reference", (d.name,))
              for d in sorted((refs / "matmul").iterdir()) if d.is_dir()]
    for d in sorted((refs / "known_bad").iterdir()):
        toml = d / "grade.toml"
        if d.is_dir() and toml.exists():
            assignment = "matmul" if 'assignment = "matmul"' in toml.read_text() else "sigmoid"
            # graded on the last stage, which checks every case group: a fixture that must fail is not timed
            # on six stages (the scalar matmul ones take minutes on the emulator)
            last = load_assignment(assignment).stages[-1]
            assert {g.name for g in load_assignment(assignment).groups} == set(last.groups)
            found.append(Target(f"known_bad/{d.name}", d, assignment, "known_bad", (last.name,)))
    return found


def judged(target: Target, result: GradeResult) -> tuple[bool, str]:
    """(correct, why not): every case passed and every stage graded is correct."""
    failing = [c for c in result.cases if not c.passed and c.group not in target.may_fail]
    if failing:
        first = failing[0]
        return False, f"{first.name} ({first.entry}): {first.verdict.value}: {first.message.splitlines()[0][:160]}" \
            if first.message else f"{first.name}: {first.verdict.value}"
    wrong = [s for s in result.stages if not s.correct]
    if wrong or not result.cases:
        return False, (f"stage {wrong[0].name}: {wrong[0].verdict.value}" if wrong
                       else f"{result.verdict.value}: {result.message.splitlines()[0][:160] if result.message else ''}")
    return True, ""


def grade_target(target: Target, seeds: list[str], mode: str, per_sandbox: int, cache: str | None,
                 sandbox: str) -> list[tuple[str, bool, str, float, str, float]]:
    """(seed, correct, why, score, verdict, seconds) per seed."""
    options = GradeOptions(assignment=target.assignment, sandbox=sandbox, seed_mode="public",  # type: ignore[arg-type]
                           stages=list(target.stages) if target.stages else None,
                           build_cache=Path(cache) if cache else None)
    rows = []
    chunks = [[s] for s in seeds] if mode == "separate" else \
        [seeds[i:i + per_sandbox] for i in range(0, len(seeds), per_sandbox)]
    for chunk in chunks:
        started = time.monotonic()
        if mode == "separate":
            results = [grade_submission(target.path, GradeOptions(**{**options.__dict__, "seed": chunk[0]}))]
        else:
            results = grade_on_seeds(target.path, options, chunk)
        seconds = (time.monotonic() - started) / len(chunk)
        for seed, result in zip(chunk, results, strict=True):
            ok, why = judged(target, result)
            rows.append((seed, ok, why, result.score, result.verdict.value, seconds))
            print(f"{target.label:36s} seed={seed:18s} {'correct' if ok else 'FAILS  '} {result.verdict.value:15s} "
                  f"{result.score:7.2f}/{result.max_score:g} {seconds:6.1f}s {why}", flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=50, help="random seeds per reference (default 50)")
    parser.add_argument("--known-bad-seeds", type=int, default=None, help="seeds per known-bad fixture (default: --seeds)")
    parser.add_argument("--draw", default=None, help="seed of the seed list (default: random, printed)")
    parser.add_argument("--only", action="append", default=[], help="label prefix to include (repeatable)")
    parser.add_argument("--skip", action="append", default=[], help="label prefix to leave out (repeatable)")
    parser.add_argument("--extra", action="append", default=[], metavar="DIR:ASSIGNMENT[:STAGES[:MAY_FAIL]]",
                        help="another submission that must be correct on every seed (a public answer); MAY_FAIL: "
                        "comma-separated groups it fails by design (e.g. half)")
    parser.add_argument("--mode", choices=("shared", "separate"), default="shared",
                        help="shared: a submission's seeds in one sandbox (grade_on_seeds); separate: one each")
    parser.add_argument("--seeds-per-sandbox", type=int, default=10)
    parser.add_argument("--jobs", type=int, default=1, help="submissions graded at the same time")
    parser.add_argument("--sandbox", default="docker")
    parser.add_argument("--build-cache", default=None)
    args = parser.parse_args(argv)

    draw = args.draw or f"{random.SystemRandom().getrandbits(32):08x}"
    rng = random.Random(draw)
    seeds = [f"sweep-{rng.getrandbits(40):010x}" for _ in range(max(args.seeds, args.known_bad_seeds or 0))]
    chosen = [t for t in targets() if (not args.only or any(t.label.startswith(o) for o in args.only))
              and not any(t.label.startswith(s) for s in args.skip)]
    for extra in args.extra:
        folder, assignment, *rest = extra.split(":") + ["", ""]
        chosen.append(Target(Path(folder).name, Path(folder), assignment, "reference",
                             tuple(rest[0].split(",")) if rest[0] else None,
                             tuple(rest[1].split(",")) if rest[1] else ()))
    print(f"seed list drawn from {draw!r} ({len(seeds)} seeds); mode {args.mode}; {len(chosen)} submissions", flush=True)
    started = time.monotonic()
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        futures = {t: pool.submit(grade_target, t, seeds[:args.seeds if t.kind == "reference"
                                                        else (args.known_bad_seeds or args.seeds)],
                                  args.mode, args.seeds_per_sandbox, args.build_cache, args.sandbox)
                   for t in chosen}
        rows = {t: f.result() for t, f in futures.items()}
    print("\n| submission | kind | seeds graded | seeds failed | seeds passed | s per seed |")
    print("|---|---|---|---|---|---|")
    bad = False
    for t, graded in rows.items():
        failed = sum(1 for r in graded if not r[1])
        passed = len(graded) - failed
        bad |= (failed if t.kind == "reference" else passed) > 0
        per_seed = sum(r[5] for r in graded) / len(graded) if graded else 0.0
        print(f"| {t.label} | {t.kind} | {len(graded)} | {failed} | {passed} | {per_seed:.1f} |")
    print(f"\n{time.monotonic() - started:.0f} s wall; {'FAILED' if bad else 'ok'}: references must fail 0 seeds, "
          "known-bad fixtures pass 0")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
