"""The replay on the WebAssembly engine, opt-in (BANG_EMU_REPLAY_ENGINE=wasm; DESIGN.md "Confinement by
construction"), through a real grading in the docker sandbox: the build sandbox makes the kernels' wasm module, the
replay sandbox makes its engine and replays every journal on it, and the grade -- score, each stage's verdict and
modelled time -- is the native replay's. Skipped visibly without the emulation image (the wasm toolchain is in it)."""

from __future__ import annotations

import pytest

from grader.orchestration import GradeEnvironment, GradeRequest, grade_submission
from tests.e2e.conftest import BUILD_CACHE, ROOT, e2e_sandbox, graded

WASM_NOTE = "built the kernels for the WebAssembly replay"


@pytest.mark.parametrize("path", ["reference_kernels/sigmoid/vector", "reference_kernels/matmul/scalar_nram"])
def test_a_grading_replayed_on_the_wasm_engine_grades_as_the_native_replay(path, monkeypatch):
    if e2e_sandbox() != "docker":
        pytest.skip("the emulation image is not built (the wasm toolchain is in it): `grade setup --tests`")
    native = graded(path)
    monkeypatch.setenv("BANG_EMU_REPLAY_ENGINE", "wasm")
    wasm = grade_submission(ROOT / path, GradeRequest(), GradeEnvironment(sandbox="docker", build_cache=BUILD_CACHE))
    assert WASM_NOTE in wasm.build.compiler_output, wasm.build.compiler_output[-3000:]
    assert WASM_NOTE not in native.build.compiler_output
    assert (wasm.score, wasm.verdict) == (native.score, native.verdict) and wasm.score > 0
    assert wasm.integrity == native.integrity == []
    for n, w in zip(native.stages, wasm.stages, strict=True):
        assert (w.name, w.verdict) == (n.name, n.verdict)
        if n.timing is not None:
            assert w.timing.median_us == pytest.approx(n.timing.median_us, rel=0.01), n.name
