#!/usr/bin/env python3
"""The table of issue 12: public AICS chapter-5 sigmoid answers and Cambricon's example, moved into the handout
layout without changing a line (tests/realcode/answers.py: the answers, the grader's layout adapter, and our
reading of each answer's code), graded by the real grader, and compared with that reading.

    .venv/bin/python scripts/realcode_table.py                   # every answer whose mirror is here
    .venv/bin/python scripts/realcode_table.py --only kolp323,geotle77 --json table.json
    .venv/bin/python scripts/realcode_table.py --reuse /tmp/rc   # reuse results.json already in /tmp/rc/out/<key>

Mirrors are read from /work/.mirror (or $REALCODE_MIRRORS); an answer without one is listed as "no mirror".
One grading at a time (~1-2 min each on the emulator): the machine is shared.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.realcode import answers  # noqa: E402

_ERROR_LINE = re.compile(r"^(?P<file>[^\s:]+):(?P<line>\d+):(?:\d+:)? (?:fatal )?error: (?P<msg>.*)$", re.M)
_ADAPTERS = {
    "exp_5_1_pybind": "lab layout -> mlu/, cpp/; + ops.py calling libmlu_custom_ext.{op}, grade.toml extension",
    "torch_library": "example src/ -> cpp/, src/mlu -> mlu/ (+ header at cpp/mlu/ for its relative include); "
                     "+ ops.py calling torch.ops.mlu_custom_ext.{op}",
    "exp_5_2_program": "program -> mlu/ unchanged; + grader's host entry launching {op} with main()'s dim/type, "
                       "float32-only binding, ops.py",
}


def first_compile_error(output: str) -> str:
    match = _ERROR_LINE.search(output)
    if not match:
        lines = [line for line in output.splitlines() if "error" in line.lower()]
        return lines[0].strip() if lines else output.strip().splitlines()[-1:][0] if output.strip() else ""
    file = match["file"].replace("/submission/", "")
    return f"{file}:{match['line']}: {match['msg'].strip()}"


def whose(answer: answers.Answer, summary: dict) -> str:
    """A compile error in code we judge real cncc builds is the emulator's; otherwise the student's."""
    if summary["verdict"] != "compile_error":
        return ""
    return "student's" if answer.expect.verdict == "compile_error" else "emulator's"


def row(answer: answers.Answer, reuse: Path | None, work: Path, sandbox: str | None = None) -> dict:
    base = {
        "key": answer.key,
        "repository": answer.repo + (f"@{answer.commit}" if answer.commit else ""),
        "files": sorted(answer.files),
        "adapter": _ADAPTERS[answer.adapter].format(op=answer.op),
        "reading": answer.reading,
        "expected": {
            "verdict": answer.expect.verdict,
            "score": list(answer.expect.score),
            "stages": sorted(answer.expect.stages_passed),
        },
    }
    if not answers.available(answer):
        return {**base, "verdict": "no mirror", "right": None}
    result_path = (reuse / "out" / answer.key / "results.json") if reuse else None
    if result_path and result_path.exists():
        result = json.loads(result_path.read_text())
    else:
        staged = answers.stage(answer, work / "sub" / answer.key)
        result = answers.grade(staged.path, work / "out" / answer.key, assignment=answer.assignment,
                               stages=answer.stages, sandbox=sandbox)
    s = answers.summary(result)
    want = answer.expect
    right = (
        s["verdict"] == want.verdict
        and want.passed_groups <= s["groups_passed"]
        and want.failed_groups <= s["groups_failed"]
        and s["stages_passed"] == set(want.stages_passed)
        and want.score[0] <= s["score"] <= want.score[1]
    )
    compile_error = first_compile_error(s["compiler_output"]) if s["verdict"] == "compile_error" else ""
    return {
        **base,
        "verdict": s["verdict"],
        "score": s["score"],
        "max_score": s["max_score"],
        "stages_passed": sorted(s["stages_passed"]),
        "groups_failed": sorted(s["groups_failed"]),
        "message": s["message"],
        "compile_error": compile_error,
        "compile_error_is": whose(answer, s),
        "right": right,
    }


def markdown(rows: list[dict]) -> str:
    out = [
        "| repository | files (handout layout) | layout adapter | verdict | score | stages passed | failed groups "
        "| our reading of the code | verdict right? |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if r["verdict"] == "no mirror":
            out.append(f"| {r['repository']} | | | no mirror | | | | {r['reading']} | not graded |")
            continue
        verdict = r["verdict"]
        if r.get("compile_error"):
            verdict += f" ({r['compile_error_is']}: `{r['compile_error']}`)"
        right = "yes" if r["right"] else f"NO (expected {r['expected']['verdict']}, {r['expected']['score']}, " \
                                          f"stages {r['expected']['stages'] or 'none'})"
        out.append(
            f"| {r['repository']} | {', '.join(r['files'])} | {r['adapter']} | {verdict} | "
            f"{r['score']:g}/{r['max_score']:g} | {', '.join(r['stages_passed']) or 'none'} | "
            f"{', '.join(r['groups_failed']) or 'none'} | {r['reading']} | {right} |"
        )
    return "\n".join(out)


def main() -> int:  # noqa: D103
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", help="comma-separated answer keys")
    parser.add_argument("--reuse", type=Path, help="a work folder of an earlier run: reuse its results.json")
    parser.add_argument("--work", type=Path, default=Path("/tmp/realcode"), help="where to stage and grade")
    parser.add_argument("--json", type=Path, help="also write the rows as JSON here")
    parser.add_argument("--sandbox", help="passed to grade submit (default: the grader's, docker)")
    args = parser.parse_args()
    chosen = answers.ANSWERS
    if args.only:
        keys = set(args.only.split(","))
        chosen = [a for a in chosen if a.key in keys]
    rows = []
    for answer in chosen:
        print(f"grading {answer.key} ({answer.repo}) ...", file=sys.stderr, flush=True)
        rows.append(row(answer, args.reuse, args.work, args.sandbox))
    print(markdown(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    wrong = [r["key"] for r in rows if r["right"] is False]
    if wrong:
        print(f"\nverdicts that differ from our reading: {', '.join(wrong)}", file=sys.stderr)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
