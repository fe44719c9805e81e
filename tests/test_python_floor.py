"""The Python the project declares (pyproject `requires-python`) is the Python it needs: 3.11.0, since Debian
bookworm's python3.11 (3.11.2, also the sandbox image's) is one a new user's `./bootstrap.sh` can pick.

What this checks, concretely: requires-python, ruff's target-version and FLOOR agree; every source file parses
with the floor's grammar; and no code uses the standard library additions after 3.11.0 that this project has
reached for or plausibly would (issue 38: `extractall(filter="data")` needs 3.11.4). The last is a list, not a
proof; the proof is the suite run on a 3.11.2 venv (README, "Another Python"). Tars are unpacked by
bang_emu.safe_tar, whose tests run it as on a Python without the filter."""

from __future__ import annotations

import ast
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FLOOR = (3, 11)  # 3.11.0: tomllib, hashlib.file_digest, ExceptionGroup, the typing of the code base
SOURCES = [p for top in ("grader", "sandbox", "tests", "benchmarks", "scripts") for p in (ROOT / top).rglob("*.py")
           if "rootfs" not in p.parts]

# Standard library additions after 3.11.0, by how they show in code: keyword arguments of any call, attributes.
NEWER_KEYWORDS = {
    "filter": ({"extractall", "extract"}, "3.11.4 (tarfile extraction filters): use bang_emu.safe_tar"),
    "onexc": ({"rmtree"}, "3.12"),
    "walk_up": ({"relative_to"}, "3.12"),
    "delete": ({"TemporaryDirectory"}, "3.12"),
}
NEWER_ATTRIBUTES = {
    "data_filter": "3.11.4", "tar_filter": "3.11.4", "fully_trusted_filter": "3.11.4", "FilterError": "3.11.4",
    "extraction_filter": "3.11.4", "batched": "3.12 (itertools)", "override": "3.12 (typing)",
    "is_junction": "3.12", "with_segments": "3.12",
}


def _called_name(func: ast.expr) -> str:
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def test_requires_python_is_the_floor_and_ruff_targets_it():
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert pyproject["project"]["requires-python"] == ">={}.{}".format(*FLOOR)
    assert pyproject["tool"]["ruff"]["target-version"] == "py{}{}".format(*FLOOR)
    assert sys.version_info[:2] >= FLOOR


def test_every_source_parses_with_the_floors_grammar():
    assert len(SOURCES) > 100
    broken = []
    for path in SOURCES:
        try:
            ast.parse(path.read_text(encoding="utf-8"), str(path), feature_version=FLOOR)
        except SyntaxError as exc:
            broken.append(f"{path.relative_to(ROOT)}:{exc.lineno}: {exc.msg}")
    assert not broken, broken


def newer_than_floor(source: str, name: str) -> list[str]:
    """The uses in `source` of NEWER_KEYWORDS and NEWER_ATTRIBUTES, as "name:line: what needs which Python"."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            called = _called_name(node.func)
            found += [f"{name}:{node.lineno}: {called}({kw.arg}=...) needs {NEWER_KEYWORDS[kw.arg][1]}"
                      for kw in node.keywords if kw.arg in NEWER_KEYWORDS and called in NEWER_KEYWORDS[kw.arg][0]]
        elif isinstance(node, ast.Attribute) and node.attr in NEWER_ATTRIBUTES:
            found.append(f"{name}:{node.lineno}: .{node.attr} needs {NEWER_ATTRIBUTES[node.attr]}")
        elif isinstance(node, ast.ImportFrom):
            found += [f"{name}:{node.lineno}: from {node.module} import {a.name} needs {NEWER_ATTRIBUTES[a.name]}"
                      for a in node.names if a.name in NEWER_ATTRIBUTES]
    return found


def test_no_standard_library_use_newer_than_the_floor():
    found = [hit for path in SOURCES
             for hit in newer_than_floor(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))]
    assert not found, found


def test_the_check_sees_what_issue_38_was_about():
    before = 'with tarfile.open(a) as tar:\n    tar.extractall(d, filter="data")\n'
    assert newer_than_floor(before, "calibration.py") == [
        "calibration.py:2: extractall(filter=...) needs 3.11.4 (tarfile extraction filters): use bang_emu.safe_tar"]
    assert sorted(newer_than_floor("from itertools import batched\nshutil.rmtree(p, onexc=f)\n", "x.py")) == [
        "x.py:1: from itertools import batched needs 3.12 (itertools)", "x.py:2: rmtree(onexc=...) needs 3.12"]
