"""The dependency direction DESIGN.md draws (cli -> server -> orchestration -> sandbox/checks/scoring/reporting ->
spec -> results), checked on the sources with scripts/import_graph.py: no package imports a layer above it, no two
packages import each other, no two modules of one package either, DESIGN.md's arrow list is the real one, and the
report reads no assignment spec (it renders from the results document alone: GradeResult.assignment_facts)."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

from factories import write_tree

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


def _design_arrows() -> set[tuple[str, str]]:
    """The arrows of DESIGN.md's ```arrows block ("a -> b, c" per line)."""
    text = (ROOT / "DESIGN.md").read_text(encoding="utf-8")
    blocks = text.split("```arrows\n")
    assert len(blocks) == 2, "DESIGN.md needs exactly one ```arrows block"
    arrows = set()
    for line in blocks[1].split("```", 1)[0].splitlines():
        source, sep, targets = line.partition(" -> ")
        assert sep and source.strip(), f"not an arrow line: {line!r}"
        arrows |= {(source.strip(), t.strip()) for t in targets.split(",")}
    return arrows


def test_designs_arrow_list_is_the_real_one():
    real = set(graph.edges(ROOT))
    design = _design_arrows()
    missing = sorted(f"{a} -> {b}" for a, b in real - design)
    claimed = sorted(f"{a} -> {b}" for a, b in design - real)
    assert (missing, claimed) == ([], []), ("arrows the code has and DESIGN.md lacks, arrows DESIGN.md claims "
                                            "and the code lacks: paste the '# arrows' block of "
                                            "scripts/import_graph.py into DESIGN.md")


def test_no_import_cycle_inside_a_package():
    assert graph.module_cycles(ROOT) == []


def test_a_circle_inside_a_package_is_found_however_it_is_hidden(tmp_path):
    write_tree(tmp_path, {"grader/__init__.py": "", "grader/sandbox/__init__.py": "",
                     "grader/sandbox/a.py": "from grader.sandbox.b import f\n",
                     "grader/sandbox/b.py": "def f():\n    from . import c\n",
                     "grader/sandbox/c.py": "import grader.sandbox.a\n",
                     "grader/sandbox/d.py": "from grader.sandbox import a\n"})
    assert graph.module_cycles(tmp_path) == [["grader.sandbox.a", "grader.sandbox.b", "grader.sandbox.c"]]
    (tmp_path / "grader/sandbox/c.py").write_text("from grader.sandbox import d\n")  # d -> a -> b -> c -> d
    assert graph.module_cycles(tmp_path) == [["grader.sandbox.a", "grader.sandbox.b", "grader.sandbox.c",
                                              "grader.sandbox.d"]]
    (tmp_path / "grader/sandbox/c.py").write_text("from grader.results import GradeResult\n")
    assert graph.module_cycles(tmp_path) == []
