"""Static screening (grader/checks/screening.py): escape hatches are found with file, line and source line,
hiding them in comments, split strings or line continuations does not work, and honest code -- every
reference kernel, the bundled example, the calibration programs and every known-bad fixture -- has none."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from factories import grade_result, write_tree

from grader.checks.screening import apply_screening, screen_submission
from grader.results import GradeResult, Seeds, StageResult, Verdict, Versions
from grader.spec import load_assignment
from grader.spec.models import ScreeningSpec

REFERENCES = Path(__file__).resolve().parents[1] / "reference_kernels"
HONEST = sorted(
    [p for p in (REFERENCES / "sigmoid").iterdir() if p.is_dir()]
    + [p for p in (REFERENCES / "matmul").iterdir() if p.is_dir()]
    + [p for p in (REFERENCES / "known_bad").iterdir() if p.is_dir()]
    + [REFERENCES / "example", REFERENCES / "calibration", REFERENCES / "_shared"]
)


@pytest.mark.parametrize("folder", HONEST, ids=lambda p: str(p.relative_to(REFERENCES)))
def test_honest_code_has_no_findings(folder: Path):
    assert screen_submission(folder) == []


def test_every_known_bad_fixture_and_reference_is_screened():
    names = {str(p.relative_to(REFERENCES)) for p in HONEST}
    assert {"example", "sigmoid/vector", "matmul/pipeline", "known_bad/compile_error"} <= names
    assert len(HONEST) >= 20


def _rules(tmp_path: Path, name: str, text: str) -> list[tuple[str, int]]:
    return [(f.rule, f.line) for f in screen_submission(write_tree(tmp_path, {name: text}))]


CXX_HATCHES = [
    ("no_sanitize attribute", "mlu/k.mlu",
     '__mlu_global__ __attribute__((no_sanitize("kernel-address"))) void k(float *y) { y[0] = 1; }\n', "no_sanitize"),
    ("no_sanitize_address", "mlu/k.mlu", "\n__attribute__((no_sanitize_address)) void f() {}\n", "no_sanitize"),
    ("gnu attribute", "mlu/k.mlu", "[[gnu::no_sanitize_address]] void f() {}\n", "no_sanitize"),
    ("inline asm", "mlu/k.mlu", "void f() { asm volatile(\"nop\"); }\n", "inline_asm"),
    ("__asm__", "cpp/b.cpp", "void f() { __asm__ __volatile__(\"\" ::: \"memory\"); }\n", "inline_asm"),
    ("dlopen", "cpp/b.cpp", "#include <dlfcn.h>\nvoid *h = dlopen(nullptr, RTLD_NOW);\n", "dynamic_loading"),
    ("dlsym", "cpp/b.cpp", "auto f = dlsym(RTLD_DEFAULT, \"cnrtMalloc\");\n", "dynamic_loading"),
    ("mprotect", "cpp/b.cpp", "int r = mprotect(p, 4096, PROT_READ | PROT_WRITE);\n", "memory_protection"),
    ("syscall", "cpp/b.cpp", "long r = syscall(10, p, 4096, 3);\n", "memory_protection"),
    ("ptrace", "cpp/b.cpp", "ptrace(PTRACE_ATTACH, pid, 0, 0);\n", "memory_protection"),
    ("setenv", "cpp/b.cpp", "setenv(\"OMP_NUM_THREADS\", \"1\", 1);\n", "env_write"),
    ("putenv", "mlu/k.mlu", "putenv(buf);\n", "env_write"),
    ("emu env name", "cpp/b.cpp", "const char *d = getenv(\"BANG_EMU_DEVICE\");\n", "emu_interface"),
    ("emu function", "cpp/b.cpp", "extern \"C\" void bang_emu_seal_output(void *, unsigned long);\n",
     "emu_interface"),
    ("/proc/self/mem", "cpp/b.cpp", "FILE *f = fopen(\"/proc/self/mem\", \"r+\");\n", "proc_mem"),
    ("io path", "cpp/b.cpp", "std::ofstream out(\"/io/outputs/c0.trace.jsonl\", std::ios::app);\n",
     "protocol_path"),
    ("key file", "cpp/b.cpp", "int fd = open(\"trace.key\", 0);\n", "protocol_path"),
    ("kernel in a cpp", "cpp/b.cpp", "__mlu_global__ void sneaky(float *y) {}\n", "kernel_outside_mlu"),
    ("#error text", "mlu/k.mlu", "#error internal error in the build harness\n", "grader_message"),
    ("pragma", "mlu/k.mlu", "#pragma GCC optimize(\"no-sanitize=kernel-address\")\n", "no_sanitize"),
]


@pytest.mark.parametrize(("name", "file", "code", "rule"), CXX_HATCHES, ids=[c[0] for c in CXX_HATCHES])
def test_cxx_hatches_are_found(tmp_path, name, file, code, rule):
    assert rule in [r for r, _ in _rules(tmp_path, file, code)]


def test_finding_has_file_line_and_source(tmp_path):
    root = write_tree(tmp_path, {"mlu/k.mlu": "// fine\n#include <bang.h>\n\nvoid f() {\n  asm(\"nop\");\n}\n"})
    [finding] = screen_submission(root)
    assert (finding.rule, finding.file, finding.line) == ("inline_asm", "mlu/k.mlu", 5)
    assert finding.source_line == 'asm("nop");'
    assert finding.action == "zero_stages"
    assert "inline assembly" in finding.message


HIDDEN = [
    ("comment between tokens", "mlu/k.mlu", "void f() { __asm__/* harmless */volatile(\"nop\"); }\n",
     "inline_asm", 1),
    ("line continuation in a name", "cpp/b.cpp", "void *h = dl\\\nopen(0, 2);\n", "dynamic_loading", 1),
    ("split string literal", "cpp/b.cpp", "const char *d = getenv(\"BANG_\" \"EMU_\"\n  \"DEVICE\");\n",
     "emu_interface", 1),
    ("split path", "cpp/b.cpp", "auto p = \"/i\" \"o/outputs/c0.npy\";\n", "protocol_path", 1),
    ("raw string", "cpp/b.cpp", 'auto p = R"x(/proc/self/mem)x";\n', "proc_mem", 1),
    ("symbol named in a string", "cpp/b.cpp", "auto f = (int (*)(void *, size_t, int)) dlsym_ptr(h, \"mprotect\");\n",
     "memory_protection", 1),
    ("macro", "mlu/k.mlu", "#define ASM asm\nvoid f() { ASM(\"nop\"); }\n", "inline_asm", 1),
    ("python concatenation", "ops.py", "import os\nname = 'BANG_' + 'EMU_DEVICE'\n", "emu_interface", 2),
    ("python f-string path", "ops.py", "def f(i):\n    return open(f'/io/outputs/{i}.trace.jsonl', 'a')\n",
     "protocol_path", 2),
    ("python dynamic import", "ops.py", "ct = __import__('ct' + 'ypes')\n", "ctypes", 1),
]


@pytest.mark.parametrize(("name", "file", "code", "rule", "line"), HIDDEN, ids=[c[0] for c in HIDDEN])
def test_hiding_does_not_work(tmp_path, name, file, code, rule, line):
    assert (rule, line) in _rules(tmp_path, file, code)


PY_HATCHES = [
    ("import ctypes", "import ctypes\n", "ctypes"),
    ("from ctypes", "from ctypes import CDLL\n", "ctypes"),
    ("cffi", "import cffi\n", "ctypes"),
    ("environ set", "import os\nos.environ['BANG_EMU_DEVICE'] = 'mlu270'\n", "env_write"),
    ("environ from import", "from os import environ\nenviron['X'] = '1'\n", "env_write"),
    ("environ update", "import os\nos.environ.update({'A': '1'})\n", "env_write"),
    ("environ del", "import os\ndel os.environ['A']\n", "env_write"),
    ("putenv", "import os\nos.putenv('A', '1')\n", "env_write"),
    ("trace env read", "import os\npath = os.environ['BANG_EMU_TRACE']\n", "emu_interface"),
    ("proc mem", "f = open('/proc/self/mem', 'rb+')\n", "proc_mem"),
    ("io write", "open('/io/outputs/c0.json', 'w').write('{}')\n", "protocol_path"),
    ("grader wording", "raise RuntimeError('harness_error: internal error (not your fault)')\n", "grader_message"),
    ("harness module", "import bang_harness.worker as w\nw.write_result = print\n", "harness_reach"),
    ("harness by name", "import importlib\nw = importlib.import_module('bang_harness')\n", "harness_reach"),
    ("sys.modules", "import sys\nw = sys.modules['bang_harness.device']\n", "harness_reach"),
    ("caller frame", "import sys\nsys._getframe(1).f_locals['result'] = 1\n", "harness_reach"),
    ("inspect frame", "import inspect\ninspect.currentframe().f_back.f_globals.clear()\n", "harness_reach"),
    ("gc walk", "import gc\nfor o in gc.get_objects(): pass\n", "harness_reach"),
]


@pytest.mark.parametrize(("name", "code", "rule"), PY_HATCHES, ids=[c[0] for c in PY_HATCHES])
def test_python_hatches_are_found(tmp_path, name, code, rule):
    assert rule in [r for r, _ in _rules(tmp_path, "ops.py", code)]


HONEST_SNIPPETS = [
    ("words in comments", "mlu/k.mlu",
     "// no asm, no dlopen, no mprotect: BANG_EMU_DEVICE is the grader's business\n"
     "/* syscall ptrace setenv /io/outputs /proc/self/mem no_sanitize */\n__mlu_global__ void k(float *y) {}\n"),
    ("error messages", "cpp/b.cpp",
     "#include <stdexcept>\nvoid check(bool ok) { if (!ok) throw std::runtime_error(\"dlopen-free: mprotect not "
     "used, see /proc docs\"); }\n"),
    ("kernel words in a kernel header", "mlu/k.h", "__mlu_func__ void helper(float *y) {}\n"),
    ("getenv read of something else", "cpp/b.cpp", "const char *v = getenv(\"OMP_NUM_THREADS\");\n"),
    ("python docstring", "ops.py",
     '"""Calls the kernel; never touches BANG_EMU_TRACE, /io/outputs or ctypes."""\nimport os\n\n'
     "def sigmoid(x):\n    threads = os.environ.get('OMP_NUM_THREADS', '1')\n    return x\n"),
    ("python comments", "ops.py", "# import ctypes  -- not needed\nimport torch\n"),
    ("identifiers containing words", "cpp/b.cpp", "int asmjit_count = 0; int my_syscall_count = 1; int dlopened;\n"),
]


@pytest.mark.parametrize(("name", "file", "code"), HONEST_SNIPPETS, ids=[c[0] for c in HONEST_SNIPPETS])
def test_honest_snippets_are_not_flagged(tmp_path, name, file, code):
    assert _rules(tmp_path, file, code) == []


def test_python_that_does_not_parse_is_still_screened(tmp_path):
    assert ("ctypes", 2) in _rules(tmp_path, "ops.py", "def f(:\nimport ctypes\n")


def test_symlinks_and_huge_files(tmp_path):
    root = write_tree(tmp_path / "sub", {"ops.py": "import torch\n"})
    (tmp_path / "outside.py").write_text("import ctypes\n")
    (root / "link.py").symlink_to(tmp_path / "outside.py")
    (root / "big.h").write_text("int x;\n" * 400_000)
    findings = screen_submission(root)
    assert [(f.rule, f.file) for f in findings] == [("unscreened", "big.h")]


def _result(stage_points: list[float]) -> GradeResult:
    stages = [StageResult(name=f"s{i}", title="t", entry="sigmoid", points=p, points_possible=10.0, correct=True,
                          verdict=Verdict.PASSED) for i, p in enumerate(stage_points)]
    return grade_result(assignment="sigmoid", submission_path="/x", score=50.0 + sum(stage_points), max_score=80.0,
                        stages=stages, seeds=Seeds(mode="public", master="s", master_digest="d"),
                        versions=Versions(grader="t"), finished_at=datetime.now(UTC))


def test_zero_stages_withholds_stage_points_only(tmp_path):
    root = write_tree(tmp_path, {"ops.py": "import ctypes\n"})
    findings = screen_submission(root, load_assignment("sigmoid"))
    result = apply_screening(_result([10.0, 10.0, 0.0]), findings)
    assert [s.points for s in result.stages] == [0.0, 0.0, 0.0]
    assert result.score == 50.0
    assert result.screening == findings
    assert "withheld" in result.message and "ops.py:1" in result.message
    assert result.verdict == Verdict.PASSED  # what the run did is unchanged; the points say the rest


def test_review_keeps_points_and_flags(tmp_path):
    root = write_tree(tmp_path, {"ops.py": "import ctypes\n"})
    spec = load_assignment("sigmoid").model_copy(update={"screening": ScreeningSpec(action="review")})
    findings = screen_submission(root, spec)
    assert {f.action for f in findings} == {"review"}
    result = apply_screening(_result([10.0, 10.0]), findings)
    assert result.score == 70.0 and [s.points for s in result.stages] == [10.0, 10.0]
    assert "review" in result.message


def test_no_findings_change_nothing():
    result = _result([10.0])
    assert apply_screening(result, []) is result


def test_default_action_is_zero_stages():
    assert ScreeningSpec().action == "zero_stages"
    for name in ("sigmoid", "matmul"):
        assert load_assignment(name).screening.action == "zero_stages"


def test_report_shows_the_findings_escaped(tmp_path):
    from grader.reporting.render import render_report_html

    root = write_tree(tmp_path, {"ops.py": "import os\nos.environ['BANG_EMU_DEVICE'] = '<script>x</script>'\n"})
    html = render_report_html(apply_screening(_result([10.0]), screen_submission(root)))
    section = html[html.index('id="screening"'):]
    assert "stage points withheld" in section and "ops.py:2" in section
    assert "<script>x" not in html and "&lt;script&gt;x" in section
    assert 'id="screening"' not in render_report_html(_result([10.0]))  # nothing found: no section
