"""What the batch's similarity step costs on a class of N submissions (default 200).

The class is made from the reference kernels (reference_kernels/{sigmoid,matmul}/<stage>/): each student
starts from one stage and is made distinct the way students differ (identifiers renamed at random,
comments reworded, indentation changed; with --distinct-headers, the default, even the shared headers
differ per student, so nothing is fingerprinted once for many students), plus a few byte-identical
resubmissions. The template is the lab handout (bindings, ops.py, headers, kernels with a TODO body).
Students of one stage stay copies of each other under the renames, so most pairs within a stage are
listed: the worst case for the side-by-side regions and the dashboard's size.

The comparison runs in one process (copydetect's Pygments lexing is most of it), so the CPU seconds are
what it costs on an idle core; the wall time also shows what the machine's other load added.

    .venv/bin/python benchmarks/similarity_cost.py                 # 200 students, prints the seconds
    .venv/bin/python benchmarks/similarity_cost.py --students 400 --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from grader.batch.dashboard import write_dashboard  # noqa: E402
from grader.batch.intake import content_hash  # noqa: E402
from grader.batch.similarity import Member, SimilaritySettings, compare_submissions, similarity_csv  # noqa: E402
from tests.batch.handout import hollow_kernels  # noqa: E402 -- the test suite's handout maker

REF = REPO / "reference_kernels"
CODE = (".mlu", ".cpp", ".h", ".py")
STAGES = [f"sigmoid/{s}" for s in ("vector", "multicore", "pipeline")] + [
    f"matmul/{s}" for s in ("scalar_gdram", "scalar_nram", "vector", "multicore", "pipeline", "sram_union")]
KEEP = {  # names a student cannot rename (language, BANG, CNRT, torch)
    "int", "float", "void", "const", "char", "bool", "unsigned", "int64_t", "int32_t", "size_t", "auto", "template",
    "typename", "return", "for", "if", "else", "while", "struct", "using", "namespace", "static", "inline", "sizeof",
    "true", "false", "nullptr", "half", "def", "import", "from", "as", "torch", "at", "self", "None", "not", "and",
    "or", "in", "is", "class", "lambda", "pass", "break", "continue", "m", "ops", "extension",
}


def mutate(text: str, rng: random.Random, suffix: str, renames: dict[str, str]) -> str:
    ident = re.compile(r"\b([a-z_][a-z0-9_]*)\b")

    def rename(m: re.Match) -> str:
        name = m.group(1)
        if name in KEEP or name.startswith("__") or name.startswith(("cnrt", "task", "torch", "my_ops")):
            return name
        if name not in renames:
            renames[name] = name if rng.random() < 0.5 else f"{name[:3]}{rng.choice('abcdefghk')}{len(renames)}"
        return renames[name]

    out = []
    for line in text.splitlines():
        if line.lstrip().startswith("#"):
            out.append(line)
            continue
        line = re.sub(r"//.*", f"// {suffix} note", line)
        line = ident.sub(rename, line)
        if rng.random() < 0.3:
            line = " " * rng.randint(0, 3) + line
        out.append(line)
    return "\n".join(out) + f"\n// {suffix}\n"


def make_class(root: Path, students: int, seed: int, distinct_headers: bool) -> tuple[Path, Path]:
    rng = random.Random(seed)
    handout = root / "handout"
    for stage in STAGES:
        for f in (REF / stage).rglob("*"):
            if f.suffix in CODE:
                t = handout / stage / f.relative_to(REF / stage)
                t.parent.mkdir(parents=True, exist_ok=True)
                t.write_text(hollow_kernels(f.read_text()) if f.suffix == ".mlu" else f.read_text())
    subs = root / "subs"
    for i in range(students):
        sid = f"s{i:04d}"
        folder = subs / sid
        if i % 25 == 24:  # a resubmitted copy: byte-identical to the previous student
            shutil.copytree(subs / f"s{i - 1:04d}", folder)
            continue
        stage = STAGES[i % len(STAGES)]
        renames: dict[str, str] = {}
        for f in (REF / stage).rglob("*"):
            if f.suffix not in CODE:
                continue
            t = folder / f.relative_to(REF / stage)
            t.parent.mkdir(parents=True, exist_ok=True)
            text = f.read_text()
            shared = f.name in ("bang_utils.h", "matmul_tiling.h")
            t.write_text(text + f"// {sid}\n" if shared and distinct_headers else text if shared
                         else mutate(text, rng, sid, renames))
        (folder / "grade.toml").write_text(f'[student]\nid = "{sid}"\n')
    return subs, handout


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--students", type=int, default=200)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--shared-headers", action="store_true",
                        help="students keep the headers byte-identical (the common case; cheaper)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="similarity-bench-"))
    try:
        subs, handout = make_class(root, args.students, args.seed, distinct_headers=not args.shared_headers)
        members = [Member(p.name, "", p.name, p, content_hash(p)) for p in sorted(subs.iterdir())]
        started, cpu = time.perf_counter(), time.process_time()
        report = compare_submissions(members, [handout], SimilaritySettings())
        seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu
        started = time.perf_counter()
        similarity_csv(report)
        write_dashboard([], root / "dashboard.html", assignment_title="bench", backend="emu", seed_mode="public",
                        similarity=report)
        render_seconds = time.perf_counter() - started
        dashboard_bytes = (root / "dashboard.html").stat().st_size
    finally:
        shutil.rmtree(root, ignore_errors=True)
    result = {
        "students": report.students, "distinct": report.distinct, "comparisons": report.comparisons,
        "pairs_listed": len(report.pairs), "clusters": len(report.clusters), "seconds": round(seconds, 2), "cpu_seconds": round(cpu_seconds, 2),
        "render_seconds": round(render_seconds, 2), "dashboard_bytes": dashboard_bytes,
        "phases": {k: round(v, 2) for k, v in report.phases.items()},
        "cpu_count": os.cpu_count(), "load_average": [round(x, 2) for x in os.getloadavg()],
    }
    print(f"{report.students} students ({report.distinct} distinct): {report.comparisons} pairs compared, "
          f"{len(report.pairs)} listed, in {seconds:.1f} s wall, {cpu_seconds:.1f} s CPU "
          f"({', '.join(f'{k} {v:.1f} s' for k, v in report.phases.items())}); "
          f"csv + dashboard {render_seconds:.1f} s, {dashboard_bytes / 1e6:.1f} MB; "
          f"load average {result['load_average'][0]} on {result['cpu_count']} cores")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
