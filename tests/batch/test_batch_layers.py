"""grader/batch sits below orchestration: it never imports the pipeline or the CLI, and grades with the
function the job names; the name real batches use resolves to the orchestration's grading function."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import grader.batch
from grader.batch.worker import resolve_entry
from grader.drivers.batch import GRADE_ENTRY, grade_batch_job

BATCH = Path(grader.batch.__file__).parent
ABOVE = ("grader.orchestration", "grader.cli")


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):  # function-level imports too
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_no_module_of_grader_batch_imports_orchestration_or_the_cli():
    offending = {p.name: sorted(n for n in _imports(p) if n.startswith(ABOVE)) for p in BATCH.glob("*.py")}
    assert {k: v for k, v in offending.items() if v} == {}
    # And nothing pulls them in indirectly (e.g. through a lower module that imports upwards).
    modules = ", ".join(f"grader.batch.{p.stem}" for p in BATCH.glob("*.py") if p.stem != "__init__")
    code = (f"import sys, {modules}; print(sorted(m for m in sys.modules if m.startswith({ABOVE!r})))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]"


def test_the_batch_entry_names_the_orchestration_grading_function():
    assert resolve_entry(GRADE_ENTRY) is grade_batch_job
