"""The replay on the WebAssembly engine, the default (DESIGN.md "Confinement by construction"), through real
gradings in the docker sandbox: the build sandbox makes the kernels' wasm module, the replay sandbox makes its engine
and replays every journal on it, and the grade -- score, each stage's verdict and modelled time -- is what the native
replay (BANG_EMU_REPLAY_ENGINE=native) gives. And the disagreement policy: a call the engine's account would cost
points while the native replay of the same journal finds nothing is held for review, never `integrity`, never
credited. Skipped visibly without the emulation image (the wasm toolchain is in it)."""

from __future__ import annotations

import shutil

import pytest

from grader.orchestration import GradeEnvironment, GradeRequest, grade_submission
from grader.results import Verdict
from tests.e2e.conftest import BUILD_CACHE, ROOT, e2e_sandbox, graded

WASM_NOTE = "built the kernels for the WebAssembly replay"


def _docker_or_skip() -> None:
    if e2e_sandbox() != "docker":
        pytest.skip("the emulation image is not built (the wasm toolchain is in it): `grade setup --tests`")


def _graded_natively(path, monkeypatch):
    with monkeypatch.context() as m:
        m.setenv("BANG_EMU_REPLAY_ENGINE", "native")
        return grade_submission(path, GradeRequest(), GradeEnvironment(sandbox="docker", build_cache=BUILD_CACHE))


@pytest.mark.parametrize("path", ["reference_kernels/sigmoid/vector", "reference_kernels/matmul/multicore"])
def test_a_grading_replayed_on_the_wasm_engine_grades_as_the_native_replay(path, monkeypatch):
    _docker_or_skip()
    wasm = graded(path)  # the default engine
    native = _graded_natively(ROOT / path, monkeypatch)
    # a build from the session's cache carries no compiler output: its note is said when it was built
    assert wasm.build.cached or WASM_NOTE in wasm.build.compiler_output, wasm.build.compiler_output[-3000:]
    assert native.build.cached or WASM_NOTE not in native.build.compiler_output
    assert (wasm.score, wasm.verdict) == (native.score, native.verdict) and wasm.score > 0
    assert wasm.integrity == native.integrity == []
    assert "replayed natively" not in wasm.message, wasm.message
    for n, w in zip(native.stages, wasm.stages, strict=True):
        assert (w.name, w.verdict) == (n.name, n.verdict)
        if n.timing is not None:
            assert w.timing.median_us == pytest.approx(n.timing.median_us, rel=0.01), n.name


def test_kernels_that_compute_only_natively_are_held_for_review_not_accused_and_not_credited(tmp_path, monkeypatch):
    """The same vector kernel, its sigmoid done only where `long` is 64 bits (natively, not in wasm32): the run and
    the native replay compute it, the engine's replay does not. The engine's account would take the points (the
    output is right, the kernels' replay on fresh inputs wrong), the native replay of the same journal finds
    nothing: each such call is held for review -- the stage earns nothing and nobody is told they cheated. The
    same folder natively passes, so the hold is the engines' difference alone."""
    _docker_or_skip()
    folder = tmp_path / "divergent"
    shutil.copytree(ROOT / "reference_kernels/sigmoid/vector", folder)
    kernel = folder / "mlu" / "sigmoid_vector.mlu"
    source = kernel.read_text()
    call = "    __bang_active_sigmoid(tile, tile, CEIL_ALIGN(n, VECTOR_ALIGN_ELEMS));\n"
    assert call in source
    kernel.write_text(source.replace(call, "    if (sizeof(long) == 8)\n  " + call))
    wasm = grade_submission(folder, GradeRequest(), GradeEnvironment(sandbox="docker", build_cache=BUILD_CACHE))
    assert WASM_NOTE in wasm.build.compiler_output
    held = [c for c in wasm.cases if c.verdict == Verdict.HELD_FOR_REVIEW]
    assert held, [(c.name, c.verdict, c.message[:200]) for c in wasm.cases]
    assert not [c for c in wasm.cases if c.verdict == Verdict.INTEGRITY], wasm.integrity
    assert "held for review" in held[0].message and "natively" in held[0].message
    assert wasm.verdict == Verdict.HELD_FOR_REVIEW and wasm.integrity == []
    # The run's own outputs were right, so its stages were timed beside the replay; the replay's hold takes them
    # away again: no held entry's stage keeps a time (policy.time_beside_the_replay drops that round)
    held_stages = [s for s in wasm.stages if s.entry in {c.entry for c in held}]
    assert held_stages and all(s.timing is None and s.points == 0 for s in held_stages), held_stages
    reference = graded("reference_kernels/sigmoid/vector")
    assert wasm.score < reference.score
    native = _graded_natively(folder, monkeypatch)
    assert (native.score, native.verdict) == (reference.score, reference.verdict)


def test_lab_programs_graded_on_the_wasm_engine_grade_as_the_native_replay(tmp_path, monkeypatch):
    """The lab programs' path (grader/orchestration/programs.py) in real containers: each program's kernels built
    for wasm too (the one whose host code wasi cannot take says so and stays native), each journal replayed on
    the engine with its twin inputs and captures, and the grade -- score, each stage's verdict, points and
    modelled time -- is the native replay's: an honest scalar program, the host-answer fixture caught by the
    twin, a four-task program, and the one replayed natively (named in the grading's message, with why)."""
    if e2e_sandbox() != "docker":
        pytest.skip("the emulation image is not built (the wasm toolchain is in it): `grade setup --tests`")
    from grader.orchestration.programs import grade_programs
    from tests.programs.test_programs_wasm import NO_WASM, PROGRAMS

    lab = tmp_path / "lab"  # not tmp_path itself: pytest makes it 0700, unreadable by the sandbox's user
    lab.mkdir(mode=0o755)
    for stem, text in PROGRAMS.items():
        (lab / f"{stem}.mlu").write_text(text)
    request, docker = GradeRequest(assignment="matmul_programs"), GradeEnvironment(sandbox="docker")
    wasm = grade_programs(lab, request, docker)  # the default engine
    native = grade_programs(lab, request, GradeEnvironment(sandbox="docker", replay_engine="native"))
    log = wasm.build.compiler_output
    assert log.count(WASM_NOTE) == len(PROGRAMS) - 1 and WASM_NOTE not in native.build.compiler_output, log[-3000:]
    assert f"== {NO_WASM}.mlu" in log and "the kernels are replayed natively: they do not build" in log
    # the grading names the one program replayed natively and why, as an extension's kernels are named
    natively = [line for line in wasm.message.splitlines() if "replayed natively" in line]
    assert len(natively) == 1 and natively[0].startswith(
        "your kernels were replayed natively, not in the confined WebAssembly engine: "
        f"{NO_WASM}.mlu: they do not build for the WebAssembly engine"), wasm.message
    assert "your kernels were replayed natively, as this grading was asked to" in native.message, native.message
    assert (wasm.score, wasm.verdict) == (native.score, native.verdict) and wasm.score > 0
    assert wasm.integrity == native.integrity
    for n, w in zip(native.stages, wasm.stages, strict=True):
        assert (w.name, w.verdict, w.points) == (n.name, n.verdict, n.points), (n.message, w.message)
        assert n.timing is not None and w.timing is not None, n.name
        assert w.timing.median_us == pytest.approx(n.timing.median_us, rel=0.01), n.name
    vector = next(c for c in wasm.cases if c.group == "vector")
    assert vector.verdict == Verdict.WRONG_ANSWER and "left @ right" in vector.message  # caught on the twin
