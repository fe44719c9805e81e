"""Helpers for the harness tests: submissions written into tmp dirs, harness phases run through ProcessRunner."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import factories
import numpy as np
from bang_harness.toolchains import StepOutcome, Toolchain

from grader.sandbox.base import Limits, Mounts, Phase, RunOutcome
from grader.sandbox.process import ProcessRunner

# A binding that needs no BANG code: it lets the run phase be tested whatever state the emulator is in.
HOST_BINDING = """
#include <torch/extension.h>
torch::Tensor host_sigmoid(torch::Tensor x) { return torch::sigmoid(x.cpu()); }
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("host_sigmoid", &host_sigmoid); }
// The TORCH_LIBRARY style as well: reachable only through torch.ops once the harness loads the library.
TORCH_LIBRARY(host_ops, m) { m.def("sigmoid(Tensor x) -> Tensor", &host_sigmoid); }
"""

HOST_OPS = """
import os, time
import torch
import my_ops_ext

def sigmoid(x):
    return my_ops_ext.host_sigmoid(x)

def sigmoid_op(x):
    return torch.ops.host_ops.sigmoid(x)

def raises(x):
    raise ValueError("student bug in raises()")

def aborts(x):
    os.abort()

def hangs(x):
    time.sleep(3600)

def unwritten(x):
    return torch.empty_like(x)

def mutates(x):
    kept = x.cpu().clone()
    x.copy_(torch.zeros(x.shape, dtype=x.dtype))  # a fresh input per call must hide this from the next one
    return kept

def not_a_tensor(x):
    return [1, 2, 3]

invocations = 0

def counts(x):
    global invocations
    invocations += 1
    return torch.full(tuple(x.shape), float(invocations))
"""


def write_tree(root: Path, files: dict[str, str]) -> Path:
    """factories.write_tree of the texts dedented (they are written indented in the tests)."""
    return factories.write_tree(root, {name: textwrap.dedent(text) for name, text in files.items()})


class HostOnlyToolchain(Toolchain):
    """The shared build steps with no BANG toolchain at all: for bindings made of torch code only."""

    name = "host"

    def compile_mlu(self, source: Path, obj: Path, include_dirs: list[Path]) -> StepOutcome:
        return StepOutcome(["none"], 1, "this test toolchain compiles no .mlu files")

    def cpp_include_dirs(self) -> list[Path]:
        return []

    def link_args(self) -> list[str]:
        return []

    def describe(self) -> str:
        return "host g++ only (tests)"


class Workspace:
    """The three host folders a runner maps to /submission, /build and /io."""

    def __init__(self, root: Path, submission: Path) -> None:
        self.submission = submission
        self.build = root / "build"
        self.io = root / "io"
        for folder in (self.build, self.io / "inputs"):
            folder.mkdir(parents=True, exist_ok=True)

    @property
    def mounts(self) -> Mounts:
        return Mounts(self.submission, self.build, self.io)

    @property
    def outputs(self) -> Path:
        return self.io / "outputs"

    def build_json(self) -> dict:
        return json.loads((self.build / "build.json").read_text())

    def add_input(self, name: str, array: np.ndarray) -> None:
        np.save(self.io / "inputs" / name, array)

    def write_job(self, calls: list[dict], backend: str = "emu", **extra: object) -> None:
        job = {"backend": backend, "device": "mlu370-x8", "module": "ops", "extension": "my_ops_ext",
               "calls": calls, **extra}
        (self.io / "job.json").write_text(json.dumps(job))

    def result(self, call_id: str) -> dict:
        return json.loads((self.outputs / f"{call_id}.json").read_text())

    def output(self, call_id: str) -> np.ndarray:
        return np.load(self.outputs / f"{call_id}.npy", allow_pickle=False)

    def harness(self, *args: str, phase: Phase = Phase.RUN, wall_seconds: float = 300.0) -> RunOutcome:
        return ProcessRunner().run(phase, ["python3", "-m", "bang_harness", *args], self.mounts,
                                   Limits(wall_seconds=wall_seconds, cpus=2))
