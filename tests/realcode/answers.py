"""Public AICS chapter-5 lab answers and Cambricon's own example, graded as a student would hand them in.

Nothing of their code is in this repository. Each answer is read at run time from a fetched bare mirror of its
public GitHub repository (`/work/.mirror/<owner>+<name>/repo`, or `$REALCODE_MIRRORS`), its files are placed into
the handout layout (`mlu/`, `cpp/`) byte for byte, and the grader's **layout adapter** adds only what the handout
needs and the lab never asked the student to write:

- `grade.toml`: the assignment, and for the lab's pybind11 binding `extension = "libmlu_custom_ext"` (the lab
  hard-codes that module name instead of TORCH_EXTENSION_NAME);
- `ops.py`: `sigmoid(x)` that calls the op the answer registers (the lab's own Python wrapper,
  `mlu_functions.py`, is an autograd class around the same call);
- where a source includes a header through a subfolder (`#include "mlu/bang_sigmoid_sample.h"` in Cambricon's
  example), the same header file is also placed at that relative path.

The adapter is the grader's, never the student's: every file it writes is listed in `Staged.adapter_files`, and
every file copied from the repository is byte-identical to the repository's blob (`Staged.copied`).

Each answer carries the verdict we judge right from reading its code (`expect`) and that reading (`reading`),
so `tests/realcode/test_realcode.py` can assert it and `scripts/realcode_table.py` can print it beside what the
grader made of it.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass, field, replace
from pathlib import Path

MIRRORS = Path(os.environ.get("REALCODE_MIRRORS", "/work/.mirror"))


@dataclass(frozen=True)
class Expect:
    """What a correct grader makes of the answer, from reading its code."""

    verdict: str  # overall verdict
    passed_groups: frozenset[str]  # case groups with every case passing
    failed_groups: frozenset[str]  # case groups with at least one failing case
    stages_passed: frozenset[str]  # stages earning their speed points
    score: tuple[float, float]  # inclusive range


@dataclass(frozen=True)
class Answer:
    key: str
    repo: str  # owner/name on GitHub
    root: str  # the answer's folder inside the repository
    files: dict[str, str]  # handout path -> path under root
    adapter: str  # "exp_5_1_pybind" | "torch_library" | "exp_5_2_program"
    op: str  # the op the answer registers
    reading: str  # our reading of the code: what a correct grader must say
    expect: Expect
    commit: str | None = None  # None: the mirror's HEAD
    also: dict[str, str] = field(default_factory=dict)  # extra handout path -> path under root (subfolder includes)
    assignment: str = "sigmoid"
    stages: str | None = None  # grade only these stages (`--stages`); None: every stage
    launch: str = ""  # exp_5_2 programs: the dim and function type their own main() launches the kernel with

    @property
    def mirror(self) -> Path:
        base = MIRRORS / self.repo.replace("/", "+") / "repo"
        return base / ".git" if (base / ".git").is_dir() else base


FP32_GROUPS = frozenset({"tiny", "aligned", "tail", "saturation", "large"})
ALL_GROUPS = FP32_GROUPS | {"half"}
STAGES = frozenset({"vector", "multicore", "pipeline"})

_LAB_FILES = {  # the AICS exp_5_1 template: mlu_custom_ext/mlu/{include,src}
    "mlu/bang_sigmoid_sample.mlu": "mlu_custom_ext/mlu/src/bang_sigmoid_sample.mlu",
    "mlu/bang_sigmoid_sample.h": "mlu_custom_ext/mlu/include/bang_sigmoid_sample.h",
    "mlu/kernel.h": "mlu_custom_ext/mlu/include/kernel.h",
    "mlu/customed_ops.h": "mlu_custom_ext/mlu/include/customed_ops.h",
    "cpp/bang_sigmoid.cpp": "mlu_custom_ext/mlu/src/bang_sigmoid.cpp",
}

_FLOAT_ONLY = (
    "The binding casts every dtype to float* and the template is instantiated for float only, so fp16 inputs "
    "are read as floats: the half group must fail (a read past the end of the half tensor), and only it."
)

# The exp_5_1 lab answers (vector technique, float only) all score like this.
_VECTOR_FP32 = Expect("runtime_error", FP32_GROUPS, frozenset({"half"}), frozenset({"vector"}), (70, 70))

# ... and those that copy far past their tensors from 12 elements up (`nram_limit = 12`) like this.
_TINY_ONLY = Expect("runtime_error", frozenset({"tiny"}), frozenset({"aligned", "tail", "saturation", "half", "large"}),
                    frozenset(), (10, 10))


def _lab_answer(key: str, repo: str, root: str, *, reading: str, expect: Expect, op: str = "active_sigmoid_mlu",
                commit: str | None = None) -> Answer:
    """An AICS exp_5_1 answer: the lab template's files, its pybind11 binding."""
    return Answer(key=key, repo=repo, root=root, files=dict(_LAB_FILES), adapter="exp_5_1_pybind", op=op,
                  reading=reading, expect=expect, commit=commit)


ANSWERS: list[Answer] = [
    Answer(
        key="cambricon-example",
        repo="Cambricon/torch_mlu",
        root="examples/mlu_extension/mlu_custom_ext/src",
        files={
            "mlu/bang_sigmoid_sample.mlu": "mlu/bang_sigmoid_sample.mlu",
            "mlu/bang_sigmoid_sample.h": "mlu/bang_sigmoid_sample.h",
            "mlu/kernel.h": "mlu/kernel.h",
            "cpp/custom_sigmoid.cpp": "custom_sigmoid.cpp",
            "cpp/custom_sigmoid.h": "custom_sigmoid.h",
        },
        also={"cpp/mlu/bang_sigmoid_sample.h": "mlu/bang_sigmoid_sample.h"},
        adapter="torch_library",
        op="active_sigmoid_mlu",
        reading=(
            "Cambricon's own torch_mlu 2.x example: one task (dim {1,1,1}), NRAM tiles of half of NRAM, "
            "__bang_active_sigmoid over CEIL_ALIGN(rem, 64) with only rem elements stored. Correct for every "
            "fp32 size. " + _FLOAT_ONLY + " One task, so multicore and pipeline cannot pass; the vector stage "
            "is exactly the technique it claims and must keep its points."
        ),
        expect=_VECTOR_FP32,
    ),
    _lab_answer(
        "kolp323", "kolp323/Cambricon-MLU-Kernel-Labs", "custom_pytorch_mlu_op",
        reading=(
            "The lab template completed with __bang_active_sigmoid, one task, torch_mlu 2.x headers "
            "(framework/core/..., bang_device_functions_decls.h). Correct for every fp32 size. " + _FLOAT_ONLY
            + " Vector stage: yes; multicore/pipeline: one task, no."
        ),
        expect=_VECTOR_FP32,
    ),
    _lab_answer(
        "henryli2002", "henryli2002/Intelligent-Computing-Systems-labs", "exp_5_1_custom_pytorch_mlu_op",
        reading=(
            "The 2023 lab (aten/cnnl/... headers, cnnlMalloc()) completed with __bang_active_sigmoid, one task. "
            "Correct for every fp32 size. " + _FLOAT_ONLY + " Vector stage: yes; multicore/pipeline: no."
        ),
        expect=_VECTOR_FP32,
    ),
    _lab_answer(
        "geotle77", "geotle77/UCAS_AICS", "Chapter5/exp5_1/exp_5_1_custom_pytorch_mlu_op", op="active_sigmoid",
        reading=(
            "The 2023 lab with __bang_active_sigmoid, one task; the remainder calls the builtin on `rem` "
            "elements, not CEIL_ALIGN(rem, 64). The emulator accepts any positive count, so it is correct for every "
            "fp32 size here; whether MLU370 itself needs a multiple of 64 there is not confirmed by a public "
            "document (if it does, the tail cases should fail and this row is wrong). " + _FLOAT_ONLY + " Registers the op as `active_sigmoid`. Vector stage: yes; multicore/"
            "pipeline: no."
        ),
        expect=_VECTOR_FP32,
    ),
    _lab_answer(
        "yuichi1001", "Yuichi1001/2024-AICS-EXP", "实验答案/实验七/exp_5_1_custom_pytorch_mlu_op",
        reading=(
            "The 2024 lab (CATCH aten/operators/bang headers) with a scalar `1 / (1 + exp(-x))` loop over NRAM "
            "instead of the builtin, one task. Correct for every fp32 size (the loop also runs over the "
            "unstored padding up to CEIL_ALIGN(rem, 64), harmless). " + _FLOAT_ONLY + " No stage can pass: "
            "vector requires __bang_active_sigmoid, the others more than one core."
        ),
        expect=Expect("runtime_error", FP32_GROUPS, frozenset({"half"}), frozenset(), (60, 60)),
    ),
    _lab_answer(
        "yelloworange10", "yelloworange10/Intelligent-Computing-System-Experiment",
        "chapter5/exp_5_1_custom_pytorch_mlu_op",
        reading=(
            "Tuned to the lab's 3x4 test: `nram_limit = 12` after computing it, scalar exp loop, and the full "
            "loop still copies NRAM_LIMIT_SIZE bytes (half of NRAM) per 12 elements. Any input of 12 elements "
            "or more reads and writes far past both tensors: a genuine out-of-bounds bug. Only inputs under 12 "
            "elements (tiny) are right. No stage can pass."
        ),
        expect=_TINY_ONLY,
    ),
    _lab_answer(
        "luoxukun-2023", "LuoXukun/AI-homework", "chapters/code_chap_5_student/code_chap_5_student_2023",
        commit="a732d1c",  # the 2023 sigmoid; a later commit removed the folder
        reading=(
            "The same `nram_limit = 12` scalar answer as yelloworange10 (2023 headers): reads and writes "
            "NRAM_LIMIT_SIZE bytes per 12 elements, so anything from 12 elements up is out of bounds. Only tiny "
            "is right; no stage can pass."
        ),
        expect=_TINY_ONLY,
    ),
]


_MATMUL_FP32_ONLY = (
    "The lab's programs are float32 only (`float *left`), so the adapter's binding refuses float16 (the half "
    "group fails: an extension, no stage depends on it)."
)

_EXP_5_2 = "实验答案/实验七/exp_5_2_matmul_opt"


def _program(key: str, repo: str, root: str, name: str, stage: str, reading: str, expect: Expect,
             launch: str = "cnrtDim3_t dim = {1, 1, 1}; cnrtFunctionType_t func_type = CNRT_FUNC_TYPE_BLOCK;") -> Answer:
    return Answer(key=key, repo=repo, root=root, files={f"mlu/{name}.mlu": f"{name}.mlu"}, adapter="exp_5_2_program",
                  op="multiplyMatricesMLU", reading=reading, expect=expect, assignment="matmul", stages=stage,
                  launch=launch)


_SCALAR_GROUPS = frozenset({"tiny", "aligned", "tail"})
ANSWERS += [
    _program(
        f"{who}-{name[:2]}", repo, root, name, stage,
        reading=reading.format(size=size) + " " + _MATMUL_FP32_ONLY,
        expect=expect,
    )
    for who, repo, root, size in (
        ("kolp323", "kolp323/Cambricon-MLU-Kernel-Labs", "matmul_optimization", "128x256x256"),
        ("yuichi1001", "Yuichi1001/2024-AICS-EXP", _EXP_5_2, "128x256x128"),
    )
    for name, stage, reading, expect in (
        ("01_scalar", "scalar_gdram",
         "exp_5_2 01: one task, a scalar triple loop straight on GDRAM with the runtime m, n, k: correct for "
         "every fp32 shape (the program's own size is {size}). The scalar GDRAM stage is exactly this technique.",
         Expect("runtime_error", _SCALAR_GROUPS, frozenset({"half"}), frozenset({"scalar_gdram"}), (40, 40))),
        ("02_scalar_nram", "scalar_nram",
         "exp_5_2 02: both operands and the result copied whole into __nram__ arrays sized for the program's "
         "{size}, scalar loops on NRAM with the runtime m, n, k: correct for every shape that fits those "
         "arrays, which every scalar-stage case does. The scalar NRAM stage is exactly this technique.",
         Expect("runtime_error", _SCALAR_GROUPS, frozenset({"half"}), frozenset({"scalar_nram"}), (40, 40))),
    )
]


# Yuichi1001's 02 copies with the compile-time sizes, not the runtime ones: `__memcpy(left_nram, left, M * N *
# sizeof(float), GDRAM2NRAM)` (and N * K, M * K): for any shape but the program's own 128x256x128 it reads past both
# inputs and writes past the output. A genuine out-of-bounds bug; only the lab's own shape is right.
ANSWERS = [a if a.key != "yuichi1001-02" else replace(
    a,
    reading="exp_5_2 02 (scalar on NRAM) with every __memcpy sized by the compile-time M, N, K (128x256x128), "
    "not the runtime m, n, k: any other shape reads past both inputs and writes past the output, a genuine "
    "out-of-bounds bug. Only the lab's own 128x256x128 case is right; the stage cannot pass. " + _MATMUL_FP32_ONLY,
    expect=Expect("runtime_error", frozenset(), frozenset({"tiny", "tail", "half"}), frozenset(), (5, 5)),
) for a in ANSWERS]


def by_key(key: str) -> Answer:
    return next(a for a in ANSWERS if a.key == key)


def available(answer: Answer) -> bool:
    return answer.mirror.is_dir()


def _blob(answer: Answer, path: str) -> bytes:
    spec = f"{answer.commit or 'HEAD'}:{answer.root}/{path}"
    return subprocess.run(
        ["git", "--git-dir", str(answer.mirror), "show", spec], capture_output=True, check=True, timeout=60
    ).stdout


_OPS_PYBIND = '''\
"""Layout adapter written by the grader (tests/realcode/answers.py), not by the student: the AICS exp_5_1 lab
registers its op with PYBIND11_MODULE(libmlu_custom_ext, m); this calls it."""
import libmlu_custom_ext


def sigmoid(x):
    return libmlu_custom_ext.{op}(x)
'''

_OPS_LIBRARY = '''\
"""Layout adapter written by the grader (tests/realcode/answers.py), not by the student: the example registers
its op with TORCH_LIBRARY_FRAGMENT(mlu_custom_ext, m); this calls it."""
import torch


def sigmoid(x):
    return torch.ops.mlu_custom_ext.{op}(x)
'''

_OPS_MATMUL = '''\
"""Layout adapter written by the grader (tests/realcode/answers.py), not by the student: the exp_5_2 program has
no PyTorch binding; this calls the grader's (cpp/realcode_binding.cpp)."""
import my_ops_ext


def matmul(a, b):
    return my_ops_ext.matmul(a, b)
'''

_LAUNCH_MLU = '''\
// Layout adapter written by the grader (tests/realcode/answers.py), not by the student. The exp_5_2 program
// launches its kernel from its own main(); this host entry launches the same kernel, with the dim and function
// type that main() uses, on the grader's tensors. The kernel itself is the student's, in the other .mlu file.
#include <bang.h>

__mlu_global__ void {op}(float *left, float *right, float *result, int m, int n, int k);

void realcode_matmul_launch(cnrtQueue_t queue, float *left, float *right, float *result, int m, int n, int k) {{
  {launch}
  {op}<<<dim, func_type, queue>>>(left, right, result, m, n, k);
}}
'''

_BINDING_CPP = '''\
// Layout adapter written by the grader (tests/realcode/answers.py), not by the student: a PyTorch binding for an
// exp_5_2 program, which has none. a is [M, K], b is [K, N]; the lab's kernel names them left[m][n], right[n][k].
#include <torch/extension.h>

#include "aten/utils/tensor_util.h"
#include "framework/core/MLUStream.h"

using namespace torch_mlu;

void realcode_matmul_launch(cnrtQueue_t queue, float *left, float *right, float *result, int m, int n, int k);

static torch::Tensor matmul(torch::Tensor a, torch::Tensor b) {
  TORCH_CHECK(a.scalar_type() == at::kFloat && b.scalar_type() == at::kFloat,
              "the exp_5_2 program's kernel takes float32 only, got ", a.scalar_type());
  auto lhs = a.contiguous();
  auto rhs = b.contiguous();
  auto c = at::empty({a.size(0), b.size(1)}, lhs.options());
  realcode_matmul_launch(getCurMLUStream(), static_cast<float *>(mlu_data_ptr(getMluTensorImpl(lhs))),
                         static_cast<float *>(mlu_data_ptr(getMluTensorImpl(rhs))),
                         static_cast<float *>(mlu_data_ptr(getMluTensorImpl(c))), (int)a.size(0), (int)a.size(1),
                         (int)b.size(1));
  const cnrtRet_t status = cnrtGetLastError();
  TORCH_CHECK(status == cnrtSuccess, "kernel launch failed: ", cnrtGetErrorStr(status));
  return c;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("matmul", &matmul); }
'''

_GRADE_TOML = '''\
# Layout adapter written by the grader (tests/realcode/answers.py), not by the student.
assignment = "{assignment}"
module = "ops"
{extension}
[student]
id = "{key}"
name = "{repo}"
'''


@dataclass
class Staged:
    path: Path
    copied: dict[str, bytes]  # handout path -> the repository's bytes, unchanged
    adapter_files: list[str]  # handout paths the adapter wrote


def stage(answer: Answer, destination: Path) -> Staged:
    """Write the answer in the handout layout under `destination` (created)."""
    destination.mkdir(parents=True, exist_ok=True)
    copied: dict[str, bytes] = {}
    for target, source in {**answer.files, **answer.also}.items():
        data = _blob(answer, source)
        out = destination / target
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(data)
        copied[target] = data
    adapter_files = ["ops.py", "grade.toml"]
    if answer.adapter == "exp_5_1_pybind":
        ops = _OPS_PYBIND.format(op=answer.op)
        extension = 'extension = "libmlu_custom_ext"'
    elif answer.adapter == "torch_library":
        ops = _OPS_LIBRARY.format(op=answer.op)
        extension = ""
    else:  # exp_5_2_program: a standalone program; its kernel is launched from the grader's host entry
        ops = _OPS_MATMUL
        extension = ""
        (destination / "mlu" / "realcode_launch.mlu").write_text(_LAUNCH_MLU.format(op=answer.op, launch=answer.launch))
        (destination / "cpp").mkdir(exist_ok=True)
        (destination / "cpp" / "realcode_binding.cpp").write_text(_BINDING_CPP)
        adapter_files += ["mlu/realcode_launch.mlu", "cpp/realcode_binding.cpp"]
    (destination / "ops.py").write_text(ops)
    (destination / "grade.toml").write_text(_GRADE_TOML.format(
        extension=extension, key=answer.key, repo=answer.repo, assignment=answer.assignment))
    return Staged(destination, copied, adapter_files)


def grade(staged: Path, out: Path, *, assignment: str = "sigmoid", stages: str | None = None,
          sandbox: str | None = None, timeout: float = 3600) -> dict:
    """Grade with the real grader (`grade submit`), return results.json as a dict."""
    import json

    root = Path(__file__).resolve().parents[2]
    cmd = [str(root / ".venv" / "bin" / "grade"), "submit", str(staged), "--assignment", assignment, "--out", str(out)]
    if stages:
        cmd += ["--stages", stages]
    if sandbox:
        cmd += ["--sandbox", sandbox]
    subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=root)
    return json.loads((out / "results.json").read_text())


def summary(result: dict) -> dict:
    """The facts the table and the tests compare: verdict, score, groups, stages passed."""
    groups_passed = {g["name"] for g in result.get("groups", []) if g["passed_cases"] == g["total_cases"]}
    groups_failed = {g["name"] for g in result.get("groups", []) if g["passed_cases"] < g["total_cases"]}
    stages_passed = {s["name"] for s in result.get("stages", []) if s["points"] >= s["points_possible"] > 0}
    return {
        "verdict": result["verdict"],
        "score": result["score"],
        "max_score": result["max_score"],
        "groups_passed": groups_passed,
        "groups_failed": groups_failed,
        "stages_passed": stages_passed,
        "message": result.get("message", ""),
        "compiler_output": (result.get("build") or {}).get("compiler_output", ""),
    }
