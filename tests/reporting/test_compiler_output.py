from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from grader.reporting.compiler_output import parse_compiler_output, student_errors
from grader.reporting.submission_files import submission_relative

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


# --- the student's own errors, from the real cncc-emu ---------------------------------------------------------

KERNEL = """\
#include <bang.h>

#define TILE 256
__nram__ float buf[TILE];

template <typename T>
__mlu_global__ void sigmoid_kernel(T *y, const T *x, int n) {
  for (int i = taskId * TILE; i < n; i += taskDim * TILE) {
    __memcpy(buf, x + i, TILE * sizeof(T), GDRAM2NRAM);
    // 计算每个任务的偏移
    CALL(buf, buf, TILE);
    __memcpy(y + i, buf, TILE * sizeof(T), NRAM2GDRAM);
  }
}

void sigmoid(cnrtQueue_t queue, float *y, const float *x, int n) {
  cnrtDim3_t dim = {4, 1, 1};
  sigmoid_kernel<<<dim, CNRT_FUNC_TYPE_UNION1, queue>>>(y, x, n);
}
"""

NOT_COPYABLE = """\
#include <bang.h>

struct Table {
  Table() {}
  Table(const Table &) = delete;
};

__mlu_global__ void kernel(Table t, float *out) { out[0] = 1.0f; }

void launch(cnrtQueue_t queue, float *out) {
  cnrtDim3_t dim = {1, 1, 1};
  Table t;
  kernel<<<dim, CNRT_FUNC_TYPE_BLOCK, queue>>>(t, out);
}
"""


def compile_output(submission: Path, relative: str, source: str, include: str | None = None) -> str:
    """cncc-emu's output for source saved as submission/relative, compiled from inside the submission (as the
    harness does, so paths are submission-relative); the build must fail."""
    from bang_emu.toolchain import compile_mlu

    path = submission / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(source, encoding="utf-8")
    flags = ["-c", "-fPIC"] + (["-I", include] if include else [])
    cwd = os.getcwd()
    os.chdir(submission)
    try:
        done = compile_mlu(relative, submission / "k.o", flags)
    finally:
        os.chdir(cwd)
    assert done.returncode != 0, done.stderr
    return done.stdout + done.stderr


needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ (cncc-emu's compiler) not installed")


@needs_gxx
def test_an_undeclared_call_in_a_template_kernel_is_shown_at_the_students_line(tmp_path):
    output = compile_output(tmp_path, "mlu/sigmoid.mlu", KERNEL.replace("CALL", "compute_sigmoid"))
    assert len(output.splitlines()) > 10  # the launch chain through the emulator's and the C++ headers
    assert "bang_emu" in output and "type_traits" in output
    [error] = student_errors(output, str(tmp_path))
    assert (error.file, error.line) == ("mlu/sigmoid.mlu", 11)
    assert "compute_sigmoid" in error.message and error.source.strip() == "compute_sigmoid(buf, buf, TILE);"
    assert error.limitation is None and error.reported_in is None


@needs_gxx
def test_a_builtin_the_emulator_lacks_is_a_grader_limitation(tmp_path):
    output = compile_output(tmp_path, "mlu/sigmoid.mlu", KERNEL.replace("CALL", "__bang_active_tanh"))
    [error] = student_errors(output, str(tmp_path))
    assert error.line == 11 and error.limitation == "missing_builtin" and error.builtin == "__bang_active_tanh"


@needs_gxx
def test_a_misspelt_builtin_is_the_students_mistake(tmp_path):
    output = compile_output(tmp_path, "mlu/sigmoid.mlu", KERNEL.replace("CALL", "__bang_active_sigmoidd"))
    assert "did you mean" in output
    [error] = student_errors(output, str(tmp_path))
    assert error.line == 11 and error.limitation is None


@needs_gxx
def test_an_error_inside_the_emulators_header_is_pointed_back_at_the_launch(tmp_path):
    output = compile_output(tmp_path, "mlu/k.mlu", NOT_COPYABLE)
    errors = student_errors(output, str(tmp_path))
    assert all(e.reported_in == "bang_emu/device.h" and e.limitation is None for e in errors)
    launch = next(e for e in errors if e.line == 13)
    assert launch.file == "mlu/k.mlu" and launch.source.strip().startswith("kernel<<<")


@needs_gxx
def test_an_error_with_no_line_of_the_submission_is_the_emulators(tmp_path):
    # the emulator's own header compiled alone with a name it declares macro-expanded away: no student file in sight
    from bang_emu.toolchain import include_dirs

    header = next(d / "bang.h" for d in include_dirs() if (d / "bang.h").is_file())
    done = subprocess.run(
        ["g++", "-std=c++17", "-fsyntax-only", "-DLaunchArg=42", *[f"-I{d}" for d in include_dirs()],
         "-x", "c++", str(header)],
        capture_output=True, text=True,
    )
    if done.returncode == 0:
        pytest.skip("the emulator's header compiled with LaunchArg defined away")
    errors = student_errors(done.stderr, str(tmp_path))  # a submission with no file that could name a header
    assert errors and all(e.limitation == "emulator" for e in errors)
    assert not any(e.limitation for e in student_errors(done.stderr, "/nonexistent/submission")), \
        "without the submission to look at, nothing proves the names g++ printed"
    assert all(e.file.startswith("bang_emu/") or e.file == "bang.h" for e in errors)


def _public_sigmoid() -> tuple[Path, str] | None:
    for mirror, folder in (
        ("kolp323+Cambricon-MLU-Kernel-Labs", "custom_pytorch_mlu_op/mlu_custom_ext/mlu"),
    ):
        git_dir = Path("/work/.mirror") / mirror / "repo"
        if git_dir.is_dir():
            return git_dir, folder
    return None


@needs_gxx
@pytest.mark.skipif(_public_sigmoid() is None, reason="public AICS exp_5_1 mirror not fetched (/work/.mirror)")
def test_public_exp_5_1_sigmoid_with_a_device_code_error(tmp_path):
    git_dir, folder = _public_sigmoid()

    def show(path: str) -> str:
        return subprocess.run(["git", f"--git-dir={git_dir}", "show", f"HEAD:{path}"], capture_output=True,
                              text=True, check=True).stdout

    listing = subprocess.run(["git", f"--git-dir={git_dir}", "ls-tree", "-r", "--name-only", "HEAD", folder],
                             capture_output=True, text=True, check=True).stdout.split()
    for header in (p for p in listing if p.startswith(f"{folder}/include/")):
        (tmp_path / "mlu" / "include").mkdir(parents=True, exist_ok=True)
        (tmp_path / "mlu" / "include" / Path(header).name).write_text(show(header))
    lab = show(f"{folder}/src/bang_sigmoid_sample.mlu").splitlines()
    target = next(i for i, line in enumerate(lab) if "__bang_active_sigmoid(" in line)
    lab[target] = lab[target].replace("__bang_active_sigmoid(", "compute_sigmoid(")  # a device-code error
    output = compile_output(tmp_path, "mlu/src/bang_sigmoid_sample.mlu", "\n".join(lab) + "\n", "mlu/include")
    assert len(output.splitlines()) > 10
    [error] = student_errors(output, str(tmp_path))
    assert (error.file, error.line) == ("mlu/src/bang_sigmoid_sample.mlu", target + 1)
    assert "compute_sigmoid" in error.message and "compute_sigmoid(nram_out" in error.source


@needs_gxx
@pytest.mark.parametrize("call", ["compute_sigmoid", "__bang_active_tanh"])
def test_the_report_shows_the_students_errors_first_and_folds_the_rest(tmp_path, call):
    from grader.reporting.render import render_report_html

    from . import samples

    output = compile_output(tmp_path, "mlu/sigmoid.mlu", KERNEL.replace("CALL", call))
    result = samples.compile_error()
    result.submission_path, result.build.compiler_output = str(tmp_path), output
    html = render_report_html(result)
    mine = html.index('id="student-errors"')
    folded = html.index("<details><summary>Full compiler output")
    assert mine < folded < html.index('id="compiler-output"')  # the full log is inside the closed <details>
    assert "bang_emu" not in html[mine:folded] and "bang_emu" in html[folded:]
    errors = html[mine:folded]
    assert errors.count('<li class="cerror') == 1 and "mlu/sigmoid.mlu:11" in errors
    assert f'<span class="n">11</span>    {call}(buf, buf, TILE);' in errors
    if call.startswith("__bang"):
        assert 'data-limitation="missing_builtin"' in errors and "Not your mistake" in errors
    else:
        assert "data-limitation" not in errors and "Not your mistake" not in errors


@needs_gxx
@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_cli_names_a_missing_builtin_as_not_the_students_mistake(tmp_path, lang):
    from rich.console import Console

    from grader.cli.summary import print_summary
    from grader.i18n import use_language

    from . import samples

    output = compile_output(tmp_path, "mlu/sigmoid.mlu", KERNEL.replace("CALL", "__bang_active_tanh"))
    result = samples.compile_error()
    result.submission_path, result.build.compiler_output = str(tmp_path), output
    console = Console(record=True, width=200)
    with use_language(lang):
        print_summary(result, console)
    text = console.export_text()
    assert "mlu/sigmoid.mlu:11:" in text and "__bang_active_tanh(buf, buf, TILE);" in text
    assert ("not your mistake" if lang == "en" else "这不是你的错") in text
    assert "`__bang_active_tanh`" in text


FORGED_HEADER = "/opt/bang_emu/include/bang_emu/builtins_vector.h"


@needs_gxx
def test_a_line_directive_cannot_make_the_students_error_the_graders(tmp_path):
    """`#line 212 "<emulator header>"` before a real syntax error: g++ prints the emulator's header as the
    place; the submission's own files say it could, so no "not your mistake"."""
    for directive in (f'#line 212 "{FORGED_HEADER}"', f'# 212 "{FORGED_HEADER}"', f'%:line 212 "{FORGED_HEADER}"',
                      f'#\\\nline 212 "{FORGED_HEADER}"', f'# /* x */ line 212 "{FORGED_HEADER}"'):
        (tmp_path / "mlu").mkdir(exist_ok=True)
        (tmp_path / "mlu" / "k.cpp").write_text(f"int ok;\n{directive}\nint f( {{ }}\n")
        done = subprocess.run(["g++", "-fsyntax-only", str(tmp_path / "mlu" / "k.cpp")], capture_output=True,
                              text=True)
        assert FORGED_HEADER in done.stderr, (directive, done.stderr)
        errors = student_errors(done.stderr, str(tmp_path))
        assert errors and not any(e.limitation for e in errors), (directive, errors)


def test_lines_a_students_diagnostic_carries_blame_nobody_else(tmp_path):
    """A static_assert's message (or a #pragma message's) may hold whole lines, "In file included from" and an
    error in an emulator header included: after a diagnostic at the student's code nothing blames the grader."""
    forged = ("/submission/mlu/k.mlu:1:15: error: static assertion failed: x\n"
              "In file included from <command-line>:\n"
              "/opt/bang_emu/include/bang_emu/device.h:3:1: error: boom\n")
    assert [e.limitation for e in student_errors(forged, str(tmp_path))] == [None, None]
    real = "In file included from <command-line>:\n/opt/bang_emu/include/bang_emu/device.h:3:1: error: boom\n"
    assert [e.limitation for e in student_errors(real, str(tmp_path))] == ["emulator"]
