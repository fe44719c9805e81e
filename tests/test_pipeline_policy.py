"""The call policy (grader/orchestration/policy.py) driven by a fake runner: which calls reach the sandbox when
an entry hangs or fails to load on its probe, and how many timing rounds a hardware backend runs. Real runs
cannot make these cases happen on demand (a hang costs a full time limit; there is no MLU card here).

The fake (tests/factories.py: FakeRunner) answers as the harness does, run or started as the rounds' keeper. Every
test runs both ways (the `rounds` fixture), so probe, skip and re-timing are the same decisions in either."""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from bang_harness.protocol import REPLAYS_DIR, ErrorKind, ExitCode
from factories import Behaviour, FakeRunner, matmul_submission, right

from grader.backends.emu import EmuBackend
from grader.backends.mlu import MluBackend
from grader.orchestration import GradeEnvironment, GradeRequest, grade_submission
from grader.orchestration.environment import ResolvedBackend
from grader.orchestration.execute import PER_ROUND_ENV, Executor
from grader.orchestration.plan import plan_calls, probe_calls
from grader.orchestration.policy import PROBE_TIMEOUT_SECONDS, Ran, run_calls, run_correctness
from grader.orchestration.replay import fresh_io, write_trace_key
from grader.orchestration.replay_sandbox import MakeSandbox, ReplaySandboxes, as_in_own_sandbox
from grader.orchestration.rounds import STOP_REASON
from grader.orchestration.score_stages import Scorer
from grader.results import Verdict
from grader.sandbox.base import Limits, Phase, RunOutcome
from grader.scoring.thresholds import load_thresholds
from grader.scoring.timing import MAX_ROUNDS
from grader.spec import AssignmentSpec, SeedPlan, load_assignment

SPEC = load_assignment("matmul")
ENTRIES = {"scalar_gdram": "good", "vector": "other"}
MLU = ResolvedBackend(name="mlu", device="0", impl=MluBackend())


@pytest.fixture(autouse=True, params=["one sandbox", "sandbox per round"])
def rounds_share_a_sandbox(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    if request.param == "sandbox per round":
        monkeypatch.setenv(PER_ROUND_ENV, "1")
    else:
        monkeypatch.delenv(PER_ROUND_ENV, raising=False)
    return request.param == "one sandbox"


def run_policy(tmp_path: Path, behave: Behaviour, backend: ResolvedBackend = MLU,
               spec: AssignmentSpec = SPEC) -> tuple[FakeRunner, Ran]:
    runner = FakeRunner(spec, behave)
    seeds = SeedPlan.create("public", None)
    executor = Executor(runner, backend, spec, tmp_path, "ops", "my_ops_ext", tmp_path / "build",
                        lambda step, fraction: None, notes=[])
    calls = plan_calls(SPEC, seeds, ENTRIES, list(ENTRIES), backend.impl)
    try:
        (tmp_path / "work").mkdir()
        executor.start(tmp_path / "work")  # as the pipeline does: the run sandbox up before the first round
        return runner, run_calls(executor, Scorer(spec, backend), seeds, calls, tmp_path / "work")
    finally:
        executor.close()


def other_fails(meta: dict[str, Any]) -> Behaviour:
    return lambda call: meta if call["entry"] == "other" else right(call)


@pytest.mark.parametrize("meta", [
    {"ok": False, "error_kind": ErrorKind.TIMEOUT, "error": "the call took longer than 20 s"},
    {"ok": False, "error_kind": ErrorKind.LOAD_FAILURE, "error": "cannot import ops"},
    {"ok": False, "error_kind": ErrorKind.PYTHON_EXCEPTION, "error": "import failed", "during": "load"},
])
def test_an_entry_doomed_by_its_probe_runs_no_other_call(tmp_path, meta):
    runner, ran = run_policy(tmp_path, other_fails(meta))
    probe_job = runner.jobs[0]
    assert probe_job["call_timeout_seconds"] == PROBE_TIMEOUT_SECONDS
    assert {c["entry"] for c in probe_job["calls"]} == {"good", "other"}
    assert runner.ran("other") == [c["id"] for c in probe_job["calls"] if c["entry"] == "other"]  # only its probe
    others = [r for r in ran.judged.values() if r.entry == "other"]
    assert len(others) > 1 and not any(r.passed for r in others)  # every case recorded, none run
    assert all("not run: other() already failed on its first case" in r.message for r in others[1:])
    # The healthy entry is untouched: all its cases ran and passed, and its stage was timed.
    good = [c for c in ran.judged if ran.judged[c].entry == "good"]
    assert set(good) <= set(runner.ran("good")) and all(ran.judged[c].passed for c in good)
    assert ran.samples["scalar_gdram"] and not ran.samples["vector"]


def test_a_failure_that_dooms_nothing_leaves_the_other_calls_to_run(tmp_path):
    runner, ran = run_policy(tmp_path, other_fails({"ok": False, "error_kind": ErrorKind.PYTHON_EXCEPTION,
                                                    "error": "IndexError"}))
    correctness = [c for c, r in ran.judged.items() if r.entry == "other" and c.startswith("c")]
    assert len(correctness) > 1 and set(correctness) <= set(runner.ran("other"))
    assert not any("not run" in ran.judged[c].message for c in correctness)
    assert "vector" not in {c["entry"] for c in runner.jobs[-1]["calls"]}  # failing cases: its stage not timed
    assert ran.judged[correctness[0]].verdict == Verdict.RUNTIME_ERROR


def timed(samples_by_round: Callable[[int], list[float]], wrong_from: int = MAX_ROUNDS) -> Behaviour:
    """Right outputs; a timed call's device_us by round (0: the first timing, r<n>_...: round n)."""
    def behave(call: dict[str, Any]) -> dict[str, Any]:
        round_index = int(call["id"][1:].split("_")[0]) if call["id"].startswith("r") else 0
        if not call["timed_repeats"]:
            return right(call)
        return {"ok": True, "output": "right" if round_index < wrong_from else "wrong",
                "device_us": samples_by_round(round_index)}
    return behave


def rounds(runner: FakeRunner) -> int:
    return sum(1 for job in runner.jobs if all(c["id"].startswith("r") for c in job["calls"]))


def test_hardware_timing_stops_once_the_spread_settles(tmp_path):
    # Ten samples with a 22 % spread do not settle; one more round of ten equal ones does. The samples are the
    # timing driver's records of the timed invocations (grader.checks.kernel_use), not the result's own list.
    runner, ran = run_policy(tmp_path, timed(lambda r: [100.0] * 7 + [130.0] * 3 if r == 0 else [100.0] * 10))
    assert rounds(runner) == 1
    assert len(ran.samples["scalar_gdram"]) == 20 and len(ran.samples["vector"]) == 20


def test_hardware_timing_that_never_settles_stops_at_max_rounds(tmp_path):
    runner, ran = run_policy(tmp_path, timed(lambda r: [100.0, 300.0] * 5))
    assert rounds(runner) == MAX_ROUNDS - 1
    assert len(ran.samples["scalar_gdram"]) == 10 * MAX_ROUNDS
    retimed = [c for c in runner.ran() if c.startswith("r")]
    assert retimed[0].startswith("r1_") and retimed[-1].startswith(f"r{MAX_ROUNDS - 1}_")
    assert all(c["warmup"] == 1 and c["timed_repeats"] == MluBackend.timed_repeats
               for job in runner.jobs for c in job["calls"] if c["id"].startswith("r"))


def test_a_wrong_output_in_a_timing_round_adds_no_samples(tmp_path):
    runner, ran = run_policy(tmp_path, timed(lambda r: [100.0, 300.0] * 5, wrong_from=2))
    assert rounds(runner) == MAX_ROUNDS - 1  # still unsettled: the rounds go on
    assert len(ran.samples["scalar_gdram"]) == 10 * 2  # the first timing and round 1 only


def test_the_emulator_is_timed_once(tmp_path):
    # Modelled time is deterministic: one timed call, no rounds, whatever the in-process clock claims.
    emu = ResolvedBackend(name="emu", device=EmuBackend.default_device, impl=EmuBackend())
    runner, ran = run_policy(tmp_path, timed(lambda r: [100.0, 300.0] * 5), backend=emu)
    assert all(r.passed for r in ran.judged.values()), [r.message for r in ran.judged.values() if not r.passed]
    perf = [c for c in runner.jobs[-1]["calls"] if c["timed_repeats"]]
    assert len(perf) == 2 and all(c["warmup"] == 0 and c["timed_repeats"] == 1 for c in perf)
    assert rounds(runner) == 0


def test_grade_submission_uses_the_runner_in_the_options(tmp_path):
    sub = matmul_submission(tmp_path / "sub")
    hang = {"ok": False, "error_kind": ErrorKind.TIMEOUT, "error": "hung"}
    runner = FakeRunner(SPEC, lambda call: hang)
    result = grade_submission(sub, GradeRequest(assignment="matmul"), GradeEnvironment(runner=runner))
    assert result.sandbox == "fake" and result.build is not None and result.build.ok
    assert result.verdict == Verdict.TIMEOUT and len(runner.jobs) == 1  # the probe, then nothing


EMU = ResolvedBackend(name="emu", device=EmuBackend.default_device, impl=EmuBackend())


def test_the_rounds_of_a_submission_share_one_sandbox(tmp_path, rounds_share_a_sandbox):
    runner, ran = run_policy(tmp_path, right, backend=EMU)
    assert all(r.passed for r in ran.judged.values()), [r.message for r in ran.judged.values() if not r.passed]
    assert len(runner.jobs) == 3  # probe, correctness, timing: each signed with its own round's key
    assert runner.sandboxes == (1 if rounds_share_a_sandbox else 3)


def test_a_sandbox_lost_in_a_round_is_replaced_for_the_rounds_left(tmp_path, rounds_share_a_sandbox):
    # The first probe kills the whole sandbox: no probe has a result, the host says so and goes on elsewhere.
    first = probe_calls(plan_calls(SPEC, SeedPlan.create("public", None), ENTRIES, list(ENTRIES), EMU.impl))[0]
    runner, ran = run_policy(tmp_path, lambda call: {"ends_sandbox": True} if call["id"] == first.id else right(call),
                             backend=EMU)
    probes = [c["id"] for c in runner.jobs[0]["calls"]]
    assert probes[0] == first.id and len(probes) == 2
    for probe in probes:
        assert ran.judged[probe].verdict == Verdict.CRASH and "no result for this call" in ran.judged[probe].message
    # The correctness round ran in a fresh sandbox; no stage is timed (its entry failed a case).
    assert len(runner.jobs) == 2 and runner.sandboxes == 2
    rest = [r for c, r in ran.judged.items() if c not in probes]
    assert rest and all(r.passed for r in rest)


def test_a_round_past_its_wall_limit_is_stopped_by_the_host(tmp_path, rounds_share_a_sandbox):
    if not rounds_share_a_sandbox:
        pytest.skip("a sandbox of one round is stopped by its runner's own wall limit (tests/sandbox)")
    spec = SPEC.model_copy(update={"run_timeout_seconds": 0.5})
    runner, ran = run_policy(tmp_path, lambda call: {"hangs": True} if call["id"] == "c0" else right(call),
                             backend=EMU, spec=spec)
    assert runner.kill_reason == "wall-clock limit of 0.5 s reached"
    for probe in runner.jobs[0]["calls"]:  # a hang dooms its entry: no round after it
        assert ran.judged[probe["id"]].verdict == Verdict.TIMEOUT
        assert "killed after the wall limit" in ran.judged[probe["id"]].message
    assert runner.sandboxes == 1 and len(runner.jobs) == 1


def test_an_answer_the_kernels_do_not_reproduce_on_twin_inputs_costs_every_stage(tmp_path):
    """The run returns the right answer for every call of one entry, but the replay of its kernels on the twin's
    inputs does not (a host-side answer, a cached one): integrity for that entry's calls, and no stage of the
    submission earns speed points (issue 26, item 4)."""
    def behave(call):
        return {**right(call), "replay": "wrong"} if call["entry"] == "other" else right(call)

    runner, ran = run_policy(tmp_path, behave, backend=EMU)
    other = [r for c, r in ran.judged.items() if r.entry == "other"]
    assert other and all(r.verdict == Verdict.INTEGRITY and "did not compute it" in r.message for r in other)
    assert runner.replays >= 2
    from grader.orchestration.score_stages import apply_integrity

    scorer = Scorer(SPEC, EMU)
    calls = [c for c in plan_calls(SPEC, SeedPlan.create("public", None), ENTRIES, list(ENTRIES), EMU.impl)
             if c.id in ran.outcomes]
    thresholds = load_thresholds(SPEC, "emu", EMU.device)
    stages = [scorer.stage_result(c, ran.judged, ran.outcomes.get(c.id), ran.samples.get(c.stage, []), thresholds)
              for c in calls if c.stage is not None]
    earned = {s.name: s.points for s in stages if s.points > 0}
    assert earned and all(s.entry == "good" for s in stages if s.name in earned)  # the honest entry's stage
    cases = list(ran.judged.values())
    flagged = apply_integrity(calls, ran.outcomes, ran.judged, cases, stages)
    assert flagged and all(s.points == 0 for s in stages)
    assert all("flagged for review" in s.message for s in stages if s.name in earned)


def test_a_replay_that_fails_by_itself_is_the_graders_fault_not_the_students(tmp_path):
    runner = FakeRunner(SPEC, right)
    runner.replay_fails = True
    executor = Executor(runner, EMU, SPEC, tmp_path, "ops", "my_ops_ext", tmp_path / "build",
                        lambda step, fraction: None, notes=[])
    seeds = SeedPlan.create("public", None)
    calls = plan_calls(SPEC, seeds, ENTRIES, list(ENTRIES), EMU.impl)
    from grader.sandbox.base import SandboxError

    try:
        with pytest.raises(SandboxError, match="replay of the kernels failed"):  # internal_error in the pipeline
            run_calls(executor, Scorer(SPEC, EMU), seeds, calls, tmp_path / "work")
    finally:
        executor.close()


def test_seeds_sharing_rounds_are_decided_each_on_their_own(tmp_path, rounds_share_a_sandbox):
    """grade_on_seeds runs several seeds' calls in the same three rounds (seed sweeps). Each seed keeps its own
    inputs (the fake computes every output from the files it is given: a seed reading another's would be wrong),
    its own probes and dooms (seed 1's `other` hangs on its probe: only that entry of that seed stops), and its
    stages are timed on its own judgements."""
    from grader.orchestration.policy import run_seeds_calls

    plans = [SeedPlan.create("public", "sweep-a"), SeedPlan.create("public", "sweep-b")]
    planned = [(seeds, plan_calls(SPEC, seeds, ENTRIES, list(ENTRIES), EMU.impl, tag=f"s{i}_"))
               for i, seeds in enumerate(plans)]
    hung = {"ok": False, "error_kind": ErrorKind.TIMEOUT, "error": "the call took longer than 20 s"}
    runner = FakeRunner(SPEC, lambda call: hung if call["id"].startswith("s1_") and call["entry"] == "other"
                        else right(call))
    executor = Executor(runner, EMU, SPEC, tmp_path, "ops", "my_ops_ext", tmp_path / "build",
                        lambda step, fraction: None, notes=[], seeds_per_round=2)
    try:
        first, second = run_seeds_calls(executor, Scorer(SPEC, EMU), planned, tmp_path / "work")
    finally:
        executor.close()
    assert len(runner.jobs) == 3  # probe, correctness, timing: shared by both seeds
    assert runner.budgets == {shared_budget(2)}  # each seed brings its own files and journal (run and replay)
    assert sorted((c["id"][:3], c["entry"]) for c in runner.jobs[0]["calls"]) == [
        ("s0_", "good"), ("s0_", "other"), ("s1_", "good"), ("s1_", "other")]
    assert all(r.passed for r in first.judged.values()), [r.message for r in first.judged.values() if not r.passed]
    assert first.samples["scalar_gdram"] and first.samples["vector"]
    assert set(first.judged) == {c.id for c in planned[0][1]}  # each seed's results hold its own calls only
    others = [c for c, r in second.judged.items() if r.entry == "other"]
    assert len(others) > 1 and not any(second.judged[c].passed for c in others)
    assert [c for c in runner.ran("other") if c.startswith("s1_")] == [
        c["id"] for c in runner.jobs[0]["calls"] if c["id"].startswith("s1_") and c["entry"] == "other"]
    assert all(second.judged[c].passed for c, r in second.judged.items() if r.entry == "good")
    assert second.samples["scalar_gdram"] and not second.samples["vector"]
    # the same decisions as the seed graded alone
    alone_runner = FakeRunner(SPEC, lambda call: hung if call["entry"] == "other" else right(call))
    alone = Executor(alone_runner, EMU, SPEC, tmp_path / "alone", "ops", "my_ops_ext", tmp_path / "build",
                     lambda step, fraction: None, notes=[])
    try:
        single = run_calls(alone, Scorer(SPEC, EMU), plans[1], plan_calls(SPEC, plans[1], ENTRIES, list(ENTRIES),
                                                                          EMU.impl), tmp_path / "alone-work")
    finally:
        alone.close()
    assert [(r.name, r.entry, r.verdict) for r in single.judged.values()] == [
        (r.name, r.entry, r.verdict) for r in second.judged.values()]
    assert alone_runner.budgets == {shared_budget(1)}


def shared_budget(seeds: int) -> tuple[int, int, int]:
    """(disk, file size, memory) of a round `seeds` seeds share: each keeps what it has alone, the memory the
    extra /tmp and /io tmpfs pages are charged to included."""
    alone = Limits()
    return (seeds * alone.tmpfs_bytes, seeds * alone.file_size_bytes,
            alone.memory_bytes + 2 * (seeds - 1) * alone.tmpfs_bytes)


def test_no_more_seeds_share_a_round_than_keep_each_seeds_budgets(tmp_path):
    """grade_on_seeds asked for 10 seeds a round runs at most MAX_SEEDS_PER_ROUND: the worker's one journal holds
    every seed's calls, and each seed keeps its own file size budget only while that journal stays under the
    journal's own cap (10 seeds of the bundled example's six stages ran into one seed's 256 MiB file size
    limit, and correct kernels were graded integrity)."""
    from grader.orchestration.execute import MAX_SEEDS_PER_ROUND
    from grader.orchestration.pipeline import grade_on_seeds
    from grader.orchestration.replay import JOURNAL_CAP_BYTES

    broken = {"ok": False, "error_kind": ErrorKind.LOAD_FAILURE, "error": "no module", "during": "load"}
    runner = FakeRunner(SPEC, lambda call: broken)  # the probe dooms every entry: one round per chunk of seeds
    results = grade_on_seeds(matmul_submission(tmp_path / "sub"), GradeRequest(assignment="matmul"),
                             GradeEnvironment(runner=runner),
                             [f"sweep-{i}" for i in range(6)], per_round=10)
    assert len(results) == 6 and all(r.verdict == Verdict.RUNTIME_ERROR for r in results)
    assert [len({c["id"].split("_")[0] for c in job["calls"]}) for job in runner.jobs] == [4, 2]
    assert MAX_SEEDS_PER_ROUND == 4 and MAX_SEEDS_PER_ROUND * Limits().file_size_bytes <= JOURNAL_CAP_BYTES
    assert runner.budgets == {shared_budget(MAX_SEEDS_PER_ROUND)}


def test_on_the_emulator_the_stages_are_timed_while_the_correctness_rounds_are_replayed(tmp_path):
    """The timing round starts before the correctness replay ends: the first replay (the probe's and the correctness
    round's) waits for the timing round's job to reach the sandbox -- run one after the other, it never would."""
    runner = FakeRunner(SPEC, right)
    seen: list[bool] = []
    replays = itertools.count()

    def timing_round_started() -> bool:
        return any(c["timed_repeats"] for job in list(runner.jobs) for c in job["calls"])

    def first_replay_waits() -> None:
        if next(replays) == 0:  # the timing round's own replay may start while the first one still waits
            deadline = time.monotonic() + 30
            while not timing_round_started() and time.monotonic() < deadline:
                time.sleep(0.01)
            seen.append(timing_round_started())

    runner.on_replay = first_replay_waits
    executor = Executor(runner, EMU, SPEC, tmp_path, "ops", "my_ops_ext", tmp_path / "build",
                        lambda step, fraction: None, notes=[])
    seeds = SeedPlan.create("public", None)
    try:
        ran = run_calls(executor, Scorer(SPEC, EMU), seeds, plan_calls(SPEC, seeds, ENTRIES, list(ENTRIES), EMU.impl),
                        tmp_path / "work")
    finally:
        executor.close()
    assert seen == [True]
    assert len(runner.jobs) == 3 and runner.replays == 2  # probe, correctness, timing; two replays
    assert all(r.passed for r in ran.judged.values()), [r.message for r in ran.judged.values() if not r.passed]
    assert ran.samples["scalar_gdram"] and ran.samples["vector"]


def test_a_stage_timed_on_the_runs_word_that_the_replay_fails_is_dropped_with_its_round(tmp_path):
    """`other` returns the right answers, so the run alone lets its stage be timed beside the replay; the replay
    of its kernels on the twins does not reproduce them (integrity), so its stage may not be timed. Its timed call
    -- first in the timing round -- ends the sandbox, which costs `good`'s timed call after it. That round is
    dropped whole, its note included, and `good`'s stage is timed again alone: as without the guess, where the
    replay came first and `other`'s timed call never ran."""
    def behave(call: dict[str, Any]) -> dict[str, Any]:
        if call["entry"] != "other":
            return right(call)
        return {"ends_sandbox": True} if call["timed_repeats"] else {**right(call), "replay": "wrong"}

    runner = FakeRunner(SPEC, behave)
    notes: list[str] = []
    executor = Executor(runner, EMU, SPEC, tmp_path, "ops", "my_ops_ext", tmp_path / "build",
                        lambda step, fraction: None, notes=notes)
    seeds = SeedPlan.create("public", None)
    calls = plan_calls(SPEC, seeds, ENTRIES, ["vector", "scalar_gdram"], EMU.impl)  # other's stage timed first
    try:
        ran = run_calls(executor, Scorer(SPEC, EMU), seeds, calls, tmp_path / "work")
    finally:
        executor.close()
    perf = {c.stage: c.id for c in calls if c.stage is not None}
    guess, again = runner.jobs[2], runner.jobs[3]
    assert [c["id"] for c in guess["calls"]] == [perf["vector"], perf["scalar_gdram"]]
    assert [c["id"] for c in again["calls"]] == [perf["scalar_gdram"]] and len(runner.jobs) == 4
    assert perf["vector"] not in ran.judged and perf["vector"] not in ran.outcomes and not ran.samples["vector"]
    assert ran.judged[perf["scalar_gdram"]].passed and ran.samples["scalar_gdram"]
    assert all(r.verdict == Verdict.INTEGRITY for r in ran.judged.values() if r.entry == "other")
    assert not [n for n in notes if "did not finish cleanly" in n], notes


def test_a_guess_the_replay_confirms_keeps_its_round_and_its_notes(tmp_path):
    """The timing round run beside the replay is kept when the replay lets the same stages be timed: one timing
    round, and what it had to say (a timed call that crashed the sandbox) said after the correctness rounds'."""
    def behave(call: dict[str, Any]) -> dict[str, Any]:
        return {"ends_sandbox": True} if call["entry"] == "other" and call["timed_repeats"] else right(call)

    runner = FakeRunner(SPEC, behave)
    notes: list[str] = []
    executor = Executor(runner, EMU, SPEC, tmp_path, "ops", "my_ops_ext", tmp_path / "build",
                        lambda step, fraction: None, notes=notes)
    seeds = SeedPlan.create("public", None)
    calls = plan_calls(SPEC, seeds, ENTRIES, list(ENTRIES), EMU.impl)
    try:
        ran = run_calls(executor, Scorer(SPEC, EMU), seeds, calls, tmp_path / "work")
    finally:
        executor.close()
    perf = {c.stage: c.id for c in calls if c.stage is not None}
    assert len(runner.jobs) == 3
    assert ran.judged[perf["scalar_gdram"]].passed and ran.judged[perf["vector"]].verdict == Verdict.CRASH
    assert [n for n in notes if "did not finish cleanly" in n]


def test_the_replays_of_a_submission_share_one_replay_sandbox(tmp_path, rounds_share_a_sandbox):
    """The probe and correctness rounds' replay and the perf round's, one after the other in one replay sandbox
    (replay_sandbox.py) where the rounds share one; each replay's outputs read from its own staged folder, out of
    the sandbox, whose /io keeps nothing of a replay once it is read."""
    runner, ran = run_policy(tmp_path, right, backend=EMU)
    assert all(r.passed for r in ran.judged.values()), [r.message for r in ran.judged.values() if not r.passed]
    assert runner.replays == 2  # probe + correctness, then perf
    assert runner.replay_sandboxes == (1 if rounds_share_a_sandbox else 0)
    for staged in ("io-replay", "io-perf-replay"):
        assert list((tmp_path / "work" / staged / "outputs").glob("*.trace.jsonl"))
    if rounds_share_a_sandbox:
        assert runner.replay_kill_reason == STOP_REASON  # closed with the grading
        assert list((tmp_path / "work" / "io-replays" / REPLAYS_DIR).iterdir()) == []


def test_the_replay_sandbox_starts_once_the_probe_is_over(tmp_path, rounds_share_a_sandbox):
    """Executor.start_replays: the emulator's replay sandbox starts beside the correctness round, after the probe
    (by then the run sandbox has imported torch), so the first replay finds it up; the hardware's, which replays
    nothing, starts none."""
    for backend, expected in ((EMU, 1 if rounds_share_a_sandbox else 0), (MLU, 0)):
        runner = FakeRunner(SPEC, right)
        executor = Executor(runner, backend, SPEC, tmp_path, "ops", "my_ops_ext", tmp_path / "build",
                            lambda step, fraction: None, notes=[])
        work = tmp_path / backend.name
        work.mkdir()
        try:
            executor.start(work)
            assert runner.replay_sandboxes == 0
            seeds = SeedPlan.create("public", None)
            run_correctness(executor, plan_calls(SPEC, seeds, ENTRIES, list(ENTRIES), backend.impl), work,
                            settle=False)
            if executor._starting_replays is not None:
                executor._starting_replays.result()
            assert (runner.replay_sandboxes, runner.replays) == (expected, 0), backend.name
        finally:
            executor.close()


def test_a_replay_sandbox_killed_between_replays_is_replaced(tmp_path, rounds_share_a_sandbox):
    if not rounds_share_a_sandbox:
        pytest.skip("no replay sandbox is shared")
    runner = FakeRunner(SPEC, right)
    runner.replay_sandbox_lives = 1
    executor = Executor(runner, EMU, SPEC, tmp_path, "ops", "my_ops_ext", tmp_path / "build",
                        lambda step, fraction: None, notes=[])
    seeds = SeedPlan.create("public", None)
    try:
        ran = run_calls(executor, Scorer(SPEC, EMU), seeds, plan_calls(SPEC, seeds, ENTRIES, list(ENTRIES), EMU.impl),
                        tmp_path / "work")
    finally:
        executor.close()
    assert all(r.passed for r in ran.judged.values()), [r.message for r in ran.judged.values() if not r.passed]
    assert runner.replays == 2 and runner.replay_sandboxes == 2
    assert not executor.notes  # the perf replay never met the dead sandbox


def staged_replay(io: Path, journal_bytes: int = 0) -> Path:
    fresh_io(io)
    (io / "replay.json").write_text(json.dumps({"device": EMU.device, "calls_per_journal": {}}))
    if journal_bytes:
        (io / "journals" / "c0.journal").write_bytes(b"[]".ljust(journal_bytes))  # the fake's journal: JSON
    return io


def test_a_replay_that_fails_is_not_followed_by_a_reuse(tmp_path):
    runner = FakeRunner(SPEC, right)
    runner.on_replay = lambda: setattr(runner, "replay_fails", runner.replays == 1)
    shared = ReplaySandboxes(MakeSandbox(runner, ["python3", "-m", "bang_harness", "replay"], tmp_path, tmp_path,
                                         Limits(), {}, write_trace_key))
    try:
        failed = shared.replay(staged_replay(tmp_path / "r0"), 30)
        assert failed is not None and failed.outcome.exit_code == ExitCode.REPLAY_FAILED
        assert "replay-one: ImportError" in failed.outcome.stderr_tail
        assert runner.replay_kill_reason == STOP_REASON and runner.replay_sandboxes == 1  # ended at once
        for n in (1, 2):  # a fresh sandbox, then that one again
            again = shared.replay(staged_replay(tmp_path / f"r{n}"), 30)
            assert again is not None and again.outcome.ok and runner.replay_sandboxes == 2
    finally:
        shared.close()


def test_a_replay_too_large_for_the_shared_room_gets_a_sandbox_of_its_own(tmp_path):
    runner = FakeRunner(SPEC, right)
    budget = Limits(tmpfs_bytes=4 << 20)
    shared = ReplaySandboxes(MakeSandbox(runner, ["python3", "-m", "bang_harness", "replay"], tmp_path, tmp_path,
                                         budget, {}, write_trace_key))
    try:
        assert shared.replay(staged_replay(tmp_path / "small", 1 << 20), 30) is not None
        assert shared.replay(staged_replay(tmp_path / "large", 5 << 20), 30) is None  # the caller runs it alone
        assert runner.replays == 1
    finally:
        shared.close()


def test_what_a_shared_replay_says_names_its_paths_as_a_replay_of_its_own_sandbox():
    """A replay in the shared sandbox runs in /io/replays/n/; what it says reaches the grading's messages (the
    engine's why, a call's error) as if it had run in /io: the messages do not depend on the sandbox."""
    said = "gcc could not compile the module's C: /io/replays/0/wasm-engine/glue.c; /io/replays/12/journals/c0.journal"
    assert as_in_own_sandbox(said) == "gcc could not compile the module's C: /io/wasm-engine/glue.c; /io/journals/c0.journal"
    assert as_in_own_sandbox("/submission/replays/0/x.mlu") == "/submission/replays/0/x.mlu"


def test_a_replay_the_host_could_not_hand_in_is_not_followed_by_a_reuse(tmp_path):
    """The keeper waits for replay n: after a hand-in that failed half-way, the next replay gets a fresh sandbox."""
    runner = FakeRunner(SPEC, right)
    shared = ReplaySandboxes(MakeSandbox(runner, ["python3", "-m", "bang_harness", "replay"], tmp_path, tmp_path,
                                         Limits(), {}, write_trace_key))
    try:
        assert shared.replay(staged_replay(tmp_path / "r0"), 30).outcome.ok  # type: ignore[union-attr]
        broken = staged_replay(tmp_path / "r1")
        (broken / "replay.json").unlink()
        with pytest.raises(FileNotFoundError):
            shared.replay(broken, 30)
        assert shared.replay(staged_replay(tmp_path / "r2"), 30).outcome.ok  # type: ignore[union-attr]
        assert runner.replays == 2 and runner.replay_sandboxes == 2
    finally:
        shared.close()


class _BuildWatcher(FakeRunner):
    """Notes, as the build runs, how many run sandboxes are up; `build_ok` False: the compiler refuses the sources."""

    def __init__(self, spec: AssignmentSpec, behave: Behaviour, build_ok: bool = True) -> None:
        super().__init__(spec, behave)
        self.build_ok = build_ok
        self.up_at_build: list[int] = []
        self.handles: list[Any] = []

    def run(self, phase, argv, mounts, limits, env=None):
        if phase is Phase.BUILD:
            self.up_at_build.append(sum(h.wait(0) is None for h in self.handles))
            if not self.build_ok:
                (mounts.build / "build.json").write_text(json.dumps({"ok": False, "toolchain": "fake"}))
                (mounts.build / "build.log").write_text("ops.mlu:1: error: expected ';'")
                return RunOutcome(exit_code=1)
        return super().run(phase, argv, mounts, limits, env)

    def start(self, phase, argv, mounts, limits, env=None):
        handle = super().start(phase, argv, mounts, limits, env)
        self.handles.append(handle)
        return handle


def test_the_run_sandbox_imports_torch_while_the_build_compiles(tmp_path, rounds_share_a_sandbox):
    """pipeline: the run sandbox starts before the build (its keeper waits for the first round whatever the build
    takes) and serves every round; a build that fails leaves it unused, and ended with the grading."""
    for build_ok in (True, False):
        runner = _BuildWatcher(SPEC, right, build_ok)
        sub = matmul_submission(tmp_path / f"sub-{build_ok}")
        result = grade_submission(sub, GradeRequest(assignment="matmul"), GradeEnvironment(runner=runner))
        assert runner.up_at_build == [1 if rounds_share_a_sandbox else 0]
        if build_ok:
            # (the fake's extension has no symbols for the host's integrity checks: the verdict is theirs)
            assert len(runner.jobs) == 3 and result.verdict == Verdict.INTEGRITY, result.message
            assert runner.sandboxes == (1 if rounds_share_a_sandbox else 3)  # the early one served every round
        else:
            assert result.verdict == Verdict.COMPILE_ERROR and runner.jobs == []
            assert runner.kill_reason == (STOP_REASON if rounds_share_a_sandbox else "")
        assert all(h.wait(0) is not None for h in runner.handles)  # nothing left up


def test_a_run_sandbox_gone_before_its_first_round_is_replaced_not_blamed(tmp_path, rounds_share_a_sandbox):
    """Started before the build, a run sandbox can end before any round reaches it (its keeper's wait for a
    job ran out during a long build, its start-up failed): the first round starts a fresh one and is graded as
    usual, with no note of a sandbox that did not finish cleanly."""
    if not rounds_share_a_sandbox:
        pytest.skip("no sandbox is started before the rounds")
    runner = FakeRunner(SPEC, right)
    notes: list[str] = []
    executor = Executor(runner, EMU, SPEC, tmp_path, "ops", "my_ops_ext", tmp_path / "build",
                        lambda step, fraction: None, notes=notes)
    work = tmp_path / "work"
    work.mkdir()
    seeds = SeedPlan.create("public", None)
    try:
        executor.start(work)
        assert executor._rounds is not None and executor._rounds.started is not None
        executor._rounds.started.stop("the keeper waited for a job long enough")  # as its own exit would
        ran = run_calls(executor, Scorer(SPEC, EMU), seeds, plan_calls(SPEC, seeds, ENTRIES, list(ENTRIES), EMU.impl),
                        work)
    finally:
        executor.close()
    assert all(r.passed for r in ran.judged.values()), [r.message for r in ran.judged.values() if not r.passed]
    assert runner.sandboxes == 2 and len(runner.jobs) == 3
    assert not [n for n in notes if "did not finish cleanly" in n]
