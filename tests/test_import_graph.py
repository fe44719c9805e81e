"""The dependency direction DESIGN.md draws (cli -> server -> orchestration -> sandbox/checks/scoring/reporting ->
spec -> results), checked on the sources with scripts/import_graph.py: no package imports a layer above it, no two
packages import each other, and the report reads no assignment spec (it renders from the results document alone:
GradeResult.assignment_facts)."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_SPEC = importlib.util.spec_from_file_location("import_graph", ROOT / "scripts" / "import_graph.py")
assert _SPEC is not None and _SPEC.loader is not None
graph = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(graph)

LOADERS = {"load_assignment", "load_programs", "assignment_dir", "load_thresholds"}


def test_no_package_imports_a_layer_above_it():
    upward = {f"{a} -> {b}": sorted(lines) for (a, b), lines in graph.edges(ROOT).items()
              if graph.RANK.get(b, 99) < graph.RANK.get(a, 99)}
    assert not upward, upward


def test_no_import_cycle_between_packages():
    arrows: dict[str, set[str]] = {}
    for a, b in graph.edges(ROOT):
        arrows.setdefault(a, set()).add(b)
    assert graph.cycles(arrows) == []


def test_every_package_has_a_layer():
    packages = {unit for pair in graph.edges(ROOT) for unit in pair}
    assert packages - set(graph.RANK) == set()


def test_the_report_loads_no_assignment_spec():
    found = []
    for path in (ROOT / "grader" / "reporting").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("grader.programs"):
                found.append(f"{path.name}: {node.module}")
            if isinstance(node, ast.ImportFrom | ast.Import):
                found += [f"{path.name}: {a.name}" for a in node.names if a.name in LOADERS]
    assert not found, found
