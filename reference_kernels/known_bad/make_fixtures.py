"""Makes the known-bad fixtures: each is a reference submission with exactly one defect.

Every fixture is a copy of the reference named by `derived_from`, with a few textual edits (the defect) that
must each apply exactly once, a grade.toml naming the fixture, and an expected.toml saying which verdict the
grader must give and which words its message must contain. Rerun after changing a reference:
`.venv/bin/python reference_kernels/known_bad/make_fixtures.py` (it rewrites every fixture folder);
`--out DIR` writes them under DIR instead (the tests compare that with the committed fixtures).
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

HERE = Path(__file__).resolve().parent
REFERENCES = HERE.parent

Edit = tuple[str, str, str]  # (file inside the submission, text to replace, replacement)


class FixtureError(Exception):
    """An edit no longer applies to its reference: the reference changed under it."""


def make_fixture(out: Path, name: str, origin: str, assignment: str, verdict: str, message_contains: list[str],
                 what: str, edits: list[Edit], shows_on: str = "") -> Path:
    """Write <out>/<name>/ from reference <origin> with `edits` applied; returns the folder."""
    target = out / name
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(REFERENCES / origin, target)
    for relative, old, new in edits:
        path = target / relative
        text = path.read_text(encoding="utf-8")
        if text.count(old) != 1:
            raise FixtureError(f"{name}: the edit of {relative} matches {text.count(old)} times, not once")
        path.write_text(text.replace(old, new), encoding="utf-8")
    grade = [f'id = "known-bad-{name.replace("_", "-")}"' if line.startswith("id = ")
             else f'name = "Known-bad fixture: {name}"' if line.startswith("name = ") else line
             for line in (target / "grade.toml").read_text(encoding="utf-8").splitlines()]
    (target / "grade.toml").write_text("\n".join(grade) + "\n", encoding="utf-8")
    comments = [what] + ([f"Shows on: {shows_on}"] if shows_on else [])
    words = ", ".join(f'"{w}"' for w in message_contains)
    (target / "expected.toml").write_text(
        "".join(f"# {line}\n" for line in comments)
        + f'assignment = "{assignment}"\nverdict = "{verdict}"\nmessage_contains = [{words}]\n'
        + f'derived_from = "{origin}"\n', encoding="utf-8")
    return target


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE, help="where to write the fixture folders")
    out = parser.parse_args(argv).out
    SV = "mlu/sigmoid_vector.mlu"
    make_fixture(out, "tail_dropped", "sigmoid/vector", "sigmoid", "wrong_answer", ["never written"],
            "Only whole 64-element vector lines are processed: the last count % 64 elements are never written.",
            [(SV, "  for (int64_t offset = 0; offset < count; offset += tile_elems) {",
                  "  const int64_t aligned_count = FLOOR_ALIGN(count, (int64_t)VECTOR_ALIGN_ELEMS);\n"
                  "  for (int64_t offset = 0; offset < aligned_count; offset += tile_elems) {"),
             (SV, "    const int n = (int)MIN((int64_t)tile_elems, count - offset);",
                  "    const int n = (int)MIN((int64_t)tile_elems, aligned_count - offset);")],
            "element counts that are not a multiple of 64")
    SM = "mlu/sigmoid_multicore.mlu"
    make_fixture(out, "wrong_task_offset", "sigmoid/multicore", "sigmoid", "wrong_answer", ["DIFF"],
            "Each task reads its input at taskId * (count / taskDim), ignoring the remainder spread, but writes at the right offset.",
            [(SM, "    __memcpy(tile, x + offset, n * sizeof(T), GDRAM2NRAM);",
                  "    __memcpy(tile, x + taskId * (count / taskDim) + (offset - begin), n * sizeof(T), GDRAM2NRAM);")],
            "more than one task (count > 1024) and count % taskDim != 0")
    SP = "mlu/sigmoid_pipeline.mlu"
    make_fixture(out, "missing_sync_io", "sigmoid/pipeline", "sigmoid", "runtime_error", ["__sync_io"],
            "The pipeline waits for the vector unit but not for the IO-DMA queue: tile i is computed before its async load has landed.",
            [(SP, "    __sync_io();\n    __sync_compute();", "    __sync_compute();")],
            "every shape (real hardware computes on stale NRAM; the emulator's async-hazard check reports it)")
    make_fixture(out, "nram_overflow", "sigmoid/vector", "sigmoid", "runtime_error", ["NRAM"],
            "The whole input is copied into NRAM at once, with no tiling: any input over 640 KB overflows the NRAM buffer.",
            [(SV, """  for (int64_t offset = 0; offset < count; offset += tile_elems) {
    // The last tile is the tail: copy only what exists, compute on the padded count (tile_elems is
    // a multiple of 64, so the padding stays inside the buffer) and store only what exists.
    const int n = (int)MIN((int64_t)tile_elems, count - offset);
    __memcpy(tile, x + offset, n * sizeof(T), GDRAM2NRAM);
    __bang_active_sigmoid(tile, tile, CEIL_ALIGN(n, VECTOR_ALIGN_ELEMS));
    __memcpy(y + offset, tile, n * sizeof(T), NRAM2GDRAM);
  }""", """  (void)tile_elems;
  __memcpy(tile, x, count * sizeof(T), GDRAM2NRAM);
  __bang_active_sigmoid(tile, tile, CEIL_ALIGN(count, VECTOR_ALIGN_ELEMS));
  __memcpy(y, tile, count * sizeof(T), NRAM2GDRAM);""")],
            "more than 163840 fp32 (327680 fp16) elements")
    MT = "mlu/matmul_tiling.h"
    make_fixture(out, "out_of_bounds_write", "matmul/vector", "matmul", "runtime_error", ["out-of-bounds"],
            "Result rows are stored with their padded width (a multiple of 64) instead of N: the last row writes past the end of c.",
            [(MT, """          __memcpy(c + m0 * N + r.n0, result, r.nt * sizeof(T), NRAM2GDRAM, N * sizeof(T), r.ntp * sizeof(T),""",
                  """          __memcpy(c + m0 * N + r.n0, result, r.ntp * sizeof(T), NRAM2GDRAM, N * sizeof(T), r.ntp * sizeof(T),""")],
            "N not a multiple of 64")
    MM = "mlu/matmul_multicore.mlu"
    make_fixture(out, "output_partly_unwritten", "matmul/multicore", "matmul", "wrong_answer", ["never written"],
            "Rows are split M / taskDim per task with no remainder: the last M % taskDim rows of c are never written.",
            [(MM, "  task_range(M, taskId, taskDim, &m_begin, &m_end);",
                  "  m_begin = taskId * (M / taskDim);\n  m_end = m_begin + M / taskDim;")],
            "M > 16 (one task per core) and M % 16 != 0")
    make_fixture(out, "half_running_sum", "matmul/scalar_gdram", "matmul", "wrong_answer", ["DIFF"],
            "The running sum has the operand type T: for fp16 every addition rounds to half, losing ~3 bits by K = 1024; fp32 is unaffected.",
            [("mlu/matmul_scalar_gdram.mlu", "      float sum = 0.0f;", "      T sum = 0.0f;")],
            "float16 with a long reduction (K = 2048: DIFF1 ~6e-3 > 3e-3); every fp32 case passes")
    make_fixture(out, "compile_error", "sigmoid/vector", "sigmoid", "compile_error", ["__bang_active_sigmod"],
            "The builtin is misspelt (__bang_active_sigmod): the .mlu does not compile.",
            [(SV, "    __bang_active_sigmoid(tile, tile,", "    __bang_active_sigmod(tile, tile,")])
    make_fixture(out, "wrapper_calls_torch_sigmoid", "sigmoid/vector", "sigmoid", "not_using_kernel", ["kernel"],
            "ops.py returns torch.sigmoid(x): the right numbers, computed without the student's kernel.",
            [("ops.py", "import my_ops_ext\n", "import my_ops_ext  # noqa: F401 (built and imported, never called)\n"),
             ("ops.py", "    return my_ops_ext.sigmoid_vector(x)", "    return torch.sigmoid(x)")])
    make_fixture(out, "wrapper_calls_torch_matmul", "matmul/vector", "matmul", "not_using_kernel", ["kernel"],
            "ops.py returns torch.matmul(a, b): the right numbers, computed without the student's kernel.",
            [("ops.py", "import my_ops_ext\n", "import my_ops_ext  # noqa: F401 (built and imported, never called)\n"),
             ("ops.py", "    return my_ops_ext.matmul_vector(a, b)", "    return torch.matmul(a, b)")])
    make_fixture(out, "kernel_never_launches", "sigmoid/vector", "sigmoid", "not_using_kernel", ["kernel"],
            "The binding allocates the output and returns it without calling the entry function: no kernel is ever launched.",
            [("cpp/sigmoid_binding.cpp", """  sigmoid_vector_entry(queue, getMluTensorImpl(input)->mlu_data_ptr(),
                       getMluTensorImpl(output)->mlu_data_ptr(), input.numel(),
                       input.scalar_type() == at::kHalf);
""", """  // TODO: launch sigmoid_vector_entry on the queue
  (void)queue;
""")])
    make_fixture(out, "hangs", "sigmoid/vector", "sigmoid", "timeout", ["time"],
            "The loop advances by the tail rounded down to 64 elements: with a tail under 64 it advances by 0 and never ends.",
            [(SV, """  for (int64_t offset = 0; offset < count; offset += tile_elems) {
    // The last tile is the tail: copy only what exists, compute on the padded count (tile_elems is
    // a multiple of 64, so the padding stays inside the buffer) and store only what exists.
    const int n = (int)MIN((int64_t)tile_elems, count - offset);""",
                  """  for (int64_t offset = 0; offset < count;) {
    const int n = (int)MIN((int64_t)tile_elems, FLOOR_ALIGN(count - offset, (int64_t)VECTOR_ALIGN_ELEMS));"""),
             (SV, """    __memcpy(tile, x + offset, n * sizeof(T), GDRAM2NRAM);
    __bang_active_sigmoid(tile, tile, CEIL_ALIGN(n, VECTOR_ALIGN_ELEMS));
    __memcpy(y + offset, tile, n * sizeof(T), NRAM2GDRAM);
""", """    if (n > 0) {
      __memcpy(tile, x + offset, n * sizeof(T), GDRAM2NRAM);
      __bang_active_sigmoid(tile, tile, CEIL_ALIGN(n, VECTOR_ALIGN_ELEMS));
      __memcpy(y + offset, tile, n * sizeof(T), NRAM2GDRAM);
    }
    offset += n;
""")],
            "element counts that are not a multiple of 64")
    print(f"wrote {len(list(out.glob('*/expected.toml')))} fixtures under {out}")


if __name__ == "__main__":
    main()
