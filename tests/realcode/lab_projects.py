"""The public exp_5_1 projects that carry their own `setup.py` and `tests/` (issue 29): each is exported unchanged
from its fetched mirror (the answers of answers.py; nothing is copied into this repository), built with its own
setup.py and tested with its own tests through `grade run`, in the emulation image.

`expect` is what the project's own tests must say on the emulator, from reading them and the kernel: a test that
fails here fails for a reason written beside it, never for a gap of the emulator.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.realcode import answers

# What the lab's instructions run: the build (grade run does `setup.py build_ext --inplace` first), then this.
COMMAND = ["python", "-m", "unittest", "discover", "-s", "tests", "-v"]


@dataclass(frozen=True)
class LabProject:
    key: str  # the answer's key in answers.py
    folder: str  # the project folder (setup.py, tests/) inside the repository
    tests: dict[str, str]  # unittest id (module.Class.method) -> "ok" | "FAIL" | "ERROR"
    reading: str  # why the tests say what they say

    @property
    def answer(self) -> answers.Answer:
        return answers.by_key(self.key)


_SIGMOID_TESTS = {
    "test_sigmoid.TestSigmoid.test_forward_with_shapes": "ok",
    "test_sigmoid.TestSigmoid.test_backward_with_shapes": "ok",
}
_BENCHMARK_TESTS = {
    "test_sigmoid_benchmark.TestSigmoidBenchmark.test_forward_with_shapes": "ok",
    "test_sigmoid_benchmark.TestSigmoidBenchmark.test_backward_with_shapes": "ok",
}

_OUT_OF_BOUNDS_TESTS = {
    "test_sigmoid.TestSigmoid.test_forward_with_shapes": "FAIL",
    "test_sigmoid.TestSigmoid.test_backward_with_shapes": "ok",
}

PROJECTS: list[LabProject] = [
    LabProject("cambricon-example", "examples/mlu_extension", {"test_sigmoid.TestSigmoid.test_forward_with_shapes": "ok"},
               "Cambricon's example: correct one-task kernel; its test compares a 3x4 sigmoid with decimal=3."),
    LabProject("kolp323", "custom_pytorch_mlu_op", {**_SIGMOID_TESTS, **_BENCHMARK_TESTS},
               "Correct kernel; the benchmark test times Event(enable_timing=True) pairs with hardware_time."),
    LabProject("henryli2002", "exp_5_1_custom_pytorch_mlu_op", _SIGMOID_TESTS,
               "Correct kernel (2023 headers, cnnlMalloc)."),
    LabProject("geotle77", "Chapter5/exp5_1/exp_5_1_custom_pytorch_mlu_op", _SIGMOID_TESTS,
               "Correct kernel; registers `active_sigmoid`, which its own mlu_functions.py calls."),
    LabProject("yuichi1001", "实验答案/实验七/exp_5_1_custom_pytorch_mlu_op", {**_SIGMOID_TESTS, **_BENCHMARK_TESTS},
               "Correct scalar kernel; the benchmark test calls hardware_time on Events made with the defaults, "
               "which torch_mlu allows (MLUEvent::hardware_time only needs both notifiers placed)."),
    LabProject("yelloworange10", "chapter5/exp_5_1_custom_pytorch_mlu_op", _OUT_OF_BOUNDS_TESTS,
               "nram_limit = 12 with a copy of NRAM_LIMIT_SIZE bytes per 12 elements: on the 3x4 test the first "
               "__memcpy_async reads 327680 B from a 48 B tensor. The emulator stops the kernel there "
               "(gdram-out-of-bounds on stderr; the binding checks no launch error), so the output is never "
               "written and the forward test fails; the backward test passes, as it compares y * (1 - y) with "
               "the gradient of that same y. On a card the read past the tensor goes unnoticed."),
    LabProject("luoxukun-2023", "chapters/code_chap_5_student/code_chap_5_student_2023", _OUT_OF_BOUNDS_TESTS,
               "The same nram_limit = 12 answer as yelloworange10, and the same outcome."),
]


def by_key(key: str) -> LabProject:
    return next(p for p in PROJECTS if p.key == key)


def export(project: LabProject, destination: Path) -> tuple[Path, list[str]]:
    """The project folder written out of its bare mirror, byte for byte; returns the project's folder and the
    files the mirror does not hold (binaries a student committed, e.g. a stale build/*.so: rebuilt anyway)."""
    answer = project.answer
    git = ["git", "--git-dir", str(answer.mirror)]
    listing = subprocess.run([*git, "ls-tree", "-r", "-z", answer.commit or "HEAD", "--", project.folder],
                             capture_output=True, check=True, timeout=60).stdout.decode()
    missing = []
    for entry in filter(None, listing.split("\0")):
        meta, path = entry.split("\t", 1)
        mode, kind, sha = meta.split()
        if kind != "blob":
            continue
        blob = subprocess.run([*git, "cat-file", "blob", sha], capture_output=True, timeout=60)
        if blob.returncode != 0:
            missing.append(path)
            continue
        out = destination / path
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(blob.stdout)
        if mode == "100755":
            out.chmod(0o755)
    return destination / project.folder, missing
