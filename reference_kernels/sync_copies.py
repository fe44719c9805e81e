"""Keeps the copied and generated files of reference_kernels/ in step.

Every submission folder is self-contained (it is what a student hands in), so shared headers, the stage
kernels the bundled example carries, and the per-stage bindings exist as copies:
- `_shared/<header>.h` is the original of every `mlu/<header>` of the same name in the reference submissions
  (sigmoid/*, matmul/*, example/); known_bad/ fixtures keep their own, possibly broken, copies.
- example/mlu/ holds every file of matmul/*/mlu/ and sigmoid/pipeline/mlu/, unchanged.
- `<op>/<stage>/cpp/<op>_binding.cpp` and `<op>/<stage>/ops.py` are rendered from
  `_shared/templates/<op>_binding.cpp.j2` and `_shared/templates/ops.py.j2` with the stage's row of BINDINGS
  (its binding style), so a fix to a binding is made once, in the template.

`python reference_kernels/sync_copies.py` rewrites the copies from the originals; `--check` only reports
the copies that differ (exit status 1), which is what the tests run.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import jinja2

ROOT = Path(__file__).resolve().parent
SHARED = ROOT / "_shared"
TEMPLATES = SHARED / "templates"
EXAMPLE_SOURCES = ("matmul/*/mlu", "sigmoid/pipeline/mlu")


@dataclass(frozen=True)
class Binding:
    """How one reference stage binds its entry to PyTorch. The styles are the three a student may hand in:
    "catch" (AICS-lab, CATCH-era headers, getCurQueue(), PYBIND11_MODULE), "pybind" (torch_mlu 2.x headers,
    PYBIND11_MODULE) and "library" (torch_mlu 2.x, TORCH_LIBRARY + TORCH_LIBRARY_IMPL(PrivateUse1))."""

    style: str
    summary: str = ""  # the pybind11 docstring, where the template uses one
    workspace: bool = True  # MatMul: the binding allocates the fp32 scratch for fp16 K tiles


BINDINGS = {
    "sigmoid/vector": Binding("catch", "Sigmoid on one MLU core with NRAM tiling"),
    "sigmoid/multicore": Binding("library"),
    "sigmoid/pipeline": Binding("pybind", "Sigmoid over every core, double-buffered"),
    "matmul/scalar_gdram": Binding("pybind", workspace=False),  # scalar sums never leave the core
    "matmul/scalar_nram": Binding("pybind", workspace=False),
    "matmul/vector": Binding("pybind"),
    "matmul/multicore": Binding("library"),
    "matmul/pipeline": Binding("pybind"),
    "matmul/sram_union": Binding("pybind"),
}
# What ops.py.j2 needs to know of each op: its title and the entry's Python parameters.
OPS = {
    "sigmoid": {"title": "Sigmoid", "params": "x: torch.Tensor", "args": "x"},
    "matmul": {"title": "MatMul", "params": "a: torch.Tensor, b: torch.Tensor", "args": "a, b"},
}


def reference_submissions() -> list[Path]:
    """Folders graded as references: one per stage of each op, plus the bundled example."""
    folders = sorted(p.parent for p in ROOT.glob("*/*/grade.toml") if p.parent.parent.name != "known_bad")
    return [*folders, ROOT / "example"]


def shared_headers() -> list[Path]:
    return sorted(SHARED.glob("*.h"))


def expected_copies() -> dict[Path, Path]:
    """Copy -> original, for every copied file."""
    copies: dict[Path, Path] = {}
    for original in shared_headers():
        for folder in reference_submissions():
            if (folder / "mlu" / original.name).exists() or folder.name == "example":
                copies[folder / "mlu" / original.name] = original
    header_names = {p.name for p in shared_headers()}
    for pattern in EXAMPLE_SOURCES:
        for mlu_dir in sorted(ROOT.glob(pattern)):
            for original in sorted(mlu_dir.iterdir()):
                if original.name not in header_names:
                    copies[ROOT / "example" / "mlu" / original.name] = original
    return copies


def generated_files() -> dict[Path, bytes]:
    """Path -> content, for every binding and ops.py rendered from a template."""
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), undefined=jinja2.StrictUndefined,
                             keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True)
    files: dict[Path, bytes] = {}
    for key, binding in BINDINGS.items():
        op, stage = key.split("/")
        values = {"op": op, "stage": stage, **OPS[op], **vars(binding)}
        folder = ROOT / op / stage
        for relative, template in ((f"cpp/{op}_binding.cpp", f"{op}_binding.cpp.j2"), ("ops.py", "ops.py.j2")):
            files[folder / relative] = env.get_template(template).render(values).encode()
    return files


def unlisted_stages() -> list[Path]:
    """Reference stage folders that BINDINGS has no row for: their bindings would be unchecked."""
    stages = sorted(p.parent for op in OPS for p in ROOT.glob(f"{op}/*/grade.toml"))
    return [folder for folder in stages if folder.relative_to(ROOT).as_posix() not in BINDINGS]


def wanted() -> dict[Path, bytes]:
    """Every copied or generated file, with the content it must have."""
    return {**{copy: original.read_bytes() for copy, original in expected_copies().items()}, **generated_files()}


def stale_copies() -> list[Path]:
    """Files that are missing or differ from what they must be, example/mlu files with no original, and
    stage folders with no row in BINDINGS."""
    copies = expected_copies()
    stale = [path for path, content in wanted().items() if not path.exists() or path.read_bytes() != content]
    stale += [p for p in sorted((ROOT / "example" / "mlu").glob("*")) if p not in copies]
    return stale + unlisted_stages()


def write_copies() -> list[Path]:
    written = []
    for path, content in wanted().items():
        if not path.exists() or path.read_bytes() != content:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content)
            written.append(path)
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
    for folder in unlisted_stages():
        print(f"no row in BINDINGS for {folder.relative_to(ROOT)}: add one", file=sys.stderr)
    return 1 if unlisted_stages() else 0


if __name__ == "__main__":
    sys.exit(main())
