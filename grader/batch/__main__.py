"""`python -m grader.batch SUBMISSIONS --assignment A --out DIR`: the batch command without the typer CLI
(the `grade batch` command calls the same run_batch)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from grader.orchestration.batch import BatchError, run_batch


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grader.batch", description=__doc__)
    parser.add_argument("submissions", type=Path, help="folder of student folders/archives, class archive, or roster CSV")
    parser.add_argument("--assignment", "-a", required=True)
    parser.add_argument("--out", "-o", type=Path, required=True, help="batch directory (reused to resume)")
    parser.add_argument("--workers", "-j", type=int, default=None, help="parallel workers (default: one per device)")
    parser.add_argument("--backend", choices=["emu", "mlu"], default="emu")
    parser.add_argument("--device", default=None, help="emu: device profile; mlu: card indices, e.g. 0,1")
    parser.add_argument("--sandbox", choices=["auto", "docker"], default="auto")
    parser.add_argument("--force", action="store_true", help="regrade submissions already graded")
    parser.add_argument("--seed", default=None, help="public master seed (default: a secret one per batch)")
    parser.add_argument("--build-cache", type=Path, default=None, help="shared build cache (default: DIR/build-cache)")
    parser.add_argument("--job-timeout", type=float, default=1800.0, help="seconds before a worker is stopped")
    parser.add_argument("--plan-only", action="store_true", help="write plan.jsonl + k8s-job.json, grade nothing")
    parser.add_argument("--image", default=None, help="container image for --plan-only")
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument("--entry", default=None, help=argparse.SUPPRESS)  # tests: a grading function to use
    args = parser.parse_args(argv)
    extra = {"entry": args.entry} if args.entry else {}
    try:
        summary = run_batch(args.submissions, args.assignment, args.out, workers=args.workers, backend=args.backend,
                            sandbox=args.sandbox, force=args.force, seed=args.seed, progress=not args.no_progress,
                            device=args.device, build_cache=args.build_cache, job_timeout=args.job_timeout,
                            plan_only=args.plan_only, image=args.image, **extra)
    except BatchError as exc:
        print(f"grade batch: {exc}", file=sys.stderr)
        return 2
    print("\n".join(summary.lines()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
