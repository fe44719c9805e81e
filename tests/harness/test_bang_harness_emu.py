"""Build and run a real BANG C submission on the emulator: cncc-emu objects, emulated device, trace, checks."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest
import torch
from bang_harness.protocol import KEY_FILE, call_key, verify_line
from harness_workspace import Workspace, write_tree

from grader.sandbox.base import Phase

pytest.importorskip("bang_emu.toolchain", reason="the emulator toolchain (bang_emu.toolchain) is not installed")
pytestmark = pytest.mark.slow

KERNEL_HEADER = """
#ifndef SIG_H_
#define SIG_H_
#include <cnrt.h>
void sig_entry(cnrtQueue_t queue, const float* x, float* y, int n, int overrun);
#endif
"""

# NRAM tiles and the vector builtin; `overrun` stores that many elements past the end of each tile.
KERNEL = """
#include <bang.h>
#include "sig.h"
#define TILE 4096

__mlu_global__ void sig_kernel(const float* x, float* y, int n, int overrun) {
  __nram__ float tile[TILE];
  for (int off = 0; off < n; off += TILE) {
    int m = n - off < TILE ? n - off : TILE;
    __memcpy(tile, x + off, m * sizeof(float), GDRAM2NRAM);
    __bang_active_sigmoid(tile, tile, (m + 63) / 64 * 64);
    __memcpy(y + off, tile, (m + overrun) * sizeof(float), NRAM2GDRAM);
  }
}

void sig_entry(cnrtQueue_t queue, const float* x, float* y, int n, int overrun) {
  cnrtDim3_t dim = {1, 1, 1};
  sig_kernel<<<dim, cnrtFuncTypeBlock, queue>>>(x, y, n, overrun);
}
"""

BINDING = """
#include <torch/extension.h>
#include "aten/operators/bang/bang_kernel.h"
#include "sig.h"

using namespace torch_mlu;

static torch::Tensor launch(torch::Tensor x, int overrun) {
  auto input = torch_mlu::cnnl_contiguous(x);
  auto output = at::empty_like(input);
  cnrtQueue_t queue = getCurMLUStream();
  sig_entry(queue, (const float*)getMluTensorImpl(input)->mlu_data_ptr(),
            (float*)getMluTensorImpl(output)->mlu_data_ptr(), (int)input.numel(), overrun);
  TORCH_BANGC_KERNEL_LAUNCH_CHECK();
  return output;
}

torch::Tensor sigmoid(torch::Tensor x) { return launch(x, 0); }
torch::Tensor sigmoid_overrun(torch::Tensor x) { return launch(x, 64); }

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("sigmoid", &sigmoid);
  m.def("sigmoid_overrun", &sigmoid_overrun);
}
"""

OPS = """
import sig_ext

def sigmoid(x):
    return sig_ext.sigmoid(x)

def sigmoid_overrun(x):
    return sig_ext.sigmoid_overrun(x)

def host_only(x):
    return x.cpu().sigmoid()
"""

SUBMISSION = {"mlu/sig.h": KERNEL_HEADER, "mlu/sig.mlu": KERNEL, "cpp/binding.cpp": BINDING, "ops.py": OPS,
              "grade.toml": 'extension = "sig_ext"\n'}


@pytest.fixture(scope="module")
def emu_build(tmp_path_factory: pytest.TempPathFactory) -> Workspace:
    root = tmp_path_factory.mktemp("emu")
    space = Workspace(root, write_tree(root / "submission", SUBMISSION))
    outcome = space.harness("build", "--backend", "emu", phase=Phase.BUILD)
    summary = space.build_json()
    assert outcome.exit_code == 0 and summary["ok"], summary["log_tail"]
    return space


def test_the_emu_build_links_one_library_named_by_grade_toml(emu_build):
    summary = emu_build.build_json()
    assert summary["toolchain"].startswith("cncc-emu")
    assert (emu_build.build / "ext" / "sig_ext.so").is_file()
    assert "sig.mlu" in (emu_build.build / "build.log").read_text()


def test_kernels_run_on_the_emulated_device_with_a_trace_and_modelled_time(emu_build, tmp_path):
    space = Workspace(tmp_path, emu_build.submission)
    space.build = emu_build.build
    aligned = np.linspace(-6, 6, 8192, dtype=np.float32)
    tail = np.linspace(-6, 6, 4096 + 77, dtype=np.float32)
    space.add_input("aligned.npy", aligned)
    space.add_input("tail.npy", tail)
    space.write_job([
        {"id": "aligned", "entry": "sigmoid", "inputs": ["aligned.npy"], "warmup": 1, "timed_repeats": 2},
        {"id": "tail", "entry": "sigmoid", "inputs": ["tail.npy"]},
        {"id": "overrun", "entry": "sigmoid_overrun", "inputs": ["tail.npy"]},
        {"id": "after", "entry": "sigmoid", "inputs": ["tail.npy"]},
        {"id": "host", "entry": "host_only", "inputs": ["tail.npy"]},
    ], extension="sig_ext")
    key = bytes(range(32))
    (space.io / KEY_FILE).write_bytes(key)
    outcome = space.harness("run")
    assert outcome.exit_code == 0, outcome.stderr_tail
    for call_id, x in (("aligned", aligned), ("tail", tail), ("after", tail)):
        result = space.result(call_id)
        assert result["ok"], result["error"]
        np.testing.assert_allclose(space.output(call_id), torch.sigmoid(torch.from_numpy(x)).numpy(), atol=2e-2)
    timed = space.result("aligned")
    assert len(timed["device_us"]) == 2 and all(t > 0 for t in timed["device_us"])
    lines = (space.outputs / timed["trace"]).read_bytes().splitlines()
    payloads = [verify_line(call_key(key, "aligned"), line) for line in lines]
    assert all(p is not None for p in payloads)  # every line signed with this call's key
    records = [json.loads(p) for p in payloads]
    assert [r["seq"] for r in records] == list(range(len(records))) and {r["call"] for r in records} == {"aligned"}
    launches = [r for r in records if r["record"] == "launch"]
    assert len(launches) == 4  # the checked call, one warm-up, two timed repeats
    assert launches[0]["kernel"].startswith("sig_kernel") or "sig_kernel" in launches[0]["kernel"]
    # Sealed once, right after the checked invocation: the whole output, written by the kernel, same digest.
    (output,) = [r for r in records if r["record"] == "output"]
    assert [r["record"] for r in records[:2]] == ["launch", "output"]
    data = space.output("aligned").tobytes()
    assert output["bytes"] == output["kernel_written"] == len(data)
    assert output["sha256"] == hashlib.sha256(data).hexdigest()

    host = space.result("host")  # computed by torch on the host: no launch, and nothing kernels wrote
    host_records = [json.loads(verify_line(call_key(key, "host"), line))
                    for line in (space.outputs / "host.trace.jsonl").read_bytes().splitlines()]
    assert host["ok"] and not [r for r in host_records if r["record"] == "launch"]
    assert all(r["kernel_written"] == 0 for r in host_records if r["record"] == "output")

    overrun = space.result("overrun")
    assert not overrun["ok"] and overrun["error_kind"] == "emulator_error", overrun


def test_the_builds_steps_run_side_by_side_and_are_logged_in_their_order(emu_build):
    """The kernels' WebAssembly build runs beside the compiles and the two links beside each other (issue 41):
    the log still says each step once, in the order the build means them."""
    log = (emu_build.build / "build.log").read_text()
    marks = ["--emu-device-module-also=", "link-device-module", "note: built the kernels for the WebAssembly replay",
             "g++ -shared", "built sig_ext.so"]
    at = [log.find(mark) for mark in marks]
    assert -1 not in at and at == sorted(at) and all(log.count(mark) == 1 for mark in marks), log
    assert (emu_build.build / "device" / "module.wasm").is_file()


def test_a_binding_that_does_not_compile_fails_the_build_without_the_webassembly_note(tmp_path):
    """A failed compile ends the build with its error; the WebAssembly build begun beside it is not said."""
    broken = {**SUBMISSION, "cpp/binding.cpp": BINDING.replace("return launch(x, 0);", "return launch(x, 0)")}
    space = Workspace(tmp_path, write_tree(tmp_path / "submission", broken))
    outcome = space.harness("build", "--backend", "emu", phase=Phase.BUILD)
    summary = space.build_json()
    log = (space.build / "build.log").read_text()
    assert outcome.exit_code != 0 and not summary["ok"] and summary["error_kind"] == "compile_error", log
    assert "binding.cpp" in log and "error: 1 of 2 source files failed to compile" in log, log
    assert "WebAssembly" not in log and "g++ -shared" not in log, log


def _linker_comment(library) -> str:
    """The .comment section of an ELF file: lld signs it "Linker: ... LLD ..."; bfd leaves no linker's name."""
    import subprocess

    return subprocess.run(["readelf", "-p", ".comment", str(library)], capture_output=True, text=True).stdout


def test_the_extension_is_linked_by_lld_where_the_machine_has_it(emu_build):
    """Issue 41: lld links the extension (the torch libraries' symbol tables made bfd's link 0.45 CPU-s of every
    changed build; lld's is 0.09), and the library it makes is the one the run above loaded and ran."""
    from bang_harness.build import lld_link_flags

    if not lld_link_flags():
        pytest.skip("no ld.lld on this machine (Debian: lld-19): the system linker links the extension")
    log = (emu_build.build / "build.log").read_text()
    (link,) = [line for line in log.splitlines() if line.startswith("$ g++ -shared")]
    assert "-fuse-ld=lld" in link, link
    assert "LLD" in _linker_comment(emu_build.build / "ext" / "sig_ext.so")


def test_a_link_lld_refuses_is_made_by_the_system_linker_whose_outcome_stands(tmp_path):
    """lld is stricter than bfd in corners: a link it refuses is run again by the system linker, so no build fails
    for lld; a link both refuse fails with the system linker's error."""
    import subprocess

    from bang_harness.build import LLD_REFUSED, link_shared, lld_link_flags

    if not lld_link_flags():
        pytest.skip("no ld.lld on this machine (Debian: lld-19): nothing to fall back from")
    (tmp_path / "k.c").write_text("int k(int x) { return x + 1; }\n")
    obj = tmp_path / "k.o"
    subprocess.run(["gcc", "-c", "-fPIC", str(tmp_path / "k.c"), "-o", str(obj)], check=True)
    bfd_only = "-Wl,--no-warn-rwx-segments"  # binutils 2.39's, unknown to lld
    made = link_shared(["g++", "-shared", "-o", str(tmp_path / "k.so"), str(obj), bfd_only])
    assert made.returncode == 0 and made.output.startswith(LLD_REFUSED), made
    assert "-fuse-ld=lld" not in made.command and "LLD" not in _linker_comment(tmp_path / "k.so")
    plain = link_shared(["g++", "-shared", "-o", str(tmp_path / "p.so"), str(obj)])
    assert plain.returncode == 0 and LLD_REFUSED not in plain.output and "-fuse-ld=lld" in plain.command
    refused = link_shared(["g++", "-shared", "-o", str(tmp_path / "m.so"), str(tmp_path / "missing.o")])
    assert refused.returncode != 0 and "missing.o" in refused.output and LLD_REFUSED in refused.output, refused
