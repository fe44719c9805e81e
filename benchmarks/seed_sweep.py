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
import os
import random
import re
import sys
import tempfile
import time
import tomllib
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "sandbox")]

from bang_harness.toolchains import STALL_SIGN  # noqa: E402

from grader.orchestration.build_cache import default_build_cache  # noqa: E402
from grader.orchestration.execute import MAX_SEEDS_PER_ROUND  # noqa: E402
from grader.orchestration.options import GradeEnvironment, GradeRequest, sandbox_name  # noqa: E402
from grader.orchestration.pipeline import grade_on_seeds, grade_submission  # noqa: E402
from grader.results import GradeResult  # noqa: E402
from grader.spec import load_assignment  # noqa: E402

KINDS = ("reference", "known_bad", "cheat")
CORPUS = ROOT / "reference_kernels" / "adversarial"
# Cheats whose outcome could depend on the data: forgeries of correctness or of speed. The corpus's other
# fixtures attack the sandbox or the build (fork_bomb, disk_fill, sleep_forever, include_host_path, ...): their
# verdict is reached before or regardless of any input value, so `--sandbox-attacks` sweeps them on fewer seeds.
DATA_CHEATS = ("decoy_kernel", "decoy_resign", "output_file_swap", "warmup_detection", "cached_clone",
               "key_from_frames", "key_from_memory", "forged_trace", "host_compute_binding", "kernel_code_in_cpp",
               "timer_patching", "device_profile_env", "npy_header_bomb", "forged_results", "trace_infinity",
               "trace_flood", "no_sanitize_kernel", "forged_harness_error")  # most data-dependent first
SANDBOX_ATTACKS = ("busy_loop", "disk_fill", "endless_output", "error_directive", "fallocate_fill", "fork_bomb",
                   "host_files", "include_host_path", "include_own_stdout", "kill_parent", "line_directive_blame",
                   "network_access", "read_proc", "sleep_forever", "symlink_copy_out", "tmpfs_fill")
# Not swept: mlu_decoy_matmul needs an MLU card (backend = "mlu"); csv_formula_name attacks the batch's exports
# (tests/sandbox/test_adversarial_corpus.py grades it through `grade batch`); fifo_binding and nonutf8_file_name
# need what git cannot hold (make_fixtures.materialise), and their verdicts come from the layout check.


@dataclass(frozen=True)
class Target:
    label: str
    path: Path
    assignment: str
    kind: str  # reference | known_bad | cheat
    stages: tuple[str, ...] | None = None  # the stages it is the reference for (None: every stage)
    may_fail: tuple[str, ...] = ()  # groups it fails by design on every seed (a public answer without fp16)
    expected: tuple[tuple[str, object], ...] = ()  # a cheat's expected.toml (verdicts, points it may keep)


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
            found.append(Target(f"known_bad/{d.name}", d, assignment, "known_bad", (known_bad_stage(d, assignment),)))
    for name in DATA_CHEATS + SANDBOX_ATTACKS:
        found.append(cheat(name))
    return found


def known_bad_stage(fixture: Path, assignment: str) -> str:
    """The stage a known-bad fixture is graded on: the last, which checks every case group (a fixture that must
    fail is not timed on six stages) -- unless it derives from a stage that leaves groups out because its kernels
    are too slow for them (matmul's scalar stages: no "large"), which is how such code is handed in and graded.
    half_running_sum, a scalar kernel on GDRAM, ran its replay of the last stage's shapes for > 25 min."""
    toml = fixture / "expected.toml"
    expected = tomllib.loads(toml.read_text()) if toml.exists() else {}
    spec = load_assignment(assignment)
    last = spec.stages[-1]
    assert {g.name for g in spec.groups} == set(last.groups)
    derived = str(expected.get("derived_from", "")).split("/")[-1]
    stage = next((s for s in spec.stages if s.name == derived), last)
    return stage.name if set(stage.groups) < set(last.groups) else last.name


def cheat(name: str) -> Target:
    """An adversarial fixture, graded on every stage (a forgery of speed shows as stage points), or on its
    reference's stages when it wraps one (timer_patching, device_profile_env: judged against that reference)."""
    expected = tomllib.loads((CORPUS / name / "expected.toml").read_text())
    wrapped = expected.get("verdict_of_reference")
    stages = (wrapped.split("/")[1],) if wrapped else None
    return Target(f"cheat/{name}", CORPUS / name, expected["assignment"], "cheat", stages,
                  expected=tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in expected.items())))


def answers_targets(into: Path) -> list[Target]:
    """The public answers of tests/realcode (mirrors under /work/.mirror), staged as a student hands them in:
    an answer correct for fp32 must fail nothing but the groups its reading says it fails by design (half);
    an answer with a genuine bug is a known-bad one and must fail every seed."""
    from tests.realcode import answers

    found = []
    for answer in answers.ANSWERS:
        if not answers.available(answer):
            print(f"answer {answer.key}: no mirror of {answer.repo}, not swept", flush=True)
            continue
        staged = answers.stage(answer, into / answer.key).path
        stages = tuple(answer.stages.split(",")) if answer.stages else tuple(sorted(answer.expect.stages_passed))
        if answer.expect.failed_groups <= {"half"}:
            found.append(Target(f"answer/{answer.key}", staged, answer.assignment, "reference",
                                stages or ("vector",), tuple(sorted(answer.expect.failed_groups))))
        else:
            last = load_assignment(answer.assignment).stages[-1].name
            found.append(Target(f"answer/{answer.key}", staged, answer.assignment, "known_bad",
                                (answer.stages,) if answer.stages else (last,)))
    return found


def cheat_defeated(target: Target, result: GradeResult, reference: float | None) -> tuple[bool, str]:
    """(defeated, how it got through): the verdict its expected.toml allows, no more points than it may keep,
    no stage points (or no more than the reference it wraps earns on the same seed)."""
    expected = dict(target.expected)
    verdict = result.verdict.value
    stage_points = sum(s.points for s in result.stages)
    allowed = list(expected.get("verdict_one_of") or ()) or ([expected["verdict"]] if "verdict" in expected else None)  # type: ignore[call-overload]
    if verdict == "passed" and "verdict_of_reference" not in expected:
        return False, f"passed: {result.score:g}"
    if allowed is not None and verdict not in allowed:
        return False, f"verdict {verdict}, expected one of {allowed}"
    if "max_points" in expected and result.score > float(expected["max_points"]):  # type: ignore[arg-type]
        return False, f"score {result.score:g} > {expected['max_points']}"
    if "verdict_of_reference" in expected:
        if "stage_points" in expected and stage_points > float(expected["stage_points"]):  # type: ignore[arg-type]
            return False, f"stage points {stage_points:g}"
        if reference is not None and result.score > reference + 1e-6:
            return False, f"score {result.score:g} above its reference's {reference:g} on this seed"
        return True, ""
    if stage_points > 0:
        return False, f"stage points {stage_points:g}"
    return True, ""


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


def starved(result: GradeResult, target: Target) -> bool:
    """The build was stopped for making no progress: on a loaded host, a sandbox starved of CPU (before the
    build steps counted their time on the run queue), not anything the submission or the seed did -- unless
    stopping it is what the fixture expects (include_own_stdout waits on its own output pipe)."""
    build = result.build
    if dict(target.expected).get("verdict") == "timeout":
        return False
    return build is not None and not build.ok and STALL_SIGN in (build.compiler_output or "")


def grade_target(target: Target, seeds: list[str], mode: str, per_sandbox: int, cache: str | None,
                 sandbox: str, per_round: int = 1, nice_after_build: int = 0,
                 batch: bool = False) -> list[tuple[str, bool, str, float, str, float]]:
    """(seed, correct, why, score, verdict, seconds) per seed; `batch`: graded as `grade batch` grades (a slot's job
    when slots are on)."""
    request = GradeRequest(assignment=target.assignment, seed_mode="public",
                           stages=tuple(target.stages) if target.stages else None)
    environment = GradeEnvironment(sandbox=sandbox_name(sandbox), build_cache=Path(cache) if cache else None,
                                   batch=batch)
    rows = []
    chunks = [[s] for s in seeds] if mode == "separate" else \
        [seeds[i:i + per_sandbox] for i in range(0, len(seeds), per_sandbox)]
    for chunk in chunks:
        started = time.monotonic()
        if mode == "separate":
            results = [grade_submission(target.path, replace(request, seed=chunk[0]), environment)]
        else:
            results = grade_on_seeds(target.path, request, environment, chunk, per_round)
            if starved(results[0], target):  # once more: a build the host's load stopped says nothing of the seeds
                results = grade_on_seeds(target.path, request, environment, chunk, per_round)
        seconds = (time.monotonic() - started) / len(chunk)
        if nice_after_build and os.nice(0) < nice_after_build:
            # the first chunk built the submission (cached from now on); the runs need no fair share
            os.nice(nice_after_build - os.nice(0))
        for seed, result in zip(chunk, results, strict=True):
            if starved(result, target):
                print(f"{target.label:36s} seed={seed:18s} NOT-GRADED: the build was stopped as making no progress "
                      "(starved of CPU by the host's load; not counted)", flush=True)
                continue
            if target.kind == "cheat":
                good, why = cheat_defeated(target, result, None)
                word = "defeated" if good else "GOT-IN "
            else:
                ok, why = judged(target, result)
                good = ok == (target.kind == "reference")
                word = "correct" if ok else "FAILS  "
            rows.append((seed, good, why, result.score, result.verdict.value, seconds))
            stage_points = sum(st.points for st in result.stages)
            print(f"{target.label:36s} seed={seed:18s} {word} {result.verdict.value:16s} "
                  f"{result.score:7.2f}/{result.max_score:g} stages {stage_points:5.1f} {seconds:6.1f}s "
                  f"{'ok   ' if good else 'WRONG'} {why}",
                  flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=50, help="random seeds per reference (default 50)")
    parser.add_argument("--known-bad-seeds", type=int, default=None,
                        help="seeds per known-bad fixture and data-dependent cheat (default: --seeds)")
    parser.add_argument("--attack-seeds", type=int, default=3,
                        help="seeds per sandbox attack and known_bad/hangs, whose verdict no input value decides "
                        "(each spends a time limit per seed; 0: leave them out)")
    parser.add_argument("--answers", action="store_true",
                        help="the public answers of tests/realcode too (from the mirrors)")
    parser.add_argument("--draw", default=None, help="seed of the seed list (default: random, printed)")
    parser.add_argument("--first", type=int, default=0,
                        help="start at this index of the seed list: a long sweep in waves of --seeds seeds each "
                        "(every submission the same seeds per wave; --summarise joins the waves' logs)")
    parser.add_argument("--summarise", nargs="+", metavar="LOG", default=None,
                        help="print the table of the per-seed lines in these logs (of one seed list) and exit")
    parser.add_argument("--only", action="append", default=[], help="label prefix to include (repeatable)")
    parser.add_argument("--skip", action="append", default=[], help="label prefix to leave out (repeatable)")
    parser.add_argument("--extra", action="append", default=[], metavar="DIR:ASSIGNMENT[:STAGES[:MAY_FAIL]]",
                        help="another submission that must be correct on every seed (a public answer); MAY_FAIL: "
                        "comma-separated groups it fails by design (e.g. half)")
    parser.add_argument("--mode", choices=("shared", "separate"), default="shared",
                        help="shared: a submission's seeds in one sandbox (grade_on_seeds); separate: one each")
    parser.add_argument("--seeds-per-sandbox", type=int, default=10)
    parser.add_argument("--seeds-per-round", type=int, default=MAX_SEEDS_PER_ROUND,
                        help="seeds whose calls share each round and its replay (1: a round per seed, as before; "
                        f"at most {MAX_SEEDS_PER_ROUND}, the most that keep each seed's budgets)")
    parser.add_argument("--jobs", type=int, default=1, help="submissions graded at the same time")
    parser.add_argument("--nice-after-build", type=int, default=0,
                        help="each worker lowers its priority to this niceness once a submission's first seeds "
                        "(and its build) are done: the build keeps its share of a loaded host")
    parser.add_argument("--sandbox", default="docker")
    parser.add_argument("--build-cache", default=None)
    parser.add_argument("--batch", action="store_true",
                        help="grade as `grade batch` does (its run sandboxes are slot jobs unless BANG_GRADER_SLOTS=0)")
    args = parser.parse_args(argv)

    if args.summarise:
        return summarise([Path(p) for p in args.summarise])
    draw = args.draw or f"{random.SystemRandom().getrandbits(32):08x}"
    rng = random.Random(draw)
    seeds = [f"sweep-{rng.getrandbits(40):010x}"
             for _ in range(args.first + max(args.seeds, args.known_bad_seeds or 0))][args.first:]
    staging = tempfile.TemporaryDirectory(prefix="seed-sweep-answers-")
    chosen = [t for t in targets() + (answers_targets(Path(staging.name)) if args.answers else [])
              if (not args.only or any(t.label.startswith(o) for o in args.only))
              and not any(t.label.startswith(s) for s in args.skip)]
    for extra in args.extra:
        folder, assignment, *rest = extra.split(":") + ["", ""]
        chosen.append(Target(Path(folder).name, Path(folder), assignment, "reference",
                             tuple(rest[0].split(",")) if rest[0] else None,
                             tuple(rest[1].split(",")) if rest[1] else ()))
    print(f"seed list drawn from {draw!r} (seeds {args.first}..{args.first + len(seeds) - 1}); mode {args.mode}; "
          f"{len(chosen)} submissions", flush=True)
    started = time.monotonic()
    def count(t: Target) -> int:
        if t.label in ("known_bad/hangs",) or t.label.removeprefix("cheat/") in SANDBOX_ATTACKS:
            return args.attack_seeds
        return args.seeds if t.kind == "reference" else (args.known_bad_seeds or args.seeds)

    # the references first: a cheat that wraps one is judged against its score on the same seed
    chosen = sorted((t for t in chosen if count(t) > 0), key=lambda t: KINDS.index(t.kind))
    cache = args.build_cache or str(default_build_cache())
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        futures = {t: pool.submit(grade_target, t, seeds[:count(t)], args.mode, args.seeds_per_sandbox, cache,
                                  args.sandbox, args.seeds_per_round, args.nice_after_build, args.batch)
                   for t in chosen}
        rows = {t: f.result() for t, f in futures.items()}
    staging.cleanup()
    scores = {t.label: {r[0]: r[3] for r in graded} for t, graded in rows.items()}
    for t, graded in rows.items():
        wrapped = dict(t.expected).get("verdict_of_reference")
        if wrapped and str(wrapped) in scores:  # above the reference it wraps, on the same seed: it got in
            mine = scores[str(wrapped)]
            rows[t] = [(r[0], False, f"score {r[3]:g} above {wrapped}'s {mine[r[0]]:g}") + r[3:]
                       if r[0] in mine and r[3] > mine[r[0]] + 1e-6 else r for r in graded]
    print("\n| submission | kind | seeds graded | seeds failed | seeds passed | s per seed |")
    print("|---|---|---|---|---|---|")
    bad = False
    for t, graded in rows.items():
        wrong = sum(1 for r in graded if not r[1])  # a reference that failed, a known-bad one or cheat that passed
        failed, passed = (wrong, len(graded) - wrong) if t.kind == "reference" else (len(graded) - wrong, wrong)
        bad |= wrong > 0
        per_seed = sum(r[5] for r in graded) / len(graded) if graded else 0.0
        print(f"| {t.label} | {t.kind} | {len(graded)} | {failed} | {passed} | {per_seed:.1f} |")
    print(f"\n{time.monotonic() - started:.0f} s wall; {'FAILED' if bad else 'ok'}: references must fail 0 seeds, "
          "known-bad fixtures and cheats pass 0 (a cheat passes a seed when it ends in a verdict its expected.toml "
          "does not allow, keeps more points than it may, or earns stage points)")
    return 1 if bad else 0


LINE = re.compile(r"^(?P<label>\S+)\s+seed=(?P<seed>\S+)\s+(?P<word>correct|FAILS|defeated|GOT-IN)\s+(?P<verdict>\S+)"
                  r"\s+(?P<score>[\d.]+)/\S+\s+stages\s+[\d.]+\s+(?P<seconds>[\d.]+)s\s+(?P<good>ok|WRONG)")


def summarise(logs: list[Path]) -> int:
    """The issue's two tables from the per-seed lines of several waves' logs (a seed graded twice counts once,
    its last line; a build the host's load stopped is not counted)."""
    graded: dict[str, dict[str, tuple[bool, float, float]]] = {}
    kind: dict[str, str] = {}
    for log in logs:
        for line in log.read_text().splitlines():
            if (m := LINE.match(line)) and STALL_SIGN not in line:
                graded.setdefault(m["label"], {})[m["seed"]] = (m["good"] == "ok", float(m["seconds"]),
                                                                float(m["score"]))
                # correct + ok, or FAILS + wrong: a reference; FAILS + ok, or correct + wrong: a known-bad one
                kind[m["label"]] = "cheat" if m["word"] in ("defeated", "GOT-IN") else \
                    "reference" if (m["word"] == "correct") == (m["good"] == "ok") else "known-bad"
    for label, seeds in graded.items():  # a cheat that wraps a reference: above its score on the same seed
        wrapped = dict(cheat(label.removeprefix("cheat/")).expected).get("verdict_of_reference") \
            if label.startswith("cheat/") else None
        for seed, (_good, seconds, score) in seeds.items():
            if wrapped and score > graded.get(str(wrapped), {}).get(seed, (True, 0.0, float("inf")))[2] + 1e-6:
                seeds[seed] = (False, seconds, score)
    bad = 0
    for title, kinds, column in (("reference or answer", ("reference",), "seeds failed"),
                                 ("known-bad fixture or cheat", ("known-bad", "cheat"), "seeds passed")):
        print(f"\n| {title} | seeds graded | {column} | s per seed |\n|---|---|---|---|")
        for label, seeds in graded.items():
            if kind[label] in kinds:
                wrong = sum(1 for good, _s, _p in seeds.values() if not good)
                bad += wrong
                print(f"| {label} | {len(seeds)} | {wrong} | "
                      f"{sum(s for _g, s, _p in seeds.values()) / len(seeds):.1f} |")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
