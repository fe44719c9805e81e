"""Which planned calls run, and when: a short probe per entry first, no more calls for an entry the probe
doomed, timing only where it can score, and on hardware more rounds until each stage's times settle. On the
emulator the stages are timed while the correctness rounds are replayed (time_beside_the_replay), with the
same stages timed and the same results as one after the other."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from grader.i18n import _
from grader.orchestration.execute import Executor
from grader.orchestration.judge import CallOutcome, call_samples, dooms_entry
from grader.orchestration.plan import PlannedCall, probe_calls, retime_calls
from grader.orchestration.score_stages import Scorer
from grader.results import CaseResult
from grader.scoring.timing import MAX_ROUNDS, settled
from grader.spec import SeedPlan

PROBE_TIMEOUT_SECONDS = 20.0  # the probe runs the smallest case: a healthy kernel needs well under a second


@dataclass
class Ran:
    outcomes: dict[str, CallOutcome]
    judged: dict[str, CaseResult]
    samples: dict[str | None, list[float]]  # stage -> its timing samples in µs


def run_calls(executor: Executor, scorer: Scorer, seeds: SeedPlan, calls: list[PlannedCall], work: Path) -> Ran:
    return run_seeds_calls(executor, scorer, [(seeds, calls)], work)[0]


def run_seeds_calls(executor: Executor, scorer: Scorer, planned: list[tuple[SeedPlan, list[PlannedCall]]],
                    work: Path) -> list[Ran]:
    """Several seeds' calls (each seed's ids tagged apart) in the same three rounds: probe, correctness, perf.
    Every decision stays per seed -- its own probes, its own dooms, its stages timed on its own judgements -- so
    each seed's result is the one it would get alone; only the sandboxes and replays are shared (seed sweeps)."""
    calls = [c for _seeds, mine in planned for c in mine]
    beside = executor.backend.impl.kernel_trace  # the emulator: time the stages beside the correctness replay
    outcomes = run_correctness(executor, calls, work, settle=not beside)
    if beside:
        judged_all, timed, perf = time_beside_the_replay(executor, scorer, planned, outcomes, work)
    else:
        judged_all = {c.id: scorer.judge(c, outcomes[c.id]) for c in calls if c.id in outcomes}
        timed = stages_to_time(scorer, planned, judged_all)
        executor.progress(_("timing {n} stage(s)").format(n=sum(len(t) for t in timed)), 0.7)
        perf = executor.run([c for t in timed for c in t], work / "io-perf", (0.7, 0.9))
    outcomes |= perf
    executor.progress(_("scoring"), 0.9)
    source = executor.backend.time_source
    ran = []
    for index, ((seeds, mine), mine_timed) in enumerate(zip(planned, timed, strict=True)):
        judged = {c.id: judged_all[c.id] for c in mine if c.id in judged_all}
        judged |= {c.id: scorer.judge(c, outcomes[c.id]) for c in mine_timed}
        samples = {c.stage: call_samples(outcomes[c.id].meta, source) if c.id in outcomes else []
                   for c in mine if c.stage is not None}
        if executor.backend.impl.retimes:
            more_rounds(executor, scorer, seeds, mine_timed, judged, samples,
                        work if len(planned) == 1 else work / f"retime{index}")
        ran.append(Ran({c.id: outcomes[c.id] for c in mine if c.id in outcomes}, judged, samples))
    return ran


def stages_to_time(scorer: Scorer, planned: list[tuple[SeedPlan, list[PlannedCall]]],
                   judged: dict[str, CaseResult]) -> list[list[PlannedCall]]:
    """Per seed, its stages' timed calls worth running, from its correctness calls as `judged`. Speed is measured
    only where it can score: a stage whose entry already fails a case earns nothing, and a broken kernel at the
    perf shape would only burn time."""
    timed = []
    for _seeds, mine in planned:
        mine_judged = {c.id: judged[c.id] for c in mine if c.id in judged}  # each seed on its own judgements
        timed.append([c for c in mine if c.stage is not None and scorer.entry_correct(c, mine_judged)])
    return timed


def time_beside_the_replay(executor: Executor, scorer: Scorer, planned: list[tuple[SeedPlan, list[PlannedCall]]],
                           outcomes: dict[str, CallOutcome], work: Path
                           ) -> tuple[dict[str, CaseResult], list[list[PlannedCall]], dict[str, CallOutcome]]:
    """The emulator: the correctness rounds (`outcomes`, read from the run alone) are replayed in a thread while
    the stages are timed in the run sandbox, chosen from the run's own outputs -- a stage the replay lets be timed
    passes there too (judge.passes_on_the_run): the replay can only take stages away. Once the replay has spoken
    (`outcomes` updated in place) the stages are chosen again as ever; when the guess was more than that, its
    round is dropped whole, notes included, and the stages that can score are timed on their own, as they would
    have been after the replay: a call the grading would not have run has no say in their round.
    Returns the correctness calls judged, the timed calls per seed and their outcomes."""
    ran_alone = {c.id: scorer.judge_run(c, outcomes[c.id]) for _seeds, mine in planned for c in mine
                 if c.id in outcomes}
    guess = stages_to_time(scorer, planned, ran_alone)
    replaying = executor.settle_beside()
    executor.progress(_("timing {n} stage(s)").format(n=sum(len(t) for t in guess)), 0.7)
    try:
        with executor.holding_notes() as held:
            perf = executor.run([c for t in guess for c in t], work / "io-perf", (0.7, 0.9))
    except BaseException:
        if replaying is not None:
            replaying.join()  # nothing of it outlives the grading's folders
        raise
    if replaying is not None:
        outcomes |= replaying.result()
    judged = {c.id: scorer.judge(c, outcomes[c.id]) for _seeds, mine in planned for c in mine if c.id in outcomes}
    timed = stages_to_time(scorer, planned, judged)
    if [[c.id for c in t] for t in timed] == [[c.id for c in t] for t in guess]:
        executor.say(held)
        return judged, timed, perf
    executor.progress(_("timing {n} stage(s)").format(n=sum(len(t) for t in timed)), 0.8)
    return judged, timed, executor.run([c for t in timed for c in t], work / "io-perf-again", (0.8, 0.9))


def run_correctness(executor: Executor, calls: list[PlannedCall], work: Path,
                    settle: bool = True) -> dict[str, CallOutcome]:
    """Probe: one tiny case per entry (per seed) under a short limit first. An entry that hangs or cannot even be
    loaded would fail every other call the same way, one full time limit each; those are not run. `settle`
    False: on the emulator the rounds are left to the caller's settle, their outcomes read from the run alone."""
    probes = probe_calls(calls)
    executor.progress(_("probing {n} entry function(s)").format(n=len(probes)), 0.3)
    # The probe's replay is deferred into the next round's (its error kinds decide the dooms; one sandbox less).
    outcomes = executor.run(probes, work / "io-probe", (0.3, 0.35), call_timeout=PROBE_TIMEOUT_SECONDS,
                            defer_replay=True)
    executor.start_replays(work)  # torch is imported in the run sandbox by now: the replay's start-up beside the round
    doomed = {(c.tag, c.entry): outcomes[c.id] for c in probes if dooms_entry(outcomes[c.id])}
    rest = [c for c in calls if c.id not in outcomes and (c.tag, c.entry) not in doomed and c.stage is None]
    executor.progress(_("running {n} correctness calls").format(n=len(rest)), 0.35)
    if rest:
        outcomes |= executor.run(rest, work / "io", (0.35, 0.7), defer_replay=not settle)
    elif settle:
        outcomes |= executor.settle(work / "io-probe-replay")
    for call in calls:
        if call.id not in outcomes and (call.tag, call.entry) in doomed and call.stage is None:
            first = doomed[(call.tag, call.entry)].meta or {}
            outcomes[call.id] = CallOutcome(meta={**first, "error": _(
                "not run: {entry}() already failed on its first case -- {error}").format(
                    entry=call.entry, error=first.get("error", ""))})
    return outcomes


def more_rounds(executor: Executor, scorer: Scorer, seeds: SeedPlan, perf_calls: list[PlannedCall],
                judged: dict[str, CaseResult], samples: dict[str | None, list[float]], work: Path) -> None:
    """Hardware timing: more rounds of fresh inputs until each stage's spread settles or the budget ends
    (adds to `samples`)."""
    for round_index in range(1, MAX_ROUNDS):
        pending = [c for c in perf_calls if judged[c.id].passed and not settled(samples[c.stage])]
        if not pending:
            break
        again = retime_calls(scorer.spec, seeds, pending, round_index, executor.backend.impl)
        results = executor.run(again, work / f"io-round{round_index}", (0.9, 0.9))
        for call in again:
            if scorer.judge(call, results[call.id]).passed:
                samples[call.stage] += call_samples(results[call.id].meta, executor.backend.time_source)
