"""The host's comparison of outputs with their references (grader/checks/compare.py), before and after a change,
side by side in one run (issue 41: py-spy put the checks' numerics at ~40% of a batch worker's CPU).

    .venv/bin/python benchmarks/judging_cost.py [--before REV] [--assignment sigmoid|matmul] [--repeats 3]

Every correctness case and every stage's perf case of the assignment, on its public seed, with an output as an
honest kernel gives it (the float64 reference rounded to the case's dtype); each output is compared twice, as a
grading compares the run's output and the replay's (twin's). Measured in a fresh process per tree and repeat,
drawing and references excluded (done first): `first` is what a fresh `grade submit` process pays (its big
temporaries fault their pages in), `again` the same comparisons once more in that process (a batch worker's
steady state). CPU seconds user + system of the comparisons alone; the metrics each tree gives are checked equal,
bit for bit. REV is checked out into a temporary git worktree and imported from there.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.worktrees import compared_trees  # noqa: E402

CHILD = r"""
import json, resource, sys
import numpy as np
from grader.checks.compare import compare
from grader.spec import SeedPlan, correctness_cases, load_assignment, perf_case

spec = load_assignment(sys.argv[1])
seeds = SeedPlan.create("public")
cases = correctness_cases(spec, seeds) + [perf_case(spec, stage.name, seeds) for stage in spec.stages]
pairs = []
for case in cases:
    expected = case.expected(spec.reference)
    pairs.append((case, expected.astype(case.dtype), expected))

def cpu():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime, usage.ru_stime

def once():
    u, s = cpu()
    found = []
    for case, actual, expected in pairs:
        for _twin in range(2):
            outcome = compare(actual, expected, case.dtype, spec.tolerances[case.dtype], spec.checks)
        found.append([outcome.passed, sorted((k, float(v).hex()) for k, v in outcome.metrics.items())])
    u2, s2 = cpu()
    return u2 - u, s2 - s, found

first = once()
again = once()
elements = sum(int(np.prod(case.output_shape)) for case, _a, _e in pairs)
print(json.dumps({"first": first[:2], "again": again[:2], "metrics": first[2], "outputs": len(pairs),
                  "elements": elements}))
"""


def measure(tree: Path, assignment: str) -> dict:
    env = {**os.environ, "PYTHONPATH": f"{tree}:{tree / 'sandbox'}"}
    proc = subprocess.run([sys.executable, "-c", CHILD, assignment], capture_output=True, text=True, cwd=tree,
                          env=env, check=False)
    if proc.returncode:
        raise SystemExit(f"{tree}: {proc.stderr[-3000:]}")
    return json.loads(proc.stdout)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", default=None, help="a git revision to compare with (default: this tree alone)")
    parser.add_argument("--assignment", default="sigmoid")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    with compared_trees(args.before, "judging-before-") as trees:
        runs: dict[str, list[dict]] = {name: [] for name in trees}
        for _ in range(args.repeats):  # interleaved
            for name, tree in trees.items():
                runs[name].append(measure(tree, args.assignment))
    sample = runs["after"][0]
    print(f"{args.assignment}: {sample['outputs']} outputs ({sample['elements']:,} elements), each compared twice; "
          f"CPU seconds (user + system), median of {args.repeats} fresh processes; load {os.getloadavg()[0]:.1f}")
    medians = {}
    for name, found in runs.items():
        for when in ("first", "again"):
            user = statistics.median(r[when][0] for r in found)
            system = statistics.median(r[when][1] for r in found)
            medians[(name, when)] = user + system
            print(f"  {name:<7}{when:<7} {user + system:6.3f} s  (user {user:.3f}, system {system:.3f})")
    if "before" in runs:
        for when in ("first", "again"):
            print(f"  {when}: {medians[('before', when)] / medians[('after', when)]:.2f}x less CPU")
        same = runs["before"][0]["metrics"] == runs["after"][0]["metrics"]
        print(f"  metrics and verdicts bit-identical between the trees: {same}")
        return 0 if same else 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
