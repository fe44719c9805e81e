#!/usr/bin/env python3
"""The screenshots of issue 29's profile view: the report's per-core timeline of a pipelined kernel
(reference_kernels/sigmoid/pipeline, stage pipeline) and of a non-pipelined one (sigmoid/vector, stage vector),
graded with `grade submit --profile`, in English and Chinese, light and dark, as
<out>/timeline-{pipeline,vector}-{en,zh}-{light,dark}.png (the `.timeline` block only).

    .venv/bin/python scripts/timeline-screenshots.py --out /tmp/shots          # grade four times, then shoot
    .venv/bin/python scripts/timeline-screenshots.py --reuse /tmp/tl --out /tmp/shots  # <dir>/<kernel>-<lang>/
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.reporting.browser import DESKTOP, Chromium, missing  # noqa: E402

KERNELS = {"pipeline": "pipeline", "vector": "vector"}  # reference kernel -> the stage shown
LANGS = ("en", "zh")


def grade(kernel: str, lang: str, out: Path, sandbox: str) -> Path:
    proc = subprocess.run([str(ROOT / "grade"), "submit", str(ROOT / "reference_kernels" / "sigmoid" / kernel),
                           "--stages", KERNELS[kernel], "--lang", lang, "--profile", "--out", str(out), "--no-setup",
                           "--sandbox", sandbox],
                          cwd=ROOT, capture_output=True, text=True, check=False)
    report = out / "report.html"
    if not report.is_file() or not (out / "profile.json").is_file():
        sys.exit(f"grading {kernel} ({lang}) wrote no report or profile (exit {proc.returncode}):\n"
                 f"{proc.stderr[-3000:]}")
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reuse", type=Path, help="folder holding <kernel>-<lang>/report.html")
    parser.add_argument("--work", type=Path, default=Path("/tmp/timeline-screenshots"), help="gradings go here")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--sandbox", default="auto", help="grade submit's --sandbox")
    args = parser.parse_args()
    if why := missing():
        sys.exit(f"cannot take screenshots: {why}")
    args.out.mkdir(parents=True, exist_ok=True)
    with Chromium() as browser:
        for kernel in KERNELS:
            for lang in LANGS:
                name = f"{kernel}-{lang}"
                report = (args.reuse / name / "report.html") if args.reuse else grade(kernel, lang, args.work / name,
                                                                                      args.sandbox)
                for scheme in ("light", "dark"):
                    page = browser.open(report, width=DESKTOP[0], height=DESKTOP[1], scheme=scheme)
                    try:
                        if page.report.problems:
                            sys.exit(f"{report}: {page.report.problems}")
                        block = page.page.query_selector(".timeline")
                        if block is None:
                            sys.exit(f"{report}: no timeline drawn")
                        png = args.out / f"timeline-{name}-{scheme}.png"
                        block.screenshot(path=str(png))
                    finally:
                        page.close()
                    print(f"{png}  {png.stat().st_size // 1024} KB")


if __name__ == "__main__":
    main()
