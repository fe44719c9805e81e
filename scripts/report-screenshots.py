#!/usr/bin/env python3
"""The screenshots of issue 16 (feedback in Chinese and English): one failing report in each language, light,
dark (prefers-color-scheme: dark) and phone (390 px wide), as docs/screenshots/report-{zh,en}-{light,dark,phone}.png.

    .venv/bin/python scripts/report-screenshots.py                  # grade tail_dropped twice, then shoot
    .venv/bin/python scripts/report-screenshots.py --reuse /tmp/shots   # reuse <dir>/{zh,en}/report.html

The report is a real grading of reference_kernels/known_bad/tail_dropped (its vector stage, the same grading
tests/test_i18n.py does in both languages), shot with the tests' headless Chromium (tests/reporting/browser.py).
A PNG over --max-kb is reduced to a 256- or 128-colour palette (text and flat fills survive it), then cut at
the bottom if it still is too big.
"""

from __future__ import annotations

import argparse
import io
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.reporting.browser import DESKTOP, PHONE, Chromium, missing  # noqa: E402

SUBMISSION = ROOT / "reference_kernels" / "known_bad" / "tail_dropped"
OUT = ROOT / "docs" / "screenshots"
LANGS = ("zh", "en")
VIEWS = {"light": (DESKTOP, "light", False), "dark": (DESKTOP, "dark", False), "phone": (PHONE, "light", True)}


def grade(lang: str, out: Path) -> Path:
    """The report of a real grading in `lang` (exit code 1: the submission fails, as it should)."""
    proc = subprocess.run([str(ROOT / "grade"), "submit", str(SUBMISSION), "--lang", lang, "--stages", "vector",
                           "--out", str(out), "--no-setup"], cwd=ROOT, capture_output=True, text=True, check=False)
    report = out / "report.html"
    if proc.returncode != 1 or not report.is_file():
        sys.exit(f"grading in {lang} did not give a failing report (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return report


def shrink(png: Path, max_bytes: int) -> int:
    """`png` at most max_bytes: palette first, then the bottom cut off; returns its final size."""
    from PIL import Image

    if png.stat().st_size <= max_bytes:
        return png.stat().st_size
    rgb = Image.open(png).convert("RGB")

    def encoded(image: Image.Image) -> bytes:
        buffer = io.BytesIO()
        image.save(buffer, format="PNG", optimize=True)
        return buffer.getvalue()

    for colours in (256, 128):  # fewer than 128 turns the accent colours grey
        data = encoded(rgb.quantize(colors=colours, method=Image.Quantize.MEDIANCUT))
        if len(data) <= max_bytes:
            break
    while len(data) > max_bytes and rgb.height > 400:
        rgb = rgb.crop((0, 0, rgb.width, int(rgb.height * 0.9)))
        data = encoded(rgb.quantize(colors=128, method=Image.Quantize.MEDIANCUT))
    png.write_bytes(data)
    return len(data)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reuse", type=Path, help="folder holding zh/report.html and en/report.html")
    parser.add_argument("--work", type=Path, default=Path("/tmp/report-screenshots"), help="gradings go here")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--max-kb", type=int, default=390)
    args = parser.parse_args()
    if why := missing():
        sys.exit(f"cannot take screenshots: {why}")
    reports = {lang: (args.reuse / lang / "report.html") if args.reuse else grade(lang, args.work / lang)
               for lang in LANGS}
    args.out.mkdir(parents=True, exist_ok=True)
    with Chromium() as browser:
        for lang, report in reports.items():
            for view, ((width, height), scheme, mobile) in VIEWS.items():
                page = browser.open(report, width=width, height=height, scheme=scheme, mobile=mobile)
                try:
                    if page.report.problems:
                        sys.exit(f"{report} ({view}): {page.report.problems}")
                    png = page.screenshot(args.out / f"report-{lang}-{view}.png")
                finally:
                    page.close()
                size = shrink(png, args.max_kb * 1024)
                print(f"{png.relative_to(ROOT) if png.is_relative_to(ROOT) else png}  {size // 1024} KB")


if __name__ == "__main__":
    main()
