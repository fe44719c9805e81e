"""Call planning: the correctness cases per entry, one timed call per stage, the probes and re-timing rounds."""

from __future__ import annotations

from dataclasses import dataclass

from grader.backends import Backend
from grader.spec import AssignmentSpec, ConcreteCase, SeedPlan, correctness_cases, perf_case


@dataclass
class PlannedCall:
    id: str
    entry: str
    case: ConcreteCase
    stage: str | None = None  # set for a stage's timed call
    warmup: int = 0
    timed_repeats: int = 0
    tag: str = ""  # the seed's prefix when several seeds' calls share a round (ids and input files stay apart)

    @property
    def label(self) -> str:
        return f"timing stage {self.stage}" if self.stage else f"case {self.case.name} ({self.entry})"

    @property
    def invocations(self) -> int:
        # The harness times the checked call itself when there is no warm-up (bang_harness.worker).
        return 1 + self.warmup + self.timed_repeats - (1 if self.warmup == 0 and self.timed_repeats else 0)


def plan_calls(spec: AssignmentSpec, seeds: SeedPlan, entries: dict[str, str], stages: list[str],
               backend: Backend, tag: str = "") -> list[PlannedCall]:
    """`tag` prefixes every id: the calls of several seeds in one round (grade_on_seeds)."""
    calls: list[PlannedCall] = []
    by_entry: dict[str, set[str]] = {}
    for stage in stages:
        by_entry.setdefault(entries[stage], set()).update(spec.stage(stage).groups)
    for entry, groups in by_entry.items():
        for case in correctness_cases(spec, seeds, groups):
            calls.append(PlannedCall(id=f"{tag}c{len(calls)}", entry=entry, case=case, tag=tag))
    for stage in stages:
        calls.append(PlannedCall(id=f"{tag}p{len(calls)}", entry=entries[stage], stage=stage,
                                 case=perf_case(spec, stage, seeds), tag=tag,
                                 warmup=backend.warmup, timed_repeats=backend.timed_repeats))
    return calls


def probe_calls(calls: list[PlannedCall]) -> list[PlannedCall]:
    """The first correctness call of each entry (its smallest case), per seed when several share the round."""
    return list({(c.tag, c.entry): c for c in reversed([c for c in calls if c.stage is None])}.values())


def retime_calls(spec: AssignmentSpec, seeds: SeedPlan, pending: list[PlannedCall], round_index: int,
                 backend: Backend) -> list[PlannedCall]:
    """Round `round_index` of a stage's timing: the perf case with fresh inputs, one warm-up."""
    return [PlannedCall(id=f"r{round_index}_{c.id}", entry=c.entry, stage=c.stage, warmup=1, tag=c.tag,
                        timed_repeats=backend.timed_repeats,
                        case=perf_case(spec, c.stage, seeds, repeat=round_index))  # type: ignore[arg-type]
            for c in pending]
