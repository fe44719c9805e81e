"""Print the import graph of grader/ by package: arrows, cycles, and arrows that point upward.

Reads the sources with ast (nothing is imported), so it runs on any checkout:
    python scripts/import_graph.py [ROOT]
Imports inside functions count too (a lazy import is still a dependency). The layer order below is DESIGN.md's
picture, top to bottom; an arrow from a lower layer to a higher one is "upward", between packages of one layer
"sideways".
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

# Top to bottom (DESIGN.md "Layers"); packages on one line share a layer.
LAYERS: list[tuple[str, ...]] = [
    ("cli",),
    ("server",),  # the course server: a front end like the CLI, over the drivers, orchestration and batch
    ("drivers",),  # many submissions (batch, calibration, reference check) over orchestration's one
    ("orchestration",),
    ("programs", "batch"),
    ("backends",),  # a backend owns its image and runner needs: above the sandbox, which never names one
    ("sandbox", "checks", "scoring", "reporting", "layout"),
    ("project_layouts",),
    ("spec", "gradescope"),
    ("results", "atomic_file", "cache_home"),
    ("i18n",),
    ("bang_harness",),
    ("bang_emu",),
]
RANK = {name: i for i, layer in enumerate(LAYERS) for name in layer}


_PACKAGES = {p.stem for p in (Path(__file__).resolve().parents[1] / "grader").iterdir() if not p.name.startswith("_")}


def _unit(module: str) -> str | None:
    """The package an absolute module name belongs to: grader.x.y -> x; bang_harness.* / bang_emu.* as is."""
    parts = module.split(".")
    if parts[0] == "grader" and len(parts) > 1:
        return parts[1] if parts[1] in _PACKAGES else None
    if parts[0] in ("bang_harness", "bang_emu"):
        return parts[0]
    return None


def _module_name(root: Path, path: Path) -> str:
    rel = path.relative_to(root).with_suffix("")
    parts = list(rel.parts)
    if parts[0] == "sandbox" and len(parts) > 1 and parts[1] in ("bang_harness", "bang_emu"):
        parts = parts[1:]
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _files(root: Path) -> list[Path]:
    files = sorted((root / "grader").rglob("*.py"))
    files += sorted(p for p in (root / "sandbox").rglob("*.py") if "/tests/" not in str(p) and "pyshim" not in str(p))
    return files


def imports(root: Path) -> list[tuple[str, str, Path]]:
    """(importing module, imported module, file) for every import of grader/ (the emulator and harness too), lazy
    ones included. `from a.b import c` names a.b.c when that is a module of the tree, else a.b."""
    files = [p for p in _files(root) if _unit(_module_name(root, p))]
    known = {_module_name(root, p) for p in files}
    out: list[tuple[str, str, Path]] = []
    for path in files:
        module = _module_name(root, path)
        is_pkg = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = module.split(".")
                    base = base[: len(base) - node.level + (1 if is_pkg else 0)]
                    prefix = ".".join(base + ([node.module] if node.module else []))
                else:
                    prefix = node.module or ""
                targets = [f"{prefix}.{a.name}" if f"{prefix}.{a.name}" in known or not node.module else prefix
                           for a in node.names]
            out += [(module, target, path) for target in dict.fromkeys(targets)]
    return out


def edges(root: Path) -> dict[tuple[str, str], set[str]]:
    """{(from package, to package): {"file.py -> module", ...}} for grader/ (the emulator and harness too)."""
    out: dict[tuple[str, str], set[str]] = defaultdict(set)
    for module, target, path in imports(root):
        src_unit, dst_unit = _unit(module), _unit(target)
        if dst_unit and dst_unit != src_unit:
            out[(src_unit, dst_unit)].add(f"{path.relative_to(root)} -> {target}")
    return out


def module_cycles(root: Path) -> list[list[str]]:
    """Circles between the modules of one package (lazy imports count: a circle is a circle however it is hidden);
    a package's __init__ is left out, as importing a submodule always runs it."""
    files = [p for p in _files(root) if _unit(_module_name(root, p))]
    modules = {_module_name(root, p): p.name == "__init__.py" for p in files}  # name -> is a package
    graph: dict[str, set[str]] = defaultdict(set)
    for module, target, _path in imports(root):
        inside = module.rsplit(".", 1)[0] == target.rsplit(".", 1)[0] and target != module
        if inside and modules.get(target) is False and not modules[module]:
            graph[module].add(target)
    return cycles(graph)


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one package (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def main(argv: list[str]) -> int:
    root = Path(argv[1] if len(argv) > 1 else ".").resolve()
    found = edges(root)
    graph: dict[str, set[str]] = defaultdict(set)
    for a, b in found:
        graph[a].add(b)
    print("# arrows (package -> packages)")
    for a in sorted(graph, key=lambda u: (RANK.get(u, 99), u)):
        print(f"{a} -> {', '.join(sorted(graph[a], key=lambda u: (RANK.get(u, 99), u)))}")
    print("\n# cycles")
    for comp in cycles(graph):
        print(" <-> ".join(comp))
        for a in comp:
            for b in comp:
                for line in sorted(found.get((a, b), ())):
                    print(f"    {line}")
    print("\n# cycles between the modules of one package")
    for comp in module_cycles(root):
        print(" <-> ".join(comp))
    print("\n# upward and sideways arrows (by DESIGN.md's layers)")
    for (a, b), lines in sorted(found.items()):
        ra, rb = RANK.get(a, 99), RANK.get(b, 99)
        if ra >= rb:
            kind = "upward" if ra > rb else "sideways"
            print(f"{kind}: {a} -> {b}")
            for line in sorted(lines):
                print(f"    {line}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
