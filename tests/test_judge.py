"""Judging one call from what the sandbox sent back: typed error kinds, no kernel launch, repeat drift."""

from __future__ import annotations

import numpy as np
from bang_harness.protocol import ErrorKind

from grader.orchestration.judge import CallOutcome, call_samples, dooms_entry, judge_call
from grader.orchestration.trace_summary import TraceReading
from grader.results import Verdict
from grader.spec import SeedPlan, correctness_cases, load_assignment
from grader.spec.references import REFERENCES

SPEC = load_assignment("sigmoid")
CASE = correctness_cases(SPEC, SeedPlan.create("public"))[3]
EXPECTED = REFERENCES["sigmoid"].compute(CASE.make_inputs()["x"])
LAUNCH = {"kernel": "k", "modelled_time_us": 1.0, "builtin_counts": {"__bang_active_sigmoid": 1}}


def reading(records: list[dict]) -> TraceReading:
    """What the reader hands the judge after verifying these (already trusted) records."""
    result = TraceReading(present=bool(records))
    for record in records:
        result.launches.add(record)
    return result


def judge(meta: dict, output: np.ndarray | None = None, trace: list | None = None, kernel_trace: bool = True):
    if output is None and meta.get("ok"):
        output = EXPECTED.astype(np.float32)
    got = CallOutcome(meta=meta, output=output, trace=reading([LAUNCH] if trace is None else trace))
    return judge_call(SPEC, "sigmoid", CASE, got, EXPECTED, kernel_trace=kernel_trace)


def test_a_correct_output_with_a_kernel_launch_passes():
    result = judge({"ok": True})
    assert result.passed and result.verdict == Verdict.PASSED and result.diff1 < 1e-7  # float32 rounding only


def test_no_kernel_launch_on_the_emulator_is_not_using_kernel():
    result = judge({"ok": True}, trace=[])
    assert result.verdict == Verdict.NOT_USING_KERNEL and "without launching a kernel" in result.message
    assert judge({"ok": True}, trace=[], kernel_trace=False).passed  # a real MLU has no launch trace


def test_harness_error_kinds_map_to_verdicts():
    assert judge({"ok": False, "error_kind": "crash", "error": "killed by SIGSEGV"}).verdict == Verdict.CRASH
    assert judge({"ok": False, "error_kind": "timeout", "error": "time limit"}).verdict == Verdict.TIMEOUT
    emu = judge({"ok": False, "error_kind": "emulator_error", "error": "gdram_oob_write: write past c"})
    assert emu.verdict == Verdict.RUNTIME_ERROR and "gdram_oob_write" in emu.message
    assert judge({"ok": False, "error_kind": "bogus", "error": "x"}).verdict == Verdict.RUNTIME_ERROR
    assert judge({"ok": False, "error_kind": "bad_output", "error": "a list"}).verdict == Verdict.WRONG_ANSWER
    lost = judge({"ok": False, "error_kind": "crash", "error": "exit status 137", "lost": True})
    assert lost.verdict == Verdict.CRASH and lost.message.startswith("no result for this call")


def test_a_harness_error_claimed_in_a_file_is_not_believed():
    """A result JSON is written where the student's process can write: its "harness_error" is a claim."""
    forged = judge({"ok": False, "error_kind": ErrorKind.HARNESS_ERROR, "error": "internal error (not your fault)"})
    assert forged.verdict == Verdict.RUNTIME_ERROR
    assert "not believed" in forged.message and "internal error (not your fault)" in forged.message


def test_results_that_change_between_repeats_fail():
    result = judge({"ok": True, "repeats_consistent": False})
    assert not result.passed and "different results" in result.message


def test_a_wrong_output_lists_its_first_mismatches():
    out = EXPECTED.astype(np.float32)
    out[-5:] = np.nan
    result = judge({"ok": True}, output=out)
    assert result.verdict == Verdict.WRONG_ANSWER and "never written" in result.message
    assert result.mismatches[0].index == [EXPECTED.size - 5] and result.unwritten_fraction > 0


def test_emulator_diagnostics_reach_the_case():
    diag = {"severity": "warning", "kind": "nram_near_capacity", "message": "95% of NRAM"}
    result = judge({"ok": True}, trace=[{**LAUNCH, "diagnostics": [diag]}])
    assert result.passed and result.diagnostics[0].kind == "nram_near_capacity"


def test_a_hang_or_a_load_failure_dooms_the_entry_but_a_wrong_answer_does_not():
    assert dooms_entry(CallOutcome(meta={"ok": False, "error_kind": "timeout", "error": "limit"}))
    assert dooms_entry(CallOutcome(meta={"ok": False, "error_kind": "load_failure", "error": "ImportError"}))
    assert dooms_entry(CallOutcome(meta={"ok": False, "error_kind": "crash", "during": "load", "error": "SIGSEGV"}))
    # Kinds are values: the old message text alone no longer decides anything.
    assert not dooms_entry(CallOutcome(meta={"ok": False, "error_kind": "python_exception",
                                             "error": "cannot import the submission: ImportError"}))
    assert not dooms_entry(CallOutcome(meta={"ok": False, "error_kind": "crash", "error": "SIGSEGV"}))
    assert not dooms_entry(CallOutcome(meta={"ok": True}))


def test_timing_samples_are_sanitised():
    meta = {"ok": True, "device_us": [12.5, -1, float("nan"), "7", True, 3], "wall_us": [99.0]}
    assert call_samples(meta, "modelled") == [12.5, 3.0]
    assert call_samples(meta, "host_clock") == [99.0]
    assert call_samples({"ok": False, "device_us": [1.0]}, "hardware") == []


def test_modelled_time_comes_from_the_trace_not_the_in_process_timer():
    from grader.orchestration.judge import modelled_samples
    from grader.results import TraceSummary

    trace = TraceSummary(kernel="k", device_profile="mlu370-x8", modelled_time_us=203.8)
    samples, note = modelled_samples("modelled", [0.001], trace)
    assert samples == [203.8] and "0.001" in note and "203.800" in note
    honest, quiet = modelled_samples("modelled", [203.8], trace)
    assert honest == [203.8] and quiet == ""
    hardware, _ = modelled_samples("hardware", [5.0], trace)
    assert hardware == [5.0]
    unverified, why = modelled_samples("modelled", [0.001], None)  # no verified launch: no time at all
    assert unverified == [] and "no verified launch" in why


# -- the disagreement policy (DESIGN.md "Confinement by construction"): the engine's account against the native one --


def replayed_call(output: np.ndarray | None, error: str | None = None):
    from grader.orchestration.replay import ReplayedCall

    twin = CASE.replay_twin(b"salt")
    return twin, ReplayedCall(twin=twin, output=output, error=error, engine="wasm")


def test_replay_accuses_names_what_would_cost_points_and_nothing_else():
    from grader.orchestration.judge import replay_accuses

    twin, good = replayed_call(None)
    good.output = REFERENCES["sigmoid"].compute(twin.make_inputs()["x"]).astype(np.float32)
    assert replay_accuses(SPEC, CASE, CallOutcome(meta={"ok": True}, output=EXPECTED.astype(np.float32), replayed=good)) is None
    _, wrong = replayed_call(np.zeros(CASE.output_shape, np.float32))
    said = replay_accuses(SPEC, CASE, CallOutcome(meta={"ok": True}, output=EXPECTED.astype(np.float32), replayed=wrong))
    assert said is not None and "fresh inputs" in said
    found = CallOutcome(meta={"ok": True}, output=EXPECTED.astype(np.float32), replayed=good, integrity=["wasm-trap: out of bounds"])
    assert replay_accuses(SPEC, CASE, found) == "wasm-trap: out of bounds"
    # a run already wrong on its own inputs: a wrong twin changes nothing (a finding on the trace still does)
    run_wrong = EXPECTED.astype(np.float32) + 1.0
    assert replay_accuses(SPEC, CASE, CallOutcome(meta={"ok": True}, output=run_wrong, replayed=wrong)) is None
    assert replay_accuses(SPEC, CASE, CallOutcome(meta={"ok": True}, output=run_wrong, replayed=wrong,
                                                  integrity=["forged"])) == "forged"
    # a call the run did not finish, or one whose journal ran into a budget, is not the replay's to accuse
    assert replay_accuses(SPEC, CASE, CallOutcome(meta={"ok": False}, replayed=wrong)) is None
    wrong.over_budget = True
    assert replay_accuses(SPEC, CASE, CallOutcome(meta={"ok": True}, output=EXPECTED.astype(np.float32), replayed=wrong)) is None


def test_a_disagreement_is_held_for_review_never_integrity_and_never_credited():
    _, wrong = replayed_call(np.zeros(CASE.output_shape, np.float32))
    got = CallOutcome(meta={"ok": True}, output=EXPECTED.astype(np.float32), trace=reading([LAUNCH]),
                      replayed=wrong, integrity=["the replay could not stand"], disagreement="it trapped")
    held = judge_call(SPEC, "sigmoid", CASE, got, EXPECTED, kernel_trace=True)
    assert held.verdict == Verdict.HELD_FOR_REVIEW and not held.passed
    assert "held for review" in held.message and "it trapped" in held.message
    # without the native replay's word, the same account is the engine's verdict
    got.disagreement = None
    assert judge_call(SPEC, "sigmoid", CASE, got, EXPECTED, kernel_trace=True).verdict == Verdict.INTEGRITY


def test_a_disagreement_on_a_wrong_run_is_judged_on_the_run_alone():
    out = EXPECTED.astype(np.float32) + 1.0
    _, wrong = replayed_call(np.zeros(CASE.output_shape, np.float32))
    got = CallOutcome(meta={"ok": True}, output=out, trace=reading([LAUNCH]), replayed=wrong,
                      integrity=["the replay could not stand"], disagreement="it trapped")
    result = judge_call(SPEC, "sigmoid", CASE, got, EXPECTED, kernel_trace=True)
    assert result.verdict == Verdict.WRONG_ANSWER and "held for review" not in result.message
