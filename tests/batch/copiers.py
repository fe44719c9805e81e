"""What copiers do to a classmate's folder (renamed identifiers, reordered functions, rewritten comments), for the
similarity tests and benchmarks: tests/batch/test_similarity.py and benchmarks/similarity_realcode.py."""

from __future__ import annotations

import re
from pathlib import Path

CODE = (".mlu", ".cpp", ".h", ".py")


def code_files(folder: Path) -> list[Path]:
    return sorted(f for f in folder.rglob("*") if f.suffix in CODE)


def rename_identifiers(folder: Path, renames: dict[str, str]) -> None:
    """What a copier's search-and-replace does: the same renames in every file, code lines only."""
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, sorted(renames, key=len, reverse=True))) + r")\b")
    for f in code_files(folder):
        lines = [line if line.lstrip().startswith("#") else pattern.sub(lambda m: renames[m.group(1)], line)
                 for line in f.read_text().splitlines()]
        f.write_text("\n".join(lines) + "\n")


def top_level_blocks(text: str) -> list[str]:
    """Blocks separated by blank lines outside braces (the references put one between definitions)."""
    blocks, current, depth = [], [], 0
    for line in text.splitlines():
        code = line.split("//")[0]
        if not line.strip() and depth == 0:
            if current:
                blocks.append("\n".join(current))
            current = []
            continue
        current.append(line)
        depth += code.count("{") - code.count("}")
    if current:
        blocks.append("\n".join(current))
    return blocks


def reorder_functions(folder: Path) -> None:
    """Definitions in the reverse order, after the includes (plus the forward declaration a copier adds)."""
    for f in code_files(folder):
        if f.suffix not in (".mlu", ".cpp"):
            continue
        blocks = top_level_blocks(f.read_text())
        head = [b for b in blocks if b.lstrip().startswith(("#", "//")) and "{" not in b]
        body = [b for b in blocks if b not in head]
        f.write_text("\n\n".join(head + ["// (moved around)"] + body[::-1]) + "\n")


def rewrite_comments(folder: Path) -> None:
    """Every comment replaced by other words, extra comments, four-space indentation, trailing spaces."""
    for f in code_files(folder):
        out = []
        for n, line in enumerate(f.read_text().splitlines()):
            marker = "#" if f.suffix == ".py" else "//"
            if f.suffix != ".py" and "//" in line and '"' not in line.split("//")[0]:
                line = line.split("//")[0].rstrip() + ("  // my own note" if line.split("//")[0].strip() else "")
                if not line.strip():
                    continue
            indent = len(line) - len(line.lstrip(" "))
            line = " " * (indent * 2) + line.lstrip(" ")
            if n % 4 == 0 and line.strip() and f.suffix != ".py":
                out.append(" " * (indent * 2) + "/* written by me */")
            out.append(line + "   ")
            if n % 7 == 3 and f.suffix == ".py":
                out.append(f"{marker} explained")
        f.write_text("\n".join(out) + "\n")


_DECLARED = re.compile(r"\b(?:int|int32_t|uint32_t|float|double|half|T|auto|size_t|bool|char|void|int64_t)\s*[*&]*\s*"
                       r"([A-Za-z_]\w*)\s*[=;,()\[]")


def rename_declared(folder: Path, prefix: str = "my_") -> dict[str, str]:
    """A copier's search-and-replace over every name the code declares (variables, parameters, functions),
    leaving the language's and the SDK's names alone; returns the renames."""
    names: set[str] = set()
    for f in code_files(folder):
        names |= {n for n in _DECLARED.findall(f.read_text(errors="replace")) if not n.startswith("__")}
    renames = {n: f"{prefix}{n.lower()}_v" for n in sorted(names)}
    if renames:
        rename_identifiers(folder, renames)
    return renames
