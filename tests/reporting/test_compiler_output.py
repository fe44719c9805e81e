from __future__ import annotations

from grader.reporting.compiler_output import parse_compiler_output, submission_relative

from . import samples


def test_gcc_output_is_classified_line_by_line():
    out = parse_compiler_output(samples.COMPILE_LOG)
    assert [m.severity for m in out.messages] == ["error", "warning"]
    err = out.errors[0]
    assert (err.file, err.line, err.column) == ("mlu/matmul.mlu", 12, 5)
    assert err.message.startswith("'__bang_matmull' was not declared")
    kinds = [line.kind for line in out.lines]
    assert kinds[:5] == ["context", "error", "source", "caret", "plain"]
    assert kinds[-1] == "error"  # the driver's own "cncc-emu: error:" line


def test_clang_style_fatal_error_and_no_column():
    out = parse_compiler_output("k.mlu:3: fatal error: bang.h: No such file or directory\n")
    assert out.errors[0].line == 3 and out.errors[0].column is None


def test_long_output_is_cut_with_a_count():
    out = parse_compiler_output("\n".join(f"line {i}" for i in range(1000)), max_lines=10)
    assert len(out.lines) == 10 and out.omitted_lines == 990


def test_sandbox_paths_become_submission_relative():
    assert submission_relative("/submission/mlu/a.mlu") == "mlu/a.mlu"
    assert submission_relative("./cpp/b.cpp") == "cpp/b.cpp"
    assert submission_relative("/usr/include/x.h") == "/usr/include/x.h"
