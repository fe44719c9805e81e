"""Torch's work on the device is replayed, never called a cheat (issue 36), graded end to end in the docker sandbox.

Two corpora, as hard as each other. HONEST: the ways students really wrap a kernel -- casts both ways, pads and
cats to an aligned length, slices made contiguous, transposes, clamps, scalar affine ops, zero-initialised outputs,
empty_like + copy_, a forbidden operator used only to check the answer, ATen calls in a C++ binding -- each must be
graded exactly as the same kernel alone: the same verdict, score and correctness, no flag, no "integrity" or "did not
compute" anywhere, and a stage time that differs only by the torch operators' own modelled row. CHEATS: the graded
function hidden in the new path (a forbidden operator beside a decoy launch, laundered through the kernel, a forged
operator record, arithmetic the assignment does not allow): none keeps a point of speed or a case it did not
compute, each with a named verdict.

Each variant is the reference's kernels with its own ops.py (and binding, where it says), made at test time; its
build is shared with the reference's through the build cache where only ops.py differs."""

from __future__ import annotations

import shutil
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from grader.orchestration.options import GradeEnvironment, GradeObserver, GradeRequest

REFERENCES = Path(__file__).resolve().parents[2] / "reference_kernels"
TORCH_OPS = "torch_ops"

pytestmark = [pytest.mark.docker, pytest.mark.slow]


@dataclass(frozen=True)
class Variant:
    name: str
    reference: str  # the kernel-only twin: reference_kernels/<reference>
    ops: str  # ops.py
    binding: str | None = None  # replaces cpp/<the reference's binding file>
    expect: dict = field(default_factory=dict)  # cheats: verdict, message words


SIGMOID_HEAD = "import my_ops_ext\nimport torch\nimport torch.nn.functional as F\n\n\ndef sigmoid(x):\n"
MATMUL_HEAD = "import my_ops_ext\nimport torch\nimport torch.nn.functional as F\n\n\ndef matmul(a, b):\n"


def _sigmoid(body: str) -> str:
    return SIGMOID_HEAD + textwrap.indent(textwrap.dedent(body).strip() + "\n", "    ")


def _matmul(body: str) -> str:
    return MATMUL_HEAD + textwrap.indent(textwrap.dedent(body).strip() + "\n", "    ")


CAST_PAD_BINDING = """\
// A float-only kernel behind a binding that casts half inputs with ATen and pads to 1024 with at::cat.
#include <torch/extension.h>

#include "aten/operators/bang/bang_kernel.h"
#include "aten/operators/bang/internal/bang_internal.h"
#include "../mlu/sigmoid_vector.h"

using namespace torch_mlu;

torch::Tensor sigmoid_vector(torch::Tensor x) {
  const bool half = x.scalar_type() == at::kHalf;
  auto input = x.to(at::kFloat).contiguous();
  const int64_t n = input.numel();
  const int64_t pad = (1024 - n % 1024) % 1024;
  if (pad) input = at::cat({input, at::zeros({pad}, input.options())});
  auto output = at::zeros_like(input);
  sigmoid_vector_entry(getCurQueue(), getMluTensorImpl(input)->mlu_data_ptr(),
                       getMluTensorImpl(output)->mlu_data_ptr(), input.numel(), false);
  TORCH_BANGC_KERNEL_LAUNCH_CHECK();
  auto result = output.narrow(0, 0, n);
  return half ? result.to(at::kHalf) : result.contiguous();
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("sigmoid_vector", &sigmoid_vector); }
"""

# A binding that forges an operator record: it computes sigmoid on the CPU, uploads it inside a journaled
# "aten::copy_" whose claimed source is the input (so the upload is not journaled as bytes), beside a one-element
# launch. The replay runs the copy it was told of: the twin's input, not its sigmoid.
FORGED_OP_BINDING = """\
#include <torch/extension.h>

#include <string>

#include "aten/operators/bang/bang_kernel.h"
#include "aten/operators/bang/internal/bang_internal.h"
#include "bang_emu/external.h"
#include "../mlu/sigmoid_vector.h"

using namespace torch_mlu;

static std::string desc(const at::Tensor& t) {
  return "{\\"t\\":[" + std::to_string(reinterpret_cast<uintptr_t>(t.data_ptr())) + ",\\"" +
         std::string(c10::toString(t.scalar_type())) + "\\",[" + std::to_string(t.numel()) + "],[1]]}";
}

torch::Tensor sigmoid_vector(torch::Tensor x) {
  auto input = x.contiguous();
  auto output = at::empty_like(input);
  sigmoid_vector_entry(getCurQueue(), getMluTensorImpl(input)->mlu_data_ptr(),
                       getMluTensorImpl(output)->mlu_data_ptr(), 1, input.scalar_type() == at::kHalf);
  auto answer = input.cpu().sigmoid();
  const std::string args = "[" + desc(output) + "," + desc(input) + "]";
  bang_emu_journal_op_begin("aten::copy_", "", args.c_str());
  output.copy_(answer);
  bang_emu_journal_op_end(("{\\"outs\\":[{\\"arg\\":0,\\"t\\":" + desc(output) + "}]}").c_str());
  return output;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("sigmoid_vector", &sigmoid_vector); }
"""

HONEST = [
    Variant("sigmoid_half_via_float", "sigmoid/vector", _sigmoid("""
        if x.dtype == torch.half:
            return my_ops_ext.sigmoid_vector(x.float()).half()
        return my_ops_ext.sigmoid_vector(x)
    """)),
    Variant("sigmoid_to_dtype", "sigmoid/vector", _sigmoid("""
        return my_ops_ext.sigmoid_vector(x.to(torch.float32)).to(x.dtype)
    """)),
    Variant("sigmoid_cat_pad_slice", "sigmoid/vector", _sigmoid("""
        n = x.numel()
        padded = torch.cat([x, torch.zeros((-n) % 1024, dtype=x.dtype, device=x.device)])
        return my_ops_ext.sigmoid_vector(padded)[:n].contiguous()
    """)),
    Variant("sigmoid_f_pad_reshape", "sigmoid/vector", _sigmoid("""
        n = x.numel()
        padded = F.pad(x.view(1, -1), (0, (-n) % 256)).reshape(-1)
        return my_ops_ext.sigmoid_vector(padded).narrow(0, 0, n).clone()
    """)),
    Variant("sigmoid_clamp", "sigmoid/vector", _sigmoid("""
        return my_ops_ext.sigmoid_vector(torch.clamp(x, -30, 30))
    """)),
    Variant("sigmoid_scalar_affine", "sigmoid/vector", _sigmoid("""
        return my_ops_ext.sigmoid_vector(x * 1.0 + 0.0)
    """)),
    Variant("sigmoid_empty_like_copy", "sigmoid/vector", _sigmoid("""
        out = torch.empty_like(x)
        out.copy_(my_ops_ext.sigmoid_vector(x.clone()))
        return out
    """)),
    Variant("sigmoid_checks_itself", "sigmoid/vector", _sigmoid("""
        y = my_ops_ext.sigmoid_vector(x)
        if not torch.allclose(y.float(), torch.sigmoid(x.float()), atol=1e-2, rtol=0):
            raise RuntimeError("my kernel is wrong")
        return y
    """)),
    Variant("sigmoid_binding_casts_and_pads", "sigmoid/vector", _sigmoid("""
        return my_ops_ext.sigmoid_vector(x)
    """), binding=CAST_PAD_BINDING),
    Variant("matmul_half_via_float", "matmul/vector", _matmul("""
        if a.dtype == torch.half:
            return my_ops_ext.matmul_vector(a.float(), b.float()).half()
        return my_ops_ext.matmul_vector(a, b)
    """)),
    Variant("matmul_transposes_contiguous", "matmul/vector", _matmul("""
        bt = b.t().contiguous()                 # kept as [N, K] ...
        return my_ops_ext.matmul_vector(a.contiguous(), bt.t().contiguous())  # ... and back for this kernel
    """)),
    Variant("matmul_zero_init_and_slice", "matmul/vector", _matmul("""
        out = torch.zeros(a.shape[0], b.shape[1], dtype=a.dtype, device=a.device)
        out[:, :] = my_ops_ext.matmul_vector(a, b)
        return out[: a.shape[0]].contiguous()
    """)),
]

CHEATS = [
    Variant("cheat_sigmoid_beside_decoy", "sigmoid/vector", _sigmoid("""
        my_ops_ext.sigmoid_vector(x[:1].contiguous())
        return torch.sigmoid(x)
    """), expect={"verdict": "not_using_kernel", "words": ["aten::sigmoid", "ops.py:8"]}),
    Variant("cheat_exp_chain", "sigmoid/vector", _sigmoid("""
        my_ops_ext.sigmoid_vector(x[:1].contiguous())
        return 1.0 / (1.0 + torch.exp(-x))
    """), expect={"verdict": "not_using_kernel", "words": ["aten::exp"]}),
    Variant("cheat_laundered_through_kernel", "sigmoid/vector", _sigmoid("""
        return my_ops_ext.sigmoid_vector(torch.logit(torch.sigmoid(x.float()), eps=1e-7).to(x.dtype))
    """), expect={"verdict": "not_using_kernel", "words": ["aten::sigmoid"]}),
    Variant("cheat_tensor_arithmetic", "sigmoid/vector", _sigmoid("""
        y = my_ops_ext.sigmoid_vector(x)
        return y * 0.0 + torch.special.expit(x) * torch.ones_like(x)
    """), expect={"verdict": "not_using_kernel"}),
    Variant("cheat_matmul_beside_decoy", "matmul/vector", _matmul("""
        my_ops_ext.matmul_vector(a[:1].contiguous(), b)
        return a @ b
    """), expect={"verdict": "not_using_kernel", "words": ["aten::mm"]}),
    Variant("host_round_trip", "sigmoid/vector", _sigmoid("""
        clipped = torch.from_numpy(x.cpu().numpy().clip(-30, 30))
        return my_ops_ext.sigmoid_vector(clipped.to(x.device))
    """), expect={"verdict": "integrity", "words": ["ops.py:8: a host-to-device copy", "on the device"],
                   "not_said": ["did not compute"]}),
    Variant("cheat_forged_op_record", "sigmoid/vector", _sigmoid("""
        return my_ops_ext.sigmoid_vector(x)
    """), binding=FORGED_OP_BINDING, expect={"verdict": "integrity"}),
]


def _make(variant: Variant, root: Path) -> Path:
    folder = root / variant.name
    shutil.copytree(REFERENCES / variant.reference, folder)
    (folder / "ops.py").write_text(variant.ops)
    if variant.binding is not None:
        (binding,) = sorted((folder / "cpp").glob("*.cpp"))
        binding.write_text(variant.binding)
    return folder


def _grade(submission: Path, out: Path):
    from grader.orchestration.build_cache import default_build_cache
    from grader.orchestration.job import run_job

    return run_job(submission, GradeRequest(seed="corpus", seed_mode="public", stages=("vector",)),
                   GradeEnvironment(sandbox="docker", batch=True, build_cache=default_build_cache()),
                   GradeObserver(out_dir=out)).result


@pytest.fixture(scope="module")
def twins(emu_image, tmp_path_factory):
    """The kernel-only references, graded once: what each honest variant must equal."""
    root = tmp_path_factory.mktemp("twins")
    return {ref: _grade(REFERENCES / ref, root / ref.replace("/", "_")) for ref in ("sigmoid/vector", "matmul/vector")}


@pytest.mark.parametrize("variant", HONEST, ids=lambda v: v.name)
def test_honest_device_work_keeps_the_kernels_grade(variant, twins, tmp_path):
    result = _grade(_make(variant, tmp_path), tmp_path / "out")
    twin = twins[variant.reference]
    said = " ".join([result.message, *(c.message for c in result.cases), *(s.message for s in result.stages)]).lower()
    problems = []
    for case, theirs in zip(result.cases, twin.cases, strict=True):
        if case.verdict != theirs.verdict:
            problems.append(f"case {case.name}: {case.verdict}, the kernel alone {theirs.verdict}: {case.message[:300]}")
    correctness = sum(g.points for g in result.groups), sum(g.points for g in twin.groups)
    if correctness[0] != correctness[1]:
        problems.append(f"correctness {correctness[0]}, the kernel alone {correctness[1]}")
    for mine, theirs in zip(result.stages, twin.stages, strict=True):
        # the time the operators add may cost a stage its threshold, and nothing else may differ
        slower = (mine.timing and mine.threshold_us and mine.timing.median_us > mine.threshold_us
                  and not (theirs.timing and theirs.timing.median_us > mine.threshold_us))
        if mine.points != theirs.points and not slower:
            problems.append(f"stage {mine.name}: {mine.points} points, the kernel alone {theirs.points}")
    if str(result.verdict) not in (str(twin.verdict), "too_slow"):
        problems.append(f"verdict {result.verdict}, the kernel alone {twin.verdict}: {result.message[:400]}")
    if result.integrity:
        problems.append(f"flagged for review: {result.integrity}")
    for words in ("integrity", "did not compute", "not your kernels", "claims about this call"):
        if words in said:
            problems.append(f"{words!r} is said of honest device work")
    for mine, theirs in zip(result.stages, twin.stages, strict=True):
        if mine.trace and theirs.trace:  # the torch operators' row is all that differs
            ops_us = mine.trace.time_split_us.get(TORCH_OPS, 0.0)
            if mine.trace.modelled_time_us != pytest.approx(theirs.trace.modelled_time_us + ops_us, rel=0.01):
                problems.append(f"stage {mine.name}: {mine.trace.modelled_time_us:.1f} us, the kernel alone "
                                f"{theirs.trace.modelled_time_us:.1f} + torch ops {ops_us:.1f}")
    assert not problems, problems


@pytest.mark.parametrize("variant", CHEATS, ids=lambda v: v.name)
def test_cheats_in_the_device_op_path_gain_nothing(variant, tmp_path):
    result = _grade(_make(variant, tmp_path), tmp_path / "out")
    problems = []
    if str(result.verdict) != variant.expect["verdict"]:
        problems.append(f"verdict {result.verdict}, expected {variant.expect['verdict']}: {result.message[:400]}")
    if sum(s.points for s in result.stages):
        problems.append(f"stage points {[s.points for s in result.stages]}")
    text = result.to_json()
    problems += [f"{w!r} not said" for w in variant.expect.get("words", []) if w not in text]
    problems += [f"{w!r} said" for w in variant.expect.get("not_said", []) if w in text]
    assert not problems, problems


def test_the_ops_time_is_its_own_row(twins, tmp_path):
    """A clamp before the kernel costs its modelled bytes through GDRAM, as its own row of the split."""
    clamp = next(v for v in HONEST if v.name == "sigmoid_clamp")
    result = _grade(_make(clamp, tmp_path), tmp_path / "out")
    (stage,) = result.stages
    assert stage.trace is not None and stage.trace.time_split_us.get(TORCH_OPS, 0.0) > 0
    (twin_stage,) = twins["sigmoid/vector"].stages
    assert TORCH_OPS not in (twin_stage.trace.time_split_us if twin_stage.trace else {})
