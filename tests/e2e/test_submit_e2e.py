"""End to end: the README's demo grades the bundled example clean, calibration reproduces its modelled times,
and every known-bad fixture gets its expected verdict and message."""

from __future__ import annotations

import tomllib

import pytest

from grader.drivers.calibrate import calibrate
from grader.orchestration import GradeEnvironment
from grader.results import GradeResult, Verdict
from grader.scoring import load_thresholds
from grader.spec import load_assignment
from tests.e2e.conftest import BUILD_CACHE, KNOWN_BAD, ROOT, e2e_sandbox, graded, submitted_example

pytestmark = pytest.mark.slow


def all_text(result: GradeResult) -> str:
    parts = [result.message]
    parts += [c.message for c in result.cases] + [s.message for s in result.stages]
    parts += [d.message for c in result.cases for d in c.diagnostics]
    if result.build is not None:
        parts.append(result.build.compiler_output)
    return "\n".join(parts)


def test_the_demo_command_grades_the_example_correct_everywhere():
    code, result, stderr, out = submitted_example()
    spec = load_assignment("matmul")
    assert result.build is not None and result.build.ok, all_text(result)[-3000:]
    failing = [(c.name, c.entry, c.verdict.value, c.message[:200]) for c in result.cases if not c.passed]
    assert not failing
    assert [s.name for s in result.stages] == [s.name for s in spec.stages]
    for stage in result.stages:
        assert stage.correct and all(r.passed for r in stage.requirements), (stage.name, stage.requirements)
        assert stage.timing is not None and stage.timing.source == "modelled"
        assert (stage.timing.repeats, stage.timing.spread) == (1, 0.0)  # modelled time is deterministic
        assert stage.trace is not None and stage.trace.launches >= 1
        assert stage.timing.floor_us is not None and not stage.timing.below_floor
    assert sum(g.points for g in result.groups) == sum(g.points_possible for g in result.groups)
    times = {s.name: s.timing.median_us for s in result.stages}
    assert times["scalar_gdram"] > times["scalar_nram"] > times["vector"]
    # The CLI: score printed, results.json and report written, exit 0 exactly when everything passed.
    assert f"score: {result.score:g} / {spec.max_score:g}" in stderr
    assert (out / "results.json").is_file()
    assert code == (0 if result.verdict == Verdict.PASSED else 1)
    if all(s.threshold_us is not None for s in result.stages):
        assert result.verdict == Verdict.PASSED and result.score == result.max_score and code == 0


def test_calibration_from_the_example_reproduces_its_modelled_times(tmp_path):
    _, example, _, _ = submitted_example()
    spec = load_assignment("matmul")
    done = calibrate("matmul", GradeEnvironment(sandbox=e2e_sandbox(),  # type: ignore[arg-type]
                                                build_cache=BUILD_CACHE),
                     reference=ROOT / "reference_kernels" / "example", thresholds_root=tmp_path, log=lambda _: None)
    table = load_thresholds(spec, "emu", "mlu370-x8", root=tmp_path)
    assert table is not None and set(table.stages) == {s.name for s in spec.stages}
    for stage in example.stages:
        t = table.stages[stage.name]
        # The cost model is deterministic up to the interleaving of emulated cores (~0.1% measured).
        assert t.reference_us == pytest.approx(stage.timing.median_us, rel=0.05)
        assert t.reference_us <= t.threshold_us <= t.reference_us * spec.stage(stage.name).slack + 1e-9
    assert done.path == tmp_path / "matmul" / "thresholds" / "emu-mlu370-x8.toml"


def _fixtures() -> list[str]:
    return sorted(p.parent.name for p in KNOWN_BAD.glob("*/expected.toml"))


@pytest.mark.parametrize("name", _fixtures())
def test_known_bad_fixture_gets_its_verdict(name):
    expected = tomllib.loads((KNOWN_BAD / name / "expected.toml").read_text())
    stage = expected.get("derived_from", "/").split("/")[-1] or None
    result = graded(f"reference_kernels/known_bad/{name}", expected["assignment"], (stage,) if stage else None)
    text = all_text(result)
    assert result.verdict.value == expected["verdict"], text[:3000]
    for fragment in expected.get("message_contains", []):
        assert fragment in text, (fragment, text[:3000])
    assert result.score < result.max_score


def test_a_failing_fp16_case_costs_the_half_group_but_not_the_stage_speed_points():
    # matmul's "half" group has gates_stages = false: the fp16-only defect of half_running_sum loses the
    # group's points, while the stage (fp32 correct everywhere) still earns its speed points.
    result = graded("reference_kernels/known_bad/half_running_sum", "matmul", ("scalar_gdram",))
    failing = {c.name for c in result.cases if not c.passed}
    assert failing == {"half_long_k_65x2048x67"}, failing
    half = next(g for g in result.groups if g.name == "half")
    assert half.points < half.points_possible
    assert all(g.points == g.points_possible for g in result.groups if g.name != "half" and g.total_cases)
    (stage,) = result.stages
    assert stage.correct and stage.verdict == Verdict.PASSED and stage.points == stage.points_possible, stage.message
    assert result.verdict == Verdict.WRONG_ANSWER
