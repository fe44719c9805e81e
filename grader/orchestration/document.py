"""The results document of one grading: the one place a GradeResult is assembled from what a grading found,
whichever grading it was (an extension's pipeline, a folder of lab programs, one that could not start on this
machine, one the grader itself broke). Its totals (case groups plus stages), and, for a graded submission, its
verdict (the worst of its cases and stages) and summary line are computed here and nowhere else.

(grader.batch.jobs.failure_result records a job no grading produced a document for; the batch sits below
orchestration and assembles that one itself.)
"""

from __future__ import annotations

import tomllib
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from grader import __version__
from grader.backends import TimingSource, get_backend
from grader.i18n import _
from grader.orchestration.options import GradeEnvironment, GradeRequest
from grader.orchestration.score_stages import summary_line
from grader.results import CaseResult, GradeResult, GroupScore, Seeds, StageResult, Verdict, Versions, worst
from grader.scoring import group_scores
from grader.spec import AssignmentSpec, SeedPlan, SpecError, available_assignments, load_assignment


def result_document(root: Path, request: GradeRequest, environment: GradeEnvironment,
                    verdict: Verdict | None = None, message: str = "", *, notes: Sequence[str] = (),
                    spec: AssignmentSpec | None = None, cases: Sequence[CaseResult] = (),
                    stages: Sequence[StageResult] = (), groups: Sequence[GroupScore] | None = None,
                    assignment: str | None = None, assignment_title: str | None = None,
                    max_score: float | None = None, device: str | None = None, sandbox: str | None = None,
                    seeds: Seeds | None = None, versions: Versions | None = None,
                    started_at: datetime | None = None, **details: Any) -> GradeResult:
    """The document of grading `root` as `request` asked in `environment`.

    `verdict` None: graded, the verdict is the worst of `cases` and `stages` and `message` their summary line.
    `groups` None: the case groups of `spec` scored on `cases` (none without a spec). The score is the groups'
    points plus the stages'. `notes` follow the message, a line each. What is not given is the request's and
    the environment's (assignment, device, sandbox, seeds); `details` are the document's other fields
    (student, build, layout, integrity, device_peaks, assignment_facts, submission_hash ...)."""
    cases, stages = list(cases), list(stages)
    if verdict is None:
        verdict = worst([c.verdict for c in cases] + [s.verdict for s in stages])
        message = summary_line(verdict, cases, stages)
    groups = list(groups) if groups is not None else group_scores(spec, cases) if spec is not None else []
    now = datetime.now(UTC)
    return GradeResult(
        assignment=assignment or (spec.name if spec else (request.assignment or "unknown")),
        assignment_title=assignment_title if assignment_title is not None else _(spec.title) if spec else "",
        submission_path=str(root.resolve()),
        submission_hash=details.pop("submission_hash", ""),
        backend=environment.backend,
        device_profile=device if device is not None else (environment.device or ""),
        time_source=time_source(environment.backend),
        sandbox=sandbox or environment.sandbox,
        verdict=verdict,
        message="\n".join([message, *notes]).strip(),
        score=round(sum(g.points for g in groups) + sum(s.points for s in stages), 4),
        max_score=max_score if max_score is not None else spec.max_score if spec else 0.0,
        groups=groups,
        cases=cases,
        stages=stages,
        seeds=seeds or SeedPlan.create(request.seed_mode, request.seed).record(),
        versions=versions or Versions(grader=__version__),
        started_at=started_at or now,
        finished_at=now,
        **details,
    )


def time_source(backend: str) -> TimingSource:
    """The results document's time source is the backend's own (an unknown backend timed nothing modelled)."""
    try:
        return get_backend(backend).timing_source
    except ValueError:
        return "hardware"


def environment_error_result(submission: Path, request: GradeRequest, environment: GradeEnvironment,
                             problem: Exception) -> GradeResult:
    """The document of a grading that could not start on this machine: Verdict.ENVIRONMENT_ERROR, nothing
    run, nothing scored; the message names the command that fixes it (environment.EnvironmentProblem)."""
    name = request.assignment
    if name is None:
        try:
            name = tomllib.loads((submission / "grade.toml").read_text(encoding="utf-8")).get("assignment")
        except (OSError, ValueError):
            name = None
    max_score = 0.0
    if isinstance(name, str) and name in available_assignments():
        try:
            max_score = load_assignment(name).max_score
        except SpecError:
            pass
    return result_document(submission, request, environment, Verdict.ENVIRONMENT_ERROR,
                           _("not graded: this machine cannot run the sandbox.") + f" {problem}",
                           assignment=name if isinstance(name, str) else "unknown", max_score=max_score)
