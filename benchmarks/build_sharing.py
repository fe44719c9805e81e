"""What the content-keyed build cache saves when submissions share their kernels and binding (the adversarial
corpus, tests that grade one reference several times, resubmissions that changed only ops.py), side by side.

    .venv/bin/python benchmarks/build_sharing.py [--submission reference_kernels/sigmoid/vector] [--copies 3]
        [--sandbox none|docker] [--stages vector]

Makes `--copies` copies of the submission that differ only in ops.py (a comment) and grade.toml's [student]
table, then grades them all twice: before (no build cache: every grading builds, as the tests did) and after
(one shared cache: the first builds, the rest reuse it). Prints wall seconds, builds run and the ratio; the load
average is printed beside each, since the machine may be shared.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from grader.orchestration import GradeEnvironment, GradeRequest, grade_submission  # noqa: E402
from grader.orchestration.options import sandbox_name  # noqa: E402


def make_copies(submission: Path, root: Path, copies: int) -> list[Path]:
    paths = []
    for i in range(copies):
        copy = root / f"copy{i}"
        shutil.copytree(submission, copy, ignore=shutil.ignore_patterns("__pycache__"))
        ops = copy / "ops.py"
        ops.write_text(ops.read_text() + f"\n# copy {i}\n")
        (copy / "grade.toml").write_text((submission / "grade.toml").read_text().split("[student]")[0]
                                         + f'[student]\nid = "copy-{i}"\n')
        paths.append(copy)
    return paths


def grade_all(copies: list[Path], sandbox: str, stages: list[str] | None, cache: Path | None) -> dict:
    load = os.getloadavg()[0]
    started = time.monotonic()
    builds, verdicts = 0, []
    for copy in copies:
        result = grade_submission(copy, GradeRequest(stages=stages),
                                  GradeEnvironment(sandbox=sandbox_name(sandbox), build_cache=cache))
        builds += int(result.build is not None and not result.build.cached)
        verdicts.append(result.verdict.value)
    return {"wall_s": round(time.monotonic() - started, 1), "builds": builds, "verdicts": verdicts,
            "load_before": round(load, 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--submission", type=Path, default=REPO / "reference_kernels" / "sigmoid" / "vector")
    parser.add_argument("--copies", type=int, default=3)
    parser.add_argument("--sandbox", default="none")
    parser.add_argument("--stages", default="vector", help="comma-separated; empty: all")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    stages = [s for s in args.stages.split(",") if s] or None
    with tempfile.TemporaryDirectory(prefix="bench-sharing-") as tmp:
        copies = make_copies(args.submission, Path(tmp), args.copies)
        rows = {"before (no cache)": grade_all(copies, args.sandbox, stages, None),
                "after (shared cache)": grade_all(copies, args.sandbox, stages, Path(tmp) / "cache")}
    before = rows["before (no cache)"]["wall_s"]
    print(f"\n{args.copies} copies of {args.submission.name} differing only in ops.py/grade.toml, "
          f"{args.sandbox} sandbox:")
    print(f"{'run':<24} {'wall s':>8} {'builds':>7} {'load':>5} {'vs before':>10}")
    for label, row in rows.items():
        print(f"{label:<24} {row['wall_s']:>8.1f} {row['builds']:>7} {row['load_before']:>5.1f} "
              f"{before / row['wall_s']:>9.2f}x  {sorted(set(row['verdicts']))}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
