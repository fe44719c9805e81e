"""Assignment specs: the shipped ones load, bad ones are rejected with messages that say what is wrong."""

from __future__ import annotations

import tomllib
from pathlib import Path

import numpy as np
import pytest

from grader.spec import SeedPlan, SpecError, correctness_cases, load_assignment, parse_spec, perf_case
from grader.spec.loader import ASSIGNMENTS_ROOT

MATMUL_TOML = (ASSIGNMENTS_ROOT / "matmul" / "assignment.toml").read_text()


def test_shipped_specs_load_with_the_stage_names_the_project_uses():
    matmul = load_assignment("matmul")
    sigmoid = load_assignment("sigmoid")
    assert [s.name for s in matmul.stages] == ["scalar_gdram", "scalar_nram", "vector", "multicore", "pipeline",
                                               "sram_union"]
    assert [s.name for s in sigmoid.stages] == ["vector", "multicore", "pipeline"]
    assert matmul.max_score == sigmoid.max_score == 100


def test_matmul_cases_cover_one_alignment_tails_primes_and_long_reductions():
    spec = load_assignment("matmul")
    dims = [c.dims for c in spec.cases]
    assert {"M": 1, "K": 1, "N": 1} in dims
    assert any(d["M"] % 64 == 1 or d["M"] % 64 == 63 for d in dims)
    assert any(all(v in (97, 89, 101) for v in d.values()) for d in dims)
    assert max(d["K"] for d in dims) >= 1024


def test_matmul_fp16_group_is_run_on_every_stage_but_gates_none():
    spec = load_assignment("matmul")
    half = [c for c in spec.cases if c.group == "half"]
    assert half and all(c.dtypes == ["float16"] for c in half)
    assert max(c.dims["K"] for c in half) > 1024  # K tiled in fp16: the fp32 sums must survive the tiles
    for stage in spec.stages:
        assert "half" in stage.groups and "half" not in spec.gating_groups(stage)
        assert spec.gating_groups(stage) == set(stage.groups) - {"half"}


def test_groups_gate_the_stages_by_default():
    # sigmoid's fp16 group is an extension like matmul's (issue 12): every other group gates its stages
    spec = load_assignment("sigmoid")
    assert {g.name for g in spec.groups if not g.gates_stages} == {"half"}
    for stage in spec.stages:
        assert "half" in stage.groups
        assert spec.gating_groups(stage) == set(stage.groups) - {"half"}


def test_scalar_stages_skip_the_large_group():
    spec = load_assignment("matmul")
    for name in ("scalar_gdram", "scalar_nram"):
        assert "large" not in spec.stage(name).groups


def test_sigmoid_inputs_are_signed_and_reach_saturation():
    spec = load_assignment("sigmoid")
    case = next(c for c in correctness_cases(spec, SeedPlan.create("public")) if c.name == "n65536")
    x = case.make_inputs()["x"]
    assert x.min() < -7.75 and x.max() > 7.75
    assert np.mean(np.abs(x) > 7.75) > 0.2
    assert 7.75 in x and -7.75 in x


def test_case_inputs_are_reproducible_from_the_seed_and_differ_between_seeds():
    spec = load_assignment("matmul")
    one = correctness_cases(spec, SeedPlan.create("public"))[3].make_inputs()
    again = correctness_cases(spec, SeedPlan.create("public"))[3].make_inputs()
    other = correctness_cases(spec, SeedPlan.create("public", "another seed"))[3].make_inputs()
    assert np.array_equal(one["a"], again["a"])
    assert not np.array_equal(one["a"], other["a"])


def test_perf_repeats_get_fresh_inputs():
    spec = load_assignment("sigmoid")
    seeds = SeedPlan.create("public")
    first = perf_case(spec, "vector", seeds).make_inputs()["x"]
    second = perf_case(spec, "vector", seeds, repeat=1).make_inputs()["x"]
    assert first.shape == (1048576,) and not np.array_equal(first, second)


def test_fp16_cases_are_drawn_in_fp16():
    spec = load_assignment("sigmoid")
    case = next(c for c in correctness_cases(spec, SeedPlan.create("public")) if c.dtype == "float16")
    assert case.make_inputs()["x"].dtype == np.float16


def _broken(old: str, new: str) -> str:
    assert old in MATMUL_TOML, old
    return MATMUL_TOML.replace(old, new, 1)


@pytest.mark.parametrize(("old", "new", "message"), [
    ('name = "tiny"\ndescription', 'name = "tiny"\ndescriptio = "x"\ndescription', "unknown key (typo?)"),
    ('group = "tiny"\ndims = { M = 1, K = 1, N = 1 }', 'group = "tiney"\ndims = { M = 1, K = 1, N = 1 }',
     "group 'tiney' is not declared"),
    ("dims = { M = 1, K = 1, N = 1 }", "dims = { M = 1, K = 1 }", "must be exactly ['K', 'M', 'N']"),
    ("dims = { M = 1, K = 1, N = 1 }", "dims = { M = 0, K = 1, N = 1 }", "dims must be >= 1"),
    ('dims = { M = 1, K = 7, N = 3 }', 'dims = { M = 1, K = 7, N = 3 }\ndtypes = ["float64"]', "float16"),
    ('reference = "matmul"', 'reference = "matmull"', "reference 'matmull' is unknown"),
    ('name = "1x7x3"', 'name = "1x1x1"', "duplicate case names ['1x1x1']"),
    ("low = -1.0, high = 1.0", "low = 1.0, high = -1.0", "needs low < high"),
    ("[tolerances.float16]\ndiff1 = 3e-3\ndiff2 = 3e-3", "[tolerances.float16]", "at least one of diff1"),
    ('groups = ["tiny", "aligned", "tail", "half"]\nperf', 'groups = ["tiny", "bogus"]\nperf',
     "group 'bogus' is not declared"),
    ('groups = ["tiny", "aligned", "tail", "half"]\nperf', 'groups = ["half"]\nperf', "at least one must gate"),
    ('perf = { dims = { M = 128, K = 256, N = 128 } }\nslack = 2.0\n\n[[stages]]\nname = "scalar_nram"',
     'perf = { dims = { M = 128, N = 128 } }\nslack = 2.0\n\n[[stages]]\nname = "scalar_nram"',
     "perf dims ['M', 'N'] must be exactly"),
    ('check = { kind = "min_cores", cores = 2 }', 'check = { kind = "max_cores", cores = 2 }', "max_cores"),
])
def test_bad_specs_are_rejected_with_a_message_naming_the_problem(old, new, message):
    with pytest.raises(SpecError) as info:
        parse_spec(_broken(old, new), "assignments/matmul/assignment.toml")
    assert message in str(info.value)
    assert "assignments/matmul/assignment.toml" in str(info.value)


def test_invalid_toml_and_unknown_assignments_are_reported(tmp_path: Path):
    with pytest.raises(SpecError, match="not valid TOML"):
        parse_spec("name = ", "x.toml")
    with pytest.raises(SpecError, match=r"no assignment 'nope'.*known: .*matmul"):
        load_assignment("nope")


def test_every_shipped_case_group_is_used_by_some_stage():
    for name in ("matmul", "sigmoid"):
        spec = load_assignment(name)
        used = {g for s in spec.stages for g in s.groups}
        assert used == {g.name for g in spec.groups}, name


def test_shipped_thresholds_if_present_match_the_perf_shapes():
    for name in ("matmul", "sigmoid"):
        spec = load_assignment(name)
        path = ASSIGNMENTS_ROOT / name / "thresholds" / "emu-mlu370-x8.toml"
        if not path.exists():
            continue
        table = tomllib.loads(path.read_text())
        for stage, entry in table["stages"].items():
            assert entry["perf_dims"] == spec.stage(stage).perf.dims
            assert entry["threshold_us"] >= entry["reference_us"]
