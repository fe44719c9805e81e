"""The student contract: wrong layouts get a message that says exactly what is missing and what it should be."""

from __future__ import annotations

from pathlib import Path

import pytest

from grader.layout import (
    LayoutError,
    ModuleSyntaxError,
    check_entry_functions,
    inspect_submission,
    resolve_entries,
    stage_keys,
)
from grader.spec import load_assignment

MATMUL = load_assignment("matmul")
SIGMOID = load_assignment("sigmoid")
KEYS = stage_keys([MATMUL, SIGMOID])

PYBIND = '#include <torch/extension.h>\nPYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("mm", &mm); }\n'


def make(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


GOOD = {"mlu/mm.mlu": "__mlu_global__ void k() {}\n", "cpp/bind.cpp": PYBIND,
        "ops.py": "import my_ops_ext\n\ndef matmul(a, b):\n    return my_ops_ext.mm(a, b)\n"}


def test_a_good_submission_passes_with_defaults(tmp_path):
    sub = inspect_submission(make(tmp_path, GOOD))
    assert (sub.module, sub.extension, sub.student.id, sub.assignment) == ("ops", "my_ops_ext", "anonymous", None)
    entries = resolve_entries(sub, MATMUL, KEYS)
    assert set(entries.values()) == {"matmul"} and len(entries) == 6
    check_entry_functions(sub, {"matmul": list(entries)})


@pytest.mark.parametrize(("remove", "message"), [
    ("mlu/mm.mlu", "mlu/ holds no .mlu file"),
    ("cpp/bind.cpp", "cpp/ holds no .cpp file"),
    ("ops.py", "missing ops.py (the default module)"),
])
def test_missing_parts_are_named_and_the_layout_is_shown(tmp_path, remove, message):
    make(tmp_path, GOOD)
    (tmp_path / remove).unlink()
    with pytest.raises(LayoutError) as info:
        inspect_submission(tmp_path)
    assert message in str(info.value)
    assert "Expected layout" in str(info.value) and "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m)" in str(info.value)


def test_missing_folders_are_all_listed_at_once(tmp_path):
    make(tmp_path, {"ops.py": "def matmul(a, b): ...\n", "kernel.mlu": ""})
    with pytest.raises(LayoutError) as info:
        inspect_submission(tmp_path)
    assert "missing folder mlu/" in str(info.value) and "missing folder cpp/" in str(info.value)


def test_bindings_without_any_registration_are_rejected(tmp_path):
    make(tmp_path, {**GOOD, "cpp/bind.cpp": "torch::Tensor mm(torch::Tensor a, torch::Tensor b);\n"})
    with pytest.raises(LayoutError, match="registers an operator"):
        inspect_submission(tmp_path)


def test_torch_library_registration_is_accepted(tmp_path):
    lib = 'TORCH_LIBRARY(my_ops, m) { m.def("mm(Tensor a, Tensor b) -> Tensor"); }\n'
    assert inspect_submission(make(tmp_path, {**GOOD, "cpp/bind.cpp": lib})).module == "ops"


def test_grade_toml_settings_and_entries(tmp_path):
    toml = ('assignment = "matmul"\nmodule = "my_module"\n[student]\nid = "s123"\nname = "Ada"\n'
            '[entries]\nmatmul_vector = "mm_vec"\nscalar_gdram = "mm_slow"\nmatmul = "mm_fast"\n')
    files = {**GOOD, "grade.toml": toml, "my_module.py": "def mm_vec(a, b): ...\ndef mm_slow(a, b): ...\n"}
    sub = inspect_submission(make(tmp_path, files))
    assert (sub.student.id, sub.student.name, sub.module, sub.assignment) == ("s123", "Ada", "my_module", "matmul")
    entries = resolve_entries(sub, MATMUL, KEYS)
    assert entries["vector"] == "mm_vec" and entries["scalar_gdram"] == "mm_slow"
    assert entries["pipeline"] == "mm_fast"  # the assignment-wide default
    with pytest.raises(LayoutError) as info:
        check_entry_functions(sub, {"mm_vec": ["vector"], "mm_fast": ["multicore", "pipeline"]})
    assert "mm_fast  (serves stages multicore, pipeline)" in str(info.value)
    assert "grade.toml [entries]" in str(info.value)


def test_unknown_entry_keys_list_the_valid_ones(tmp_path):
    make(tmp_path, {**GOOD, "grade.toml": '[entries]\nmatmul_vectr = "x"\n'})
    sub = inspect_submission(tmp_path)
    with pytest.raises(LayoutError) as info:
        resolve_entries(sub, MATMUL, KEYS)
    assert "matmul_vectr" in str(info.value) and "matmul_vector" in str(info.value)


def test_entries_for_the_other_assignment_are_ignored(tmp_path):
    make(tmp_path, {**GOOD, "grade.toml": '[entries]\nsigmoid_vector = "sig"\n'})
    assert set(resolve_entries(inspect_submission(tmp_path), MATMUL, KEYS).values()) == {"matmul"}


@pytest.mark.parametrize(("toml", "message"), [
    ("assignment = ", "not valid TOML"),
    ('asignment = "matmul"\n', "unknown key(s) ['asignment']"),
    ('module = "my-ops"\n', "module must be a Python identifier"),
    ('[entries]\nvector = 3\n', "[entries] maps stage names to function names"),
])
def test_bad_grade_toml_is_explained(tmp_path, toml, message):
    make(tmp_path, {**GOOD, "grade.toml": toml})
    with pytest.raises(LayoutError) as info:
        inspect_submission(tmp_path)
    assert message in str(info.value)


def test_a_module_that_does_not_parse_is_a_syntax_error_with_the_line(tmp_path):
    make(tmp_path, {**GOOD, "ops.py": "def matmul(a, b)\n    return a\n"})
    with pytest.raises(ModuleSyntaxError, match=r"ops.py:1"):
        check_entry_functions(inspect_submission(tmp_path), {"matmul": ["vector"]})


def test_dynamic_modules_are_not_second_guessed(tmp_path):
    make(tmp_path, {**GOOD, "ops.py": "from my_ops_ext import *\n"})
    check_entry_functions(inspect_submission(tmp_path), {"matmul": ["vector"]})


def test_symlinks_out_of_the_submission_are_refused(tmp_path):
    make(tmp_path / "sub", GOOD)
    (tmp_path / "secret").write_text("x")
    (tmp_path / "sub" / "mlu" / "leak.h").symlink_to(tmp_path / "secret")
    with pytest.raises(LayoutError, match="symlink pointing outside"):
        inspect_submission(tmp_path / "sub")


def test_setup_py_is_ignored_with_a_warning(tmp_path):
    sub = inspect_submission(make(tmp_path, {**GOOD, "setup.py": "raise SystemExit"}))
    assert any("setup.py is ignored" in w for w in sub.warnings)


def test_sources_in_subfolders_are_pointed_out(tmp_path):
    make(tmp_path, {**{k: v for k, v in GOOD.items() if k != "mlu/mm.mlu"}, "mlu/kernels/mm.mlu": ""})
    with pytest.raises(LayoutError, match=r"mlu/kernels/mm.mlu is in a subfolder, but only mlu/\*.mlu is compiled"):
        inspect_submission(tmp_path)
