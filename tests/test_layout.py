"""The student contract: wrong layouts get a message that says exactly what is missing and what it should be."""

from __future__ import annotations

from pathlib import Path

import pytest
from bang_harness.plan import BuildPlan
from factories import write_tree

from grader.batch.intake import collect_submissions, looks_like_submission
from grader.layout import (
    LayoutError,
    ModuleSyntaxError,
    bind_entry,
    check_entry_functions,
    inspect_submission,
    offers,
    resolve_entries,
    stage_keys,
)
from grader.project_layouts import LAYOUTS, detect
from grader.spec import load_assignment

MATMUL = load_assignment("matmul")
SIGMOID = load_assignment("sigmoid")
KEYS = stage_keys([MATMUL, SIGMOID])

PYBIND = '#include <torch/extension.h>\nPYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("mm", &mm); }\n'


GOOD = {"mlu/mm.mlu": "__mlu_global__ void k() {}\n", "cpp/bind.cpp": PYBIND,
        "ops.py": "import my_ops_ext\n\ndef matmul(a, b):\n    return my_ops_ext.mm(a, b)\n"}


def test_a_good_submission_passes_with_defaults(tmp_path):
    sub = inspect_submission(write_tree(tmp_path, GOOD))
    assert (sub.module, sub.extension, sub.student.id, sub.assignment) == ("ops", "my_ops_ext", "anonymous", None)
    entries = resolve_entries(sub, MATMUL, KEYS)
    assert set(entries.values()) == {"matmul"} and len(entries) == 6
    check_entry_functions(sub, {"matmul": list(entries)})


def test_fifos_sockets_and_devices_are_refused_before_anything_reads_them(tmp_path):
    """A FIFO as the binding (or as grade.toml, ops.py) would block layout detection forever (issue 28)."""
    import os
    import socket

    from grader.orchestration.options import GradeRequest
    from grader.orchestration.resolve import guess_spec

    root = write_tree(tmp_path / "sub", GOOD)
    (root / "cpp" / "bind.cpp").unlink()
    os.mkfifo(root / "cpp" / "bind.cpp")
    os.mkfifo(root / "grade.toml")
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(root / "mlu" / "s.sock"))
        with pytest.raises(LayoutError, match="not a regular file") as refused:
            inspect_submission(root)
    assert "cpp/bind.cpp" in str(refused.value) and "grade.toml" in str(refused.value)
    assert "mlu/s.sock" in str(refused.value)
    detect(root)  # returns: nothing opened the FIFOs
    assert guess_spec(root, GradeRequest()) is not None  # ops.py read, the FIFO grade.toml never opened


@pytest.mark.parametrize(("remove", "message"), [
    ("mlu/mm.mlu", "mlu/ holds no .mlu file"),
    ("cpp/bind.cpp", "cpp/ holds no .cpp file"),
    ("ops.py", "missing ops.py (the default module)"),
])
def test_missing_parts_are_named_and_the_layout_is_shown(tmp_path, remove, message):
    write_tree(tmp_path, GOOD)
    (tmp_path / remove).unlink()
    with pytest.raises(LayoutError) as info:
        inspect_submission(tmp_path)
    assert message in str(info.value)
    assert "Expected layout" in str(info.value) and "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m)" in str(info.value)


def test_missing_folders_are_all_listed_at_once(tmp_path):
    write_tree(tmp_path, {"ops.py": "def matmul(a, b): ...\n", "kernel.mlu": ""})
    with pytest.raises(LayoutError) as info:
        inspect_submission(tmp_path)
    assert "missing folder mlu/" in str(info.value) and "missing folder cpp/" in str(info.value)


def test_bindings_without_any_registration_are_rejected(tmp_path):
    write_tree(tmp_path, {**GOOD, "cpp/bind.cpp": "torch::Tensor mm(torch::Tensor a, torch::Tensor b);\n"})
    with pytest.raises(LayoutError, match="registers an operator"):
        inspect_submission(tmp_path)


def test_torch_library_registration_is_accepted(tmp_path):
    lib = 'TORCH_LIBRARY(my_ops, m) { m.def("mm(Tensor a, Tensor b) -> Tensor"); }\n'
    assert inspect_submission(write_tree(tmp_path, {**GOOD, "cpp/bind.cpp": lib})).module == "ops"


def test_grade_toml_settings_and_entries(tmp_path):
    toml = ('assignment = "matmul"\nmodule = "my_module"\n[student]\nid = "s123"\nname = "Ada"\n'
            '[entries]\nmatmul_vector = "mm_vec"\nscalar_gdram = "mm_slow"\nmatmul = "mm_fast"\n')
    files = {**GOOD, "grade.toml": toml, "my_module.py": "def mm_vec(a, b): ...\ndef mm_slow(a, b): ...\n"}
    sub = inspect_submission(write_tree(tmp_path, files))
    assert (sub.student.id, sub.student.name, sub.module, sub.assignment) == ("s123", "Ada", "my_module", "matmul")
    entries = resolve_entries(sub, MATMUL, KEYS)
    assert entries["vector"] == "mm_vec" and entries["scalar_gdram"] == "mm_slow"
    assert entries["pipeline"] == "mm_fast"  # the assignment-wide default
    with pytest.raises(LayoutError) as info:
        check_entry_functions(sub, {"mm_vec": ["vector"], "mm_fast": ["multicore", "pipeline"]})
    assert "mm_fast  (serves stages multicore, pipeline)" in str(info.value)
    assert "grade.toml [entries]" in str(info.value)


def test_unknown_entry_keys_list_the_valid_ones(tmp_path):
    write_tree(tmp_path, {**GOOD, "grade.toml": '[entries]\nmatmul_vectr = "x"\n'})
    sub = inspect_submission(tmp_path)
    with pytest.raises(LayoutError) as info:
        resolve_entries(sub, MATMUL, KEYS)
    assert "matmul_vectr" in str(info.value) and "matmul_vector" in str(info.value)


def test_entries_for_the_other_assignment_are_ignored(tmp_path):
    write_tree(tmp_path, {**GOOD, "grade.toml": '[entries]\nsigmoid_vector = "sig"\n'})
    assert set(resolve_entries(inspect_submission(tmp_path), MATMUL, KEYS).values()) == {"matmul"}


@pytest.mark.parametrize(("toml", "message"), [
    ("assignment = ", "not valid TOML"),
    ('asignment = "matmul"\n', "unknown key(s) ['asignment']"),
    ('module = "my-ops"\n', "module must be a Python identifier"),
    ('[entries]\nvector = 3\n', "[entries] maps stage names to function names"),
])
def test_bad_grade_toml_is_explained(tmp_path, toml, message):
    write_tree(tmp_path, {**GOOD, "grade.toml": toml})
    with pytest.raises(LayoutError) as info:
        inspect_submission(tmp_path)
    assert message in str(info.value)


def test_a_module_that_does_not_parse_is_a_syntax_error_with_the_line(tmp_path):
    write_tree(tmp_path, {**GOOD, "ops.py": "def matmul(a, b)\n    return a\n"})
    with pytest.raises(ModuleSyntaxError, match=r"ops.py:1"):
        check_entry_functions(inspect_submission(tmp_path), {"matmul": ["vector"]})


def test_dynamic_modules_are_not_second_guessed(tmp_path):
    write_tree(tmp_path, {**GOOD, "ops.py": "from my_ops_ext import *\n"})
    check_entry_functions(inspect_submission(tmp_path), {"matmul": ["vector"]})


def test_symlinks_out_of_the_submission_are_refused(tmp_path):
    write_tree(tmp_path / "sub", GOOD)
    (tmp_path / "secret").write_text("x")
    (tmp_path / "sub" / "mlu" / "leak.h").symlink_to(tmp_path / "secret")
    with pytest.raises(LayoutError, match="symlink pointing outside"):
        inspect_submission(tmp_path / "sub")


def test_setup_py_is_ignored_with_a_warning(tmp_path):
    sub = inspect_submission(write_tree(tmp_path, {**GOOD, "setup.py": "raise SystemExit"}))
    assert any("setup.py is ignored" in w for w in sub.warnings)


def test_sources_in_subfolders_are_pointed_out(tmp_path):
    write_tree(tmp_path, {**{k: v for k, v in GOOD.items() if k != "mlu/mm.mlu"}, "mlu/kernels/mm.mlu": ""})
    with pytest.raises(LayoutError, match=r"mlu/kernels/mm.mlu is in a subfolder, but only mlu/\*.mlu is compiled"):
        inspect_submission(tmp_path)


# -- lab projects as published (grader/project_layouts.py) ------------------------------------------------

KERNEL = "__mlu_global__ void k(float *y, float *x, int n) {}\n"
EXP_5_1 = {  # the AICS exp_5_1 project: the binding's module name is a literal, the entry a Python function
    "setup.py": 'MLUExtension(name="libmlu_custom_ext", sources=[])\n',
    "mlu_custom_ext/__init__.py": "from .mlu_functions import *\n",
    "mlu_custom_ext/mlu/include/customed_ops.h": "#pragma once\n",
    "mlu_custom_ext/mlu/src/bang_sigmoid_sample.mlu": KERNEL,
    "mlu_custom_ext/mlu/src/bang_sigmoid.cpp": 'PYBIND11_MODULE(libmlu_custom_ext, m) { m.def("active_sigmoid", &f); }\n',
    "mlu_custom_ext/mlu_functions/__init__.py": "from .mlu_functions import *\n",
    "mlu_custom_ext/mlu_functions/mlu_functions.py": "from libmlu_custom_ext import active_sigmoid\n\n"
                                                     "def sigmoid(x):\n    return active_sigmoid(x)\n",
    "tests/test_sigmoid.py": "def sigmoid(x): ...\n",  # tests never provide the entry
}
TORCH_LIBRARY = ('TORCH_LIBRARY_FRAGMENT(mlu_custom_ext, m) { m.def("active_sigmoid_mlu(Tensor x) -> Tensor"); }\n'
                 "TORCH_LIBRARY_IMPL(mlu_custom_ext, PrivateUse1, m) {}\n")
MLU_EXTENSION = {  # Cambricon's examples/mlu_extension
    "setup.py": 'mlu_extension = MLUExtension(\n    name="mlu_custom_ext._C",\n    sources=[])\n',
    "mlu_custom_ext/__init__.py": "from mlu_custom_ext import ops\n",
    "mlu_custom_ext/src/custom_sigmoid.cpp": TORCH_LIBRARY,
    "mlu_custom_ext/src/mlu/bang_sigmoid_sample.mlu": KERNEL,
    "mlu_custom_ext/ops/__init__.py": "from .custom_ops import active_sigmoid_mlu\n",
    "mlu_custom_ext/ops/custom_ops.py": "import torch\n\ndef active_sigmoid_mlu(x):\n"
                                        "    return torch.ops.mlu_custom_ext.active_sigmoid_mlu(x)\n",
}


def bound(root: Path, spec=SIGMOID):
    return bind_entry(inspect_submission(root), spec)


def test_the_exp_5_1_project_is_graded_through_its_own_python_function(tmp_path):
    sub = bound(write_tree(tmp_path, EXP_5_1))
    assert sub.layout == "aics_exp_5_1" and sub.extension == "libmlu_custom_ext"
    assert (sub.module, sub.entry_default) == ("mlu_custom_ext.mlu_functions.mlu_functions", "sigmoid")
    assert "entry: mlu_custom_ext.mlu_functions.mlu_functions.sigmoid" in sub.warnings
    assert sub.plan == BuildPlan("libmlu_custom_ext", ("mlu_custom_ext/mlu/src/bang_sigmoid_sample.mlu",),
                                 ("mlu_custom_ext/mlu/src/bang_sigmoid.cpp",), ("mlu_custom_ext/mlu/include",))
    assert set(resolve_entries(sub, SIGMOID, KEYS).values()) == {"sigmoid"}
    check_entry_functions(sub, {"sigmoid": ["vector"]})
    assert offers(inspect_submission(tmp_path), "sigmoid") and not offers(inspect_submission(tmp_path), "matmul")


def test_without_the_python_function_the_exp_5_1_entry_is_the_pybind11_op(tmp_path):
    write_tree(tmp_path, {**EXP_5_1, "mlu_custom_ext/mlu_functions/mlu_functions.py": "import torch\n"})
    sub = bound(tmp_path)
    assert (sub.module, sub.entry_default) == ("libmlu_custom_ext", "active_sigmoid")
    check_entry_functions(sub, {"active_sigmoid": ["vector"]})  # not a file of the submission: nothing to parse


def test_cambricons_mlu_extension_takes_its_name_from_setup_py_and_its_entry_from_ops(tmp_path):
    sub = bound(write_tree(tmp_path, MLU_EXTENSION))
    assert (sub.layout, sub.extension) == ("mlu_extension", "_C")
    assert (sub.module, sub.entry_default) == ("mlu_custom_ext.ops.custom_ops", "active_sigmoid_mlu")
    assert sub.plan.include_dirs == ("mlu_custom_ext/src", "mlu_custom_ext/src/mlu")


def test_a_torch_library_op_without_python_is_called_through_torch_ops(tmp_path):
    write_tree(tmp_path, {k: v for k, v in MLU_EXTENSION.items() if "/ops/" not in k})
    (tmp_path / "mlu_custom_ext/ops").mkdir()
    (tmp_path / "mlu_custom_ext/ops/__init__.py").write_text("")
    sub = bound(tmp_path)
    assert (sub.module, sub.entry_default) == ("torch", "ops.mlu_custom_ext.active_sigmoid_mlu")


def test_a_flat_folder_builds_everything_beside_each_other(tmp_path):
    bind = '#include <torch/extension.h>\nPYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("matmul", &mm); }\n'
    sub = bound(write_tree(tmp_path, {"mm.mlu": KERNEL, "bind.cpp": bind, "setup.py": "x = 1\n"}), MATMUL)
    assert (sub.layout, sub.extension, sub.module, sub.entry_default) == ("flat", "my_ops_ext", "my_ops_ext", "matmul")
    assert (sub.plan.mlu_sources, sub.plan.cpp_sources) == (("mm.mlu",), ("bind.cpp",))
    ops = bound(write_tree(tmp_path, {"ops.py": "def matmul(a, b): ...\n"}), MATMUL)
    assert (ops.module, ops.entry_default) == ("ops", "matmul")  # a Python function comes first


def test_an_incomplete_lab_project_names_its_layout_and_what_is_missing(tmp_path):
    write_tree(tmp_path, {k: v for k, v in EXP_5_1.items() if not k.endswith(".mlu")})
    with pytest.raises(LayoutError) as info:
        inspect_submission(tmp_path)
    assert "AICS exp_5_1" in str(info.value) and "mlu_custom_ext/mlu/src/*.mlu (kernels)" in str(info.value)
    assert info.value.layout == "aics_exp_5_1"


def test_a_project_without_the_assignments_entry_says_what_was_looked_for(tmp_path):
    sub = inspect_submission(write_tree(tmp_path, EXP_5_1))
    with pytest.raises(LayoutError, match=r"no entry for matmul found.*matmul\(\) or active_matmul_mlu\(\)"):
        bind_entry(sub, MATMUL)


def test_an_unknown_folder_gets_the_closest_layout_and_the_project_inside_it(tmp_path):
    write_tree(tmp_path / "labs" / "exp_5_1", EXP_5_1)
    write_tree(tmp_path, {"README.md": "my labs\n", "mlu_custom_ext/mlu_functions/mlu_functions.py": "def sigmoid(x): ...\n"})
    with pytest.raises(LayoutError) as info:
        inspect_submission(tmp_path)
    text = str(info.value)
    assert "the closest is the AICS exp_5_1 project" in text and "mlu_custom_ext/mlu/src/*.cpp" in text
    assert "labs/exp_5_1/ holds the AICS exp_5_1 project" in text
    assert info.value.layout == "none (closest: aics_exp_5_1)"


def test_build_outputs_are_never_sources(tmp_path):
    write_tree(tmp_path, {**EXP_5_1, "build/lib/mlu_custom_ext/mlu/src/old.cpp": "", "build/x/mlu_functions.py": ""})
    assert inspect_submission(tmp_path).plan.cpp_sources == ("mlu_custom_ext/mlu/src/bang_sigmoid.cpp",)


def test_batch_intake_takes_every_layout_mixed_in_one_class(tmp_path):
    klass = tmp_path / "class"
    write_tree(klass / "alice", GOOD)
    write_tree(klass / "bob" / "exp_5_1_custom_pytorch_mlu_op", EXP_5_1)  # wrapped one level down
    write_tree(klass / "carol", {k: v for k, v in EXP_5_1.items() if k.startswith("mlu_custom_ext/")})  # package only
    write_tree(klass / "dave" / "mlu_extension", MLU_EXTENSION)
    write_tree(klass / "erin", {"k.mlu": KERNEL, "b.cpp": PYBIND, "ops.py": "def matmul(a, b): ...\n"})
    subs = collect_submissions(klass, tmp_path / "unpacked")
    assert all(s.problem is None for s in subs), [s.problem for s in subs]
    layouts = {s.student_id: inspect_submission(s.path).layout for s in subs}
    assert layouts == {"alice": "handout", "bob": "aics_exp_5_1", "carol": "aics_exp_5_1", "dave": "mlu_extension",
                       "erin": "flat"}
    assert subs[2].path == klass / "carol"  # not down into its single package folder
    assert looks_like_submission(klass / "carol") and not looks_like_submission(klass)


def test_the_layout_table_knows_the_published_layouts():
    assert [layout.name for layout in LAYOUTS] == ["aics_exp_5_1", "mlu_extension", "handout", "flat"]
    assert all(layout.markers and layout.needs and layout.mlu and layout.cpp for layout in LAYOUTS)
    assert detect(Path("/nonexistent")) is None
