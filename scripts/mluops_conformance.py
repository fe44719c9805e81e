"""mlu-ops as the emulator's builtins conformance suite (issue 29, item 3).

    .venv/bin/python scripts/mluops_conformance.py [--mirror /work/.mirror/Cambricon+mlu-ops/repo] [--ops abs log]
                                                   [--json out.json]

For each selected operator, the operator's own kernel file (`kernels/<op>/*.mlu`, with its host launcher
`Kernel3StagePipeline<Op>` / `mluOpBlockKernel<Op>...`) is compiled with cncc-emu together with a small host
program written here (`MAIN` below: loads inputs, calls the launcher with mlu-ops' own task policy, writes the
output). The kernel is driven with the operator's own GTest cases (`test/mlu_op_gtest/pb_gtest/src/zoo/<op>/
test_case/*.prototxt`: shapes, dtypes, input ranges, operator parameters) and compared with the operator's CPU
reference under the case's own DIFF1/DIFF2 thresholds (the formulas of mlu-ops' pb_gtest `evaluator.h`).

What is ported rather than called (calling `cpuCompute` needs the whole pb_gtest executor, protobuf and the
mlu-ops host library):
  * the CPU references: the few lines of each zoo `<op>.cpp` `cpuCompute`, transcribed with numpy (`REFERENCES`);
  * the task policies of the operators' host code (`unaryOpPolicyFunc[Block]`, `binaryOpPolicyFunc`,
    focal loss's `policyFunc`) for a card of 4 clusters x 4 cores;
  * the inputs: uniform in the case's [lower_bound, upper_bound] from numpy seeded with the case's seed (not
    mlu-ops' own generator, so the values differ from a run on the card; the ranges, shapes and dtypes are the
    case's);
  * mlu-ops' logging (`mluop::logging::LogMessage`, three members, in `MAIN`), which the launchers reference.
Cases that need mlu-ops' host library (strided tensor descriptors) are reported as skipped with the reason.

Nothing of mlu-ops is copied into this repository: the mirror's files are exported to a temporary directory.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
from public_mlu_sweep import export_folder  # noqa: E402  (one exporter of mirrors for both tools)

DEFAULT_MIRROR = Path(os.environ.get("MLUOPS_MIRROR", "/work/.mirror/Cambricon+mlu-ops/repo"))
ZOO = "test/mlu_op_gtest/pb_gtest/src/zoo"
CLUSTERS, CORES_PER_CLUSTER = 4, 4  # the emulated MLU370-X8 (sandbox/bang_emu/devices.json)
NFU_ALIGN_SIZE = 128  # mlu-ops kernels/kernel.h
EPSILON = 1e-9  # mlu-ops pb_gtest evaluator.h
BLOCK, UNION1 = 0, 1

# dtype names of mlu_op_test.proto -> (numpy storage type, mluOpDataType_t value in mlu_op.h)
DTYPES = {"DTYPE_FLOAT": (np.float32, "MLUOP_DTYPE_FLOAT"), "DTYPE_HALF": (np.float16, "MLUOP_DTYPE_HALF"),
          "DTYPE_INT32": (np.int32, "MLUOP_DTYPE_INT32"),
          "DTYPE_COMPLEX_FLOAT": (np.float32, "MLUOP_DTYPE_COMPLEX_FLOAT")}


# ------------------------------------------------------------------------------------------ prototxt
_TOKEN = re.compile(r'\s*(?:(#[^\n]*)|("(?:[^"\\]|\\.)*")|([{}:])|([^\s{}:"#]+))')


def parse_prototxt(text: str) -> dict:
    """Protobuf text format into nested dicts; every field is a list of its values (repeated or not)."""
    tokens = [m.group(2) or m.group(3) or m.group(4) for m in _TOKEN.finditer(text) if not m.group(1)]
    tokens = [t for t in tokens if t]
    pos = 0

    def value(tok: str):
        if tok.startswith('"'):
            return tok[1:-1]
        try:
            return int(tok)
        except ValueError:
            pass
        try:
            return float(tok)
        except ValueError:
            return tok

    def message() -> dict:
        nonlocal pos
        out: dict = {}
        while pos < len(tokens) and tokens[pos] != "}":
            name = tokens[pos]
            pos += 1
            if tokens[pos] == ":":
                pos += 1
            if tokens[pos] == "{":
                pos += 1
                item = message()
                pos += 1  # "}"
            else:
                item = value(tokens[pos])
                pos += 1
            out.setdefault(name, []).append(item)
        return out

    return message()


def first(msg: dict, name: str, default: object = None) -> Any:
    return msg.get(name, [default])[0]


# ------------------------------------------------------------------------------------------ operators
@dataclass
class Tensor:
    dtype: str
    shape: list[int]
    strided: bool

    @property
    def count(self) -> int:
        return math.prod(self.shape) if self.shape else 1


@dataclass
class Case:
    name: str
    proto: dict
    inputs: list[Tensor]
    outputs: list[Tensor]
    formulas: dict[str, float]  # DIFF1 -> threshold ...

    @classmethod
    def load(cls, path: Path) -> Case:
        proto = parse_prototxt(path.read_text())

        def tensor(t: dict) -> Tensor:
            shape = first(t, "shape", {})
            return Tensor(first(t, "dtype"), list(shape.get("dims", [])), "dim_stride" in shape)

        tp = first(proto, "test_param", {})
        formulas = dict(zip(tp.get("error_func", []), tp.get("error_threshold", []), strict=False))
        return cls(path.stem, proto, [tensor(t) for t in proto.get("input", [])],
                   [tensor(t) for t in proto.get("output", [])], formulas)


@dataclass
class Operator:
    name: str  # the zoo folder
    mlu: str  # the kernel file with the launcher
    header: str  # declares the launcher
    call: str  # C++ expression; dim, ktype, q, dt (mluOpDataType_t), in[i], out[i], n, P[i] (params) are defined
    policy: Callable[[Case], tuple[tuple[int, int, int], int]]
    params: Callable[[Case], list[float]]
    reference: Callable[[Case, list[np.ndarray]], list[np.ndarray]]
    uses: str  # the builtins it exercises (for the report)
    arch: str = "mtp_372"  # the MLU370 of the course; div computes only on __BANG_ARCH__ >= 592 (div_union1.mlu)


def _bytes(t: Tensor) -> int:
    return t.count * np.dtype(DTYPES[t.dtype][0]).itemsize * (2 if "COMPLEX" in t.dtype else 1)


def unary_union1(case: Case) -> tuple[tuple[int, int, int], int]:
    """unaryOpPolicyFunc (kernels/unary_op/unary_op_host.cpp)."""
    size = -(-_bytes(case.inputs[0]) // NFU_ALIGN_SIZE) * NFU_ALIGN_SIZE
    need = -(-(size // NFU_ALIGN_SIZE) // CORES_PER_CLUSTER) * CORES_PER_CLUSTER
    y = need // CORES_PER_CLUSTER if need < CLUSTERS * CORES_PER_CLUSTER else CLUSTERS
    return (CORES_PER_CLUSTER, max(y, 1), 1), UNION1


def unary_block(case: Case) -> tuple[tuple[int, int, int], int]:
    """unaryOpPolicyFuncBlock: one task per OPTIMAL_BOUNDARY bytes (kernels/kernel.h), at most every core."""
    optimal_boundary = 64 * 1024
    used = min(-(-_bytes(case.inputs[0]) // optimal_boundary), CLUSTERS * CORES_PER_CLUSTER)
    return (1, max(used, 1), 1), BLOCK


def binary_union1(case: Case) -> tuple[tuple[int, int, int], int]:
    """binaryOpPolicyFunc (kernels/binary_op/binary_op_host.cpp) with div's ALIGN_SIZE of 128."""
    size = -(-_bytes(case.inputs[0]) // 128) * 128
    parts = -(-(size // 128) // CORES_PER_CLUSTER) * CORES_PER_CLUSTER
    y = parts // CORES_PER_CLUSTER if parts < CLUSTERS * CORES_PER_CLUSTER else CLUSTERS
    return (CORES_PER_CLUSTER, max(y, 1), 1), UNION1


def all_clusters(case: Case) -> tuple[tuple[int, int, int], int]:
    """focal loss's policyFunc: every core of every cluster, Union1."""
    return (CORES_PER_CLUSTER, CLUSTERS, 1), UNION1


def _f32(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float32)


def ref_abs(case: Case, xs: list[np.ndarray]) -> list[np.ndarray]:
    # zoo/abs/abs.cpp cpuCompute: hypotf(re, im) for complex input, else x >= 0 ? x : -x
    x = _f32(xs[0])
    if case.inputs[0].dtype == "DTYPE_COMPLEX_FLOAT":
        return [np.hypot(x[0::2], x[1::2]).astype(np.float32)]
    return [np.where(x >= 0, x, -x)]


LOG_BASE = {"MLUOP_LOG_E": math.e, "MLUOP_LOG_2": 2.0, "MLUOP_LOG_10": 10.0}


def ref_log(case: Case, xs: list[np.ndarray]) -> list[np.ndarray]:
    # zoo/log/log.cpp cpuCompute: log(x) / log(base) per element, in float
    base = LOG_BASE[first(first(case.proto, "log_param", {}), "log_base", "MLUOP_LOG_E")]
    x = _f32(xs[0]).astype(np.float64)
    return [(np.log(x) / math.log(base)).astype(np.float32)]


def log_coef(case: Case) -> list[float]:
    """log.cpp getBaseFactor: the kernel computes log2(x) * coef."""
    base = first(first(case.proto, "log_param", {}), "log_base", "MLUOP_LOG_E")
    return [{"MLUOP_LOG_E": math.log(2), "MLUOP_LOG_2": 1.0, "MLUOP_LOG_10": math.log10(2)}[base], 1.0]


def ref_sqrt(case: Case, xs: list[np.ndarray]) -> list[np.ndarray]:
    return [np.sqrt(_f32(xs[0]))]  # zoo/sqrt/sqrt.cpp cpuCompute: sqrt(x)


def ref_div(case: Case, xs: list[np.ndarray]) -> list[np.ndarray]:
    return [_f32(xs[0]) / _f32(xs[1])]  # zoo/div/div.cpp cpuCompute: x / y


def focal_params(case: Case) -> list[float]:
    p = first(case.proto, "focal_loss_sigmoid_forward_param", {})
    n = case.inputs[1].count
    return [float(first(p, "prefer", 0)), float(n), float(case.inputs[0].count // n), float(first(p, "alpha", 0.25)),
            float(first(p, "gamma", 2.0))]


def ref_focal(case: Case, xs: list[np.ndarray]) -> list[np.ndarray]:
    # zoo/focal_loss_sigmoid_forward cpuCompute without weight (focalLossSigmoidForwardCpuFast; the high-precision
    # variant is the same formula in double)
    _, n, c, alpha, gamma = focal_params(case)
    x = _f32(xs[0]).astype(np.float64).reshape(int(n), int(c))
    t = xs[1].astype(np.int64).reshape(int(n), 1)
    p = 1.0 / (1.0 + np.exp(-x))
    tiny = np.finfo(np.float32).tiny
    pos = -alpha * np.power(1.0 - p, gamma) * np.log(np.maximum(p, tiny))
    neg = -(1.0 - alpha) * np.power(p, gamma) * np.log(np.maximum(1.0 - p, tiny))
    out = np.where(np.arange(int(c))[None, :] == t, pos, neg)
    return [out.astype(np.float32).reshape(-1)]


OPERATORS = {
    "abs": Operator("abs", "kernels/abs/abs_block.mlu", "kernels/abs/abs.h",
                    "Kernel3StagePipelineAbs(dim, ktype, q, dt, in[0], out[0], n)", unary_block, lambda c: [],
                    ref_abs, "__bang_abs; complex: __bang_write_value, __bang_filter_bitindex, __cn_vector_hypot_f32"),
    "sqrt": Operator("sqrt", "kernels/sqrt/sqrt_union1.mlu", "kernels/sqrt/sqrt.h",
                     "Kernel3StagePipelineSqrt(dim, ktype, q, dt, MLUOP_COMPUTATION_HIGH_PRECISION, in[0], out[0], n)",
                     unary_block, lambda c: [], ref_sqrt, "__bang_sqrt (float), __bang_half2float"),
    "log": Operator("log", "kernels/log/log_union1.mlu", "kernels/log/log.h",
                    "Kernel3StagePipelineLog(dim, ktype, q, dt, MLUOP_COMPUTATION_HIGH_PRECISION, in[0], out[0], n, "
                    "(float)P[0])", unary_union1, log_coef, ref_log,
                    "__bang_log2, __bang_mul_scalar, __bang_half2float, float->half"),
    "div": Operator("div", "kernels/div/div_union1.mlu", "kernels/div/div.h",
                    "Kernel5StagePipelineDiv(dim, ktype, q, dt, MLUOP_COMPUTATION_HIGH_PRECISION, in[0], in[1], out[0], "
                    "n)", binary_union1, lambda c: [], ref_div, "__bang_div, SRAM 5-stage pipeline", "mtp_592"),
    "focal_loss_sigmoid_forward": Operator(
        "focal_loss_sigmoid_forward", "kernels/focal_loss_sigmoid/focal_loss_sigmoid_forward_union1.mlu",
        "kernels/focal_loss_sigmoid/focal_loss_sigmoid.h",
        "(dt == MLUOP_DTYPE_HALF ? mluOpBlockKernelFocalLossSigmoidForwardHalf : "
        "mluOpBlockKernelFocalLossSigmoidForwardFloat)(dim, ktype, q, (focalLossSigmoidPreference_t)(int)P[0], in[0], "
        "in[1], nullptr, (int32_t)P[1], (int32_t)P[2], (float)P[3], (float)P[4], out[0])",
        all_clusters, focal_params, ref_focal, "sigmoid from __bang_pow2/__bang_recip, __bang_log2, __bang_lut, __bang_maxequal, __bang_band, "
        "__memcpy_async ping-pong"),
}

# The host program: our own code; mlu-ops provides only the launcher's declaration (header) and types.
MAIN = r"""
#include "%(header)s"
#include "core/logging.h"
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

// mlu-ops' logging (core/cnlog.cpp is not built): the launchers print through LOG(ERROR) on a failed launch
namespace mluop { namespace logging {
LogMessage::LogMessage(std::string file, int line, int, int, std::string, bool, bool, bool, bool)
    : logInfoFile_(file), logInfoLine_(line) {}
std::stringstream &LogMessage::stream() { return contex_str_; }
LogMessage::~LogMessage() {
  fprintf(stderr, "mlu-ops log %%s:%%d: %%s\n", logInfoFile_.c_str(), logInfoLine_, contex_str_.str().c_str());
}
}}  // namespace mluop::logging

static std::vector<char> slurp(const std::string &path) {
  FILE *f = fopen(path.c_str(), "rb");
  if (!f) { perror(path.c_str()); exit(2); }
  fseek(f, 0, SEEK_END); long size = ftell(f); fseek(f, 0, SEEK_SET);
  std::vector<char> b(size);
  if (size && fread(b.data(), 1, size, f) != (size_t)size) exit(2);
  fclose(f);
  return b;
}

// argv: folder n dtype dimx dimy dimz ktype n_in n_out out_bytes... params...
int main(int argc, char **argv) {
  std::string dir = argv[1];
  size_t n = strtoull(argv[2], nullptr, 10);
  mluOpDataType_t dt = (mluOpDataType_t)atoi(argv[3]);
  cnrtDim3_t dim = {(unsigned)atoi(argv[4]), (unsigned)atoi(argv[5]), (unsigned)atoi(argv[6])};
  cnrtFunctionType_t ktype = atoi(argv[7]) == 0 ? cnrtFuncTypeBlock : cnrtFuncTypeUnion1;
  int n_in = atoi(argv[8]), n_out = atoi(argv[9]), a = 10;
  std::vector<void *> in(n_in), out(n_out);
  std::vector<size_t> out_bytes(n_out);
  for (int i = 0; i < n_in; i++) {
    std::vector<char> b = slurp(dir + "/in" + std::to_string(i) + ".bin");
    cnrtMalloc(&in[i], b.size() ? b.size() : 1);
    cnrtMemcpy(in[i], b.data(), b.size(), cnrtMemcpyHostToDev);
  }
  for (int i = 0; i < n_out; i++) {
    out_bytes[i] = strtoull(argv[a++], nullptr, 10);
    cnrtMalloc(&out[i], out_bytes[i] ? out_bytes[i] : 1);
  }
  std::vector<double> P;
  while (a < argc) P.push_back(atof(argv[a++]));
  cnrtQueue_t q;
  cnrtQueueCreate(&q);
  mluOpStatus_t st = %(call)s;
  cnrtRet_t sync = cnrtQueueSync(q);
  if (st != MLUOP_STATUS_SUCCESS || sync != cnrtSuccess) {
    fprintf(stderr, "launcher status %%d, queue %%d\n", (int)st, (int)sync);
    return 3;
  }
  for (int i = 0; i < n_out; i++) {
    std::vector<char> b(out_bytes[i]);
    cnrtMemcpy(b.data(), out[i], b.size(), cnrtMemcpyDevToHost);
    FILE *f = fopen((dir + "/out" + std::to_string(i) + ".bin").c_str(), "wb");
    fwrite(b.data(), 1, b.size(), f);
    fclose(f);
  }
  return 0;
}
"""


# ------------------------------------------------------------------------------------------ running
@dataclass
class CaseResult:
    case: str
    status: str  # passed | failed | error | skipped
    diffs: dict[str, float] = field(default_factory=dict)
    thresholds: dict[str, float] = field(default_factory=dict)
    shape: str = ""
    dtype: str = ""
    detail: str = ""


@dataclass
class OperatorResult:
    operator: str
    kernel: str
    uses: str
    built: bool
    build_seconds: float
    build_error: str = ""
    cases: list[CaseResult] = field(default_factory=list)


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO_ROOT / "sandbox") + (":" + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def build(op: Operator, src: Path, work: Path) -> tuple[Path | None, str, float]:
    main = work / f"main_{op.name}.cpp"
    main.write_text(MAIN % {"header": op.header, "call": op.call})
    exe = work / f"{op.name}.exe"
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "bang_emu.driver", f"--bang-mlu-arch={op.arch}", "-O2", f"-I{src}",
                           str(src / op.mlu), str(main), "-o", str(exe)], capture_output=True, text=True,
                          env=_env(), timeout=1800)
    took = time.monotonic() - start
    if proc.returncode != 0:
        errors = [ln for ln in proc.stderr.splitlines() if "error" in ln]
        return None, "\n".join(errors[:5]) or proc.stderr[-2000:], took
    return exe, "", took


def make_inputs(case: Case) -> list[np.ndarray]:
    arrays = []
    for spec, t in zip(case.proto.get("input", []), case.inputs, strict=True):
        rd = first(spec, "random_data", {})
        rng = np.random.default_rng(int(first(rd, "seed", 0)))
        lo, hi = float(first(rd, "lower_bound", -1.0)), float(first(rd, "upper_bound", 1.0))
        count = t.count * (2 if "COMPLEX" in t.dtype else 1)
        values = rng.uniform(lo, hi, count)
        storage = DTYPES[t.dtype][0]
        arrays.append(np.floor(values).astype(storage) if np.issubdtype(storage, np.integer) else
                      values.astype(storage))
    return arrays


def diffs(base: np.ndarray, mlu: np.ndarray) -> dict[str, float]:
    """DIFF1 and DIFF2 of mlu-ops' evaluator.h (sums in double)."""
    b, m = base.astype(np.float64), mlu.astype(np.float64)
    return {"DIFF1": float(np.abs(m - b).sum() / (np.abs(b).sum() + EPSILON)),
            "DIFF2": float(math.sqrt(((m - b) ** 2).sum() / ((b ** 2).sum() + EPSILON)))}


def mluop_dtype_value(src: Path, name: str) -> int:
    """The enum value of mluOpDataType_t `name` from the mirror's mlu_op.h."""
    text = (src / "mlu_op.h").read_text(errors="replace")
    m = re.search(r"\b" + name + r"\s*=\s*(\d+)", text)
    if not m:
        raise KeyError(name)
    return int(m.group(1))


def run_case(op: Operator, exe: Path, src: Path, case: Case, work: Path, timeout: float) -> CaseResult:
    t0 = case.inputs[0]
    res = CaseResult(case.name, "skipped", thresholds=case.formulas, shape="x".join(map(str, t0.shape)),
                     dtype=t0.dtype)
    if any(t.strided for t in case.inputs + case.outputs):
        res.detail = "strided tensor descriptor: needs mlu-ops' host library (mluop::TensorShape), not driven"
        return res
    if t0.dtype not in DTYPES or any(t.dtype not in DTYPES for t in case.inputs + case.outputs):
        res.detail = "dtype not handled by this driver"
        return res
    folder = work / f"{op.name}-{case.name}"
    folder.mkdir(parents=True, exist_ok=True)
    inputs = make_inputs(case)
    for i, a in enumerate(inputs):
        (folder / f"in{i}.bin").write_bytes(a.tobytes())
    dim, ktype = op.policy(case)
    dt = mluop_dtype_value(src, DTYPES[t0.dtype][1])
    out_bytes = [_bytes(t) for t in case.outputs]
    argv = [str(exe), str(folder), str(t0.count), str(dt), *map(str, dim), str(ktype), str(len(inputs)),
            str(len(out_bytes)), *map(str, out_bytes), *map(repr, op.params(case))]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env={**os.environ,
                              "BANG_EMU_THREADS": "2"})
    except subprocess.TimeoutExpired:
        res.status, res.detail = "error", f"timeout after {timeout:.0f} s"
        return res
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines()
        errors = [ln for ln in lines if "error" in ln] or lines or [f"exit {proc.returncode}"]
        res.status, res.detail = "error", errors[0][:300]
        return res
    refs = op.reference(case, inputs)
    passed = True
    for t, ref, i in zip(case.outputs, refs, range(len(refs)), strict=True):
        got = np.frombuffer((folder / f"out{i}.bin").read_bytes(), dtype=DTYPES[t.dtype][0])
        d = diffs(ref.astype(np.float32).astype(DTYPES[t.dtype][0]).astype(np.float64)
                  if t.dtype == "DTYPE_HALF" else ref, got)
        res.diffs.update(d)
        passed = passed and bool(np.isfinite(got).all()) and all(d[f] <= thr for f, thr in case.formulas.items()
                                                                 if f in d)
    res.status = "passed" if passed else "failed"
    return res


def run(mirror: Path, names: list[str], timeout: float = 600.0, keep: Path | None = None) -> list[OperatorResult]:
    results = []
    with tempfile.TemporaryDirectory(prefix="mluops-conf-") as td:
        if keep:
            td = str(keep)
        src, work = Path(td) / "src", Path(td) / "work"
        for folder in ("", "core", "kernels", *(f"{ZOO}/{n}/test_case" for n in names)):
            export_folder(mirror, folder, src)  # "": the root's own files (mlu_op.h)
        work.mkdir(exist_ok=True)
        for name in names:
            op = OPERATORS[name]
            exe, err, took = build(op, src, work)
            r = OperatorResult(name, op.mlu, op.uses, exe is not None, round(took, 1), err)
            if exe:
                for path in sorted((src / ZOO / name / "test_case").glob("*.prototxt")):
                    r.cases.append(run_case(op, exe, src, Case.load(path), work, timeout))
            results.append(r)
    return results


def _fmt(v: float | None) -> str:
    return f"{v:10.3e}" if v is not None else f"{'-':>10}"


def report(results: list[OperatorResult]) -> str:
    lines = [f"{'operator':<28} {'case':<28} {'dtype':<20} {'status':<8} {'DIFF1':>10} {'DIFF2':>10}  thresholds"]
    for r in results:
        if not r.built:
            lines.append(f"{r.operator:<28} {'(build)':<28} {'':<20} {'error':<8}  {r.build_error[:200]}")
            continue
        for c in r.cases:
            d1, d2 = c.diffs.get("DIFF1"), c.diffs.get("DIFF2")
            thr = ", ".join(f"{k} {v:g}" for k, v in c.thresholds.items())
            lines.append(f"{r.operator:<28} {c.case:<28} {c.dtype:<20} {c.status:<8} {_fmt(d1)} {_fmt(d2)}  {thr}"
                         + (f"  ({c.detail})" if c.detail else ""))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mirror", type=Path, default=DEFAULT_MIRROR, help="bare git mirror of Cambricon/mlu-ops")
    ap.add_argument("--ops", nargs="*", default=list(OPERATORS), choices=list(OPERATORS))
    ap.add_argument("--json", type=Path)
    ap.add_argument("--keep", type=Path, help="work here and keep the exports, programs and data")
    args = ap.parse_args(argv)
    if not (args.mirror / "HEAD").exists():
        print(f"no mirror of Cambricon/mlu-ops at {args.mirror} (fetch github:Cambricon/mlu-ops)", file=sys.stderr)
        return 2
    results = run(args.mirror, args.ops, keep=args.keep)
    print(report(results))
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=1))
    failed = sum(c.status in ("failed", "error") for r in results for c in r.cases) + sum(not r.built for r in results)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
