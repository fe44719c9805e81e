"""Seeds: public ones reproduce, secret ones are withheld, per-case seeds reveal nothing about the master."""

from __future__ import annotations

import hashlib

from grader.spec import SeedPlan
from grader.spec.seeds import PUBLIC_SEED


def test_public_mode_records_the_master_so_a_student_can_reproduce():
    plan = SeedPlan.create("public")
    record = plan.record()
    assert plan.master == PUBLIC_SEED and record.master == PUBLIC_SEED
    assert record.master_digest == hashlib.sha256(PUBLIC_SEED.encode()).hexdigest()[:16]


def test_secret_mode_draws_a_fresh_master_and_withholds_it():
    one, two = SeedPlan.create("secret"), SeedPlan.create("secret")
    assert one.master != two.master
    record = one.record()
    assert record.master is None and record.mode == "secret"
    assert one.master not in record.model_dump_json()


def test_case_seeds_are_deterministic_distinct_and_unrelated_across_masters():
    plan = SeedPlan.create("secret", "s3cret")
    seeds = [plan.derive("matmul", "case", f"c{i}", "float32") for i in range(200)]
    assert seeds == [plan.derive("matmul", "case", f"c{i}", "float32") for i in range(200)]
    assert len(set(seeds)) == 200
    other = SeedPlan.create("secret", "s3cres")
    # One character of difference in the master changes every case seed (HMAC), so knowing the seeds of a
    # public run tells nothing about a secret run's cases.
    assert all(plan.derive("matmul", "case", f"c{i}") != other.derive("matmul", "case", f"c{i}") for i in range(200))


def test_case_seeds_do_not_leak_the_master_or_a_simple_function_of_it():
    master = "1234567"
    plan = SeedPlan.create("secret", master)
    seed = plan.derive("sigmoid", "case", "n1")
    assert str(master) not in str(seed)
    assert seed != int(master) and seed != hash(master)
    # Different labels under one master are unrelated too: no arithmetic progression to extrapolate.
    a, b, c = (plan.derive("sigmoid", "case", n) for n in ("n1", "n2", "n3"))
    assert b - a != c - b


def test_label_parts_cannot_be_shifted_into_each_other():
    plan = SeedPlan.create("public")
    assert plan.derive("ab", "c") != plan.derive("a", "bc")


def test_a_case_drawn_twice_gives_the_same_read_only_inputs_and_other_seeds_other_inputs():
    """The executor and the scorer both draw a case (the host never reads inputs back from /io): the second
    draw is the kept first one, which nobody can change in between."""
    import numpy as np
    import pytest

    from grader.spec import load_assignment
    from grader.spec.cases import correctness_cases

    spec = load_assignment("sigmoid")
    first, again = (correctness_cases(spec, SeedPlan.create("public")) for _ in range(2))
    other = correctness_cases(spec, SeedPlan.create("secret"))
    for a, b, c in zip(first, again, other, strict=True):
        x, y, z = a.make_inputs()["x"], b.make_inputs()["x"], c.make_inputs()["x"]
        assert np.array_equal(x, y) and x.shape == z.shape
        with pytest.raises(ValueError):
            x[...] = 0
    assert any(not np.array_equal(a.make_inputs()["x"], c.make_inputs()["x"]) for a, c in zip(first, other, strict=True))


def test_a_cases_reference_is_computed_once_read_only_and_per_reference_and_seed():
    """A batch worker judges every student on the same cases: the kept reference is the one a fresh
    computation gives, nobody can change it, and another seed or reference gets its own."""
    import numpy as np
    import pytest

    from grader.spec import REFERENCES, load_assignment
    from grader.spec.cases import correctness_cases

    spec = load_assignment("sigmoid")
    public, secret = (correctness_cases(spec, SeedPlan.create(mode)) for mode in ("public", "secret"))
    for case, other in zip(public, secret, strict=True):
        kept = case.expected("sigmoid")
        assert kept is case.expected("sigmoid")
        fresh = REFERENCES["sigmoid"].compute(*case.reference_inputs(case.make_inputs()))
        np.testing.assert_array_equal(kept, fresh)
        with pytest.raises(ValueError):
            kept[...] = 0
        if case.make_inputs()["x"].size > 1:
            assert not np.array_equal(other.expected("sigmoid"), kept)
    matmul = correctness_cases(load_assignment("matmul"), SeedPlan.create("public"))[0]
    assert matmul.expected("matmul").shape == tuple(matmul.output_shape)


def test_a_replay_twin_cannot_be_computed_from_the_public_case_alone():
    """Issue 26: with the public master a case's seed is anyone's, so a twin derived from it alone would let a
    run compute the twin's answer and upload it for its kernel to copy. The twin needs the host's salt too."""
    import numpy as np

    from grader.orchestration.replay import TWIN_SALT
    from grader.spec import load_assignment
    from grader.spec.cases import correctness_cases

    case = max(correctness_cases(load_assignment("sigmoid"), SeedPlan.create("public")),
               key=lambda c: c.shapes["x"])  # one element is always a special value: 1 in 11 alike
    unsalted = int.from_bytes(hashlib.sha256(b"bang-grader-replay:%d" % case.seed).digest()[:8], "little")
    twin = case.replay_twin(TWIN_SALT)
    assert twin.seed not in (case.seed, unsalted)
    assert twin.seed == case.replay_twin(TWIN_SALT).seed != case.replay_twin(b"another grader").seed
    assert twin.shapes == case.shapes and not np.array_equal(twin.make_inputs()["x"], case.make_inputs()["x"])
