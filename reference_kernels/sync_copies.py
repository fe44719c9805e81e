"""Keeps the copied files of reference_kernels/ in step.

Every submission folder is self-contained (it is what a student hands in), so shared headers and the stage
kernels the bundled example carries exist as copies:
- `_shared/<header>` is the original of every `mlu/<header>` of the same name in the reference submissions
  (sigmoid/*, matmul/*, example/); known_bad/ fixtures keep their own, possibly broken, copies.
- example/mlu/ holds every file of matmul/*/mlu/ and sigmoid/pipeline/mlu/, unchanged.

`python reference_kernels/sync_copies.py` rewrites the copies from the originals; `--check` only reports
the copies that differ (exit status 1), which is what the tests run.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
SHARED = ROOT / "_shared"
EXAMPLE_SOURCES = ("matmul/*/mlu", "sigmoid/pipeline/mlu")


def reference_submissions() -> list[Path]:
    """Folders graded as references: one per stage of each op, plus the bundled example."""
    folders = sorted(p.parent for p in ROOT.glob("*/*/grade.toml") if p.parent.parent.name != "known_bad")
    return [*folders, ROOT / "example"]


def expected_copies() -> dict[Path, Path]:
    """Copy -> original, for every copied file."""
    copies: dict[Path, Path] = {}
    for original in sorted(SHARED.iterdir()):
        for folder in reference_submissions():
            if (folder / "mlu" / original.name).exists() or folder.name == "example":
                copies[folder / "mlu" / original.name] = original
    for pattern in EXAMPLE_SOURCES:
        for mlu_dir in sorted(ROOT.glob(pattern)):
            for original in sorted(mlu_dir.iterdir()):
                if original.name not in {p.name for p in SHARED.iterdir()}:
                    copies[ROOT / "example" / "mlu" / original.name] = original
    return copies


def stale_copies() -> list[Path]:
    """Copies that are missing or differ from their original, plus example/mlu files with no original."""
    copies = expected_copies()
    stale = [copy for copy, original in copies.items()
             if not copy.exists() or copy.read_bytes() != original.read_bytes()]
    stale += [p for p in sorted((ROOT / "example" / "mlu").glob("*")) if p not in copies]
    return stale


def write_copies() -> list[Path]:
    written = []
    for copy, original in expected_copies().items():
        if not copy.exists() or copy.read_bytes() != original.read_bytes():
            copy.parent.mkdir(parents=True, exist_ok=True)
            copy.write_bytes(original.read_bytes())
            written.append(copy)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="report stale copies instead of rewriting them")
    args = parser.parse_args(argv)
    if args.check:
        stale = stale_copies()
        for path in stale:
            print(f"stale copy: {path.relative_to(ROOT)}", file=sys.stderr)
        return 1 if stale else 0
    for path in write_copies():
        print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
