"""The similarity table of issue 28 on a fill-in-the-blank lab: public AICS exp_5_1 answers plus planted copies
(tests/realcode/similarity_class.py builds the class from the mirrors at run time), every pair's score and whether
it is flagged, with the class-common passages kept (`--common-share 1`, before issue 28) and dropped (the default),
without a template and with an approximate one (one answer with its kernel bodies emptied).

    .venv/bin/python benchmarks/similarity_realcode.py               # the table, markdown
    .venv/bin/python benchmarks/similarity_realcode.py --json t.json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from grader.batch.intake import content_hash  # noqa: E402
from grader.batch.similarity import Member, SimilaritySettings, compare_submissions  # noqa: E402
from tests.realcode import similarity_class  # noqa: E402


def scores(klass: Path, template: list[Path], settings: SimilaritySettings) -> dict[tuple[str, str], dict]:
    members = [Member(p.name, p.name, p.name, p, content_hash(p)) for p in sorted(klass.iterdir())]
    every = compare_submissions(members, template, SimilaritySettings(
        **{**settings.__dict__, "threshold": 1e-9, "min_shared": 0}))  # every pair that shares anything
    return {(p.a, p.b): {"score": round(p.score, 3), "shared": p.shared,
                         "flagged": p.score >= settings.threshold and p.shared >= settings.min_shared}
            for p in every.pairs}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if missing := similarity_class.missing():
        print(f"no mirror of {', '.join(missing)} (fetch github:<repo>)", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="similarity-realcode-"))
    klass = similarity_class.build(work / "class")
    template = similarity_class.approximate_template(klass, work / "template")
    default = SimilaritySettings()
    runs = {}
    for name, settings, templates in (
        ("before", SimilaritySettings(common_share=1.0), []),
        ("before_template", SimilaritySettings(common_share=1.0), [template]),
        ("after", default, []),
        ("after_template", default, [template]),
    ):
        started = time.monotonic()
        runs[name] = scores(klass, templates, settings)
        print(f"{name}: {time.monotonic() - started:.1f} s", file=sys.stderr)
    names = sorted(p.name for p in klass.iterdir())
    pairs = [(a, b) for i, a in enumerate(names) for b in names[i + 1 :]]
    rows = []
    for pair in pairs:
        kind = ("copy" if pair in similarity_class.COPIES else
                "honest" if set(pair) <= set(similarity_class.HONEST) else "copier~other")
        rows.append({"pair": list(pair), "kind": kind, **{
            name: runs[name].get(pair, {"score": 0.0, "shared": 0, "flagged": False}) for name in runs}})
    print(f"threshold {default.threshold}, min_shared {default.min_shared}, common_share {default.common_share}; "
          f"class: {len(similarity_class.HONEST)} public answers + {len(similarity_class.PLANTED)} planted copies")
    print("| pair | kind | before | before, approx. template | after | after, approx. template |")
    print("|---|---|---|---|---|---|")
    for row in sorted(rows, key=lambda r: (r["kind"] != "copy", -r["after"]["score"])):
        cells = [f"{row[n]['score']:.2f} ({row[n]['shared']}){' **flagged**' if row[n]['flagged'] else ''}"
                 for n in runs]
        print(f"| {row['pair'][0]} ~ {row['pair'][1]} | {row['kind']} | " + " | ".join(cells) + " |")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
