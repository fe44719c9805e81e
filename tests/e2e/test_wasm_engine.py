"""The replay on the WebAssembly engine, opt-in (BANG_EMU_REPLAY_ENGINE=wasm; DESIGN.md "Confinement by
construction"), through a real grading in the docker sandbox: the build sandbox makes the kernels' wasm module, the
replay sandbox makes its engine and replays every journal on it, and the grade -- score, each stage's verdict and
modelled time -- is the native replay's. Skipped visibly without the emulation image (the wasm toolchain is in it)."""

from __future__ import annotations

import pytest

from grader.orchestration import GradeEnvironment, GradeRequest, grade_submission
from grader.results import Verdict
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


def test_lab_programs_graded_on_the_wasm_engine_grade_as_the_native_replay(tmp_path, monkeypatch):
    """The lab programs' path (grader/orchestration/programs.py) in real containers: each program's kernels built
    for wasm too (the one whose host code wasi cannot take says so and stays native), each journal replayed on
    the engine with its twin inputs and captures, and the grade -- score, each stage's verdict, points and
    modelled time -- is the native replay's: an honest scalar program, the host-answer fixture caught by the
    twin, a four-task program, and the one replayed natively."""
    if e2e_sandbox() != "docker":
        pytest.skip("the emulation image is not built (the wasm toolchain is in it): `grade setup --tests`")
    from grader.orchestration.programs import grade_programs
    from tests.programs.test_programs_wasm import NO_WASM, PROGRAMS

    lab = tmp_path / "lab"  # not tmp_path itself: pytest makes it 0700, unreadable by the sandbox's user
    lab.mkdir(mode=0o755)
    for stem, text in PROGRAMS.items():
        (lab / f"{stem}.mlu").write_text(text)
    request, docker = GradeRequest(assignment="matmul_programs"), GradeEnvironment(sandbox="docker")
    native = grade_programs(lab, request, docker)
    monkeypatch.setenv("BANG_EMU_REPLAY_ENGINE", "wasm")
    wasm = grade_programs(lab, request, docker)
    log = wasm.build.compiler_output
    assert log.count(WASM_NOTE) == len(PROGRAMS) - 1 and WASM_NOTE not in native.build.compiler_output, log[-3000:]
    assert f"== {NO_WASM}.mlu" in log and "the kernels are replayed natively: they do not build" in log
    assert (wasm.score, wasm.verdict) == (native.score, native.verdict) and wasm.score > 0
    assert wasm.integrity == native.integrity
    for n, w in zip(native.stages, wasm.stages, strict=True):
        assert (w.name, w.verdict, w.points) == (n.name, n.verdict, n.points), (n.message, w.message)
        assert n.timing is not None and w.timing is not None, n.name
        assert w.timing.median_us == pytest.approx(n.timing.median_us, rel=0.01), n.name
    vector = next(c for c in wasm.cases if c.group == "vector")
    assert vector.verdict == Verdict.WRONG_ANSWER and "left @ right" in vector.message  # caught on the twin
