"""Pydantic models of an assignment spec (assignments/<name>/assignment.toml).

Every field has a default where one makes sense and a description, so the schema documents itself
(`grade spec schema` prints it). Unknown keys are rejected: a typo in a spec must not silently drop a check.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from grader.i18n import check_language

# the parts of a spec a results document carries (GradeResult.assignment_facts), defined beside it
from grader.results import MLU_OPS_TH as MLU_OPS_TH
from grader.results import AdviceText as AdviceText
from grader.results import AssignmentFacts, FeedbackSpec, Tolerance
from grader.spec.references import REFERENCES

DTypeName = Literal["float32", "float16"]
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Distribution(_Strict):
    """How input values are drawn; `special_values` are scattered in at `special_fraction` of positions."""

    kind: Literal["uniform", "normal"] = Field("uniform", description="uniform on [low, high) or normal(mean, std)")
    low: float = Field(-1.0, description="uniform: lower bound")
    high: float = Field(1.0, description="uniform: upper bound (exclusive)")
    mean: float = Field(0.0, description="normal: mean")
    std: float = Field(1.0, gt=0, description="normal: standard deviation")
    special_values: list[float] = Field(
        default_factory=list, description="values planted at random positions, e.g. saturation edges +-7.75")
    special_fraction: float = Field(0.0, ge=0, le=0.5, description="fraction of elements replaced by special values")

    @model_validator(mode="after")
    def _bounds(self) -> Distribution:
        if self.kind == "uniform" and not self.low < self.high:
            raise ValueError(f"uniform distribution needs low < high, got low={self.low}, high={self.high}")
        if self.special_fraction > 0 and not self.special_values:
            raise ValueError("special_fraction > 0 needs a non-empty special_values list")
        return self


class InputSpec(_Strict):
    name: str = Field(description="argument name, in call order")
    dims: list[str] = Field(min_length=1, description="symbolic dims, e.g. ['M', 'K']; cases give their values")
    distribution: Distribution = Field(default_factory=Distribution)

    @field_validator("name")
    @classmethod
    def _ident(cls, value: str) -> str:
        if not _IDENT.match(value):
            raise ValueError(f"input name {value!r} is not an identifier")
        return value


class CheckPolicy(_Strict):
    nan_inf: Literal["strict", "loose"] = Field(
        "strict", description="strict: NaN/Inf positions must match the reference exactly")
    zero_guard: bool = Field(True, description="fail an (almost) all-zero output when the reference is not")
    zero_guard_ratio: float = Field(
        1e-3, gt=0, lt=1, description="output counts as all-zero when sum|out| < ratio * sum|ref|")
    zero_guard_floor: float = Field(
        0.0, ge=0, description="reference elements below this magnitude are left out of the guard: values the "
        "hardware legitimately flushes to zero (sigmoid saturates to 0 below x = -7.75, sigmoid(-7.75) = 4.3e-4)")
    unwritten: bool = Field(True, description="elements still holding the NaN poison where the reference is finite fail")
    max_mismatches: int = Field(5, ge=1, le=100, description="first mismatches reported per case")
    run: list[str] | None = Field(
        None, description="the checks to run, by name (grader.checks.CHECKS, e.g. ['unwritten', 'nan_inf', "
        "'accuracy', 'zero_guard']), in this order; none: every check in its own order, less those switched off "
        "above. 'accuracy' always runs (its metrics are the case's DIFF1/2/3)")


class GroupSpec(_Strict):
    name: str
    description: str = ""
    points: float = Field(ge=0, description="correctness points for this case group")
    scoring: Literal["proportional", "all_or_nothing"] = Field(
        "proportional", description="proportional: points x passed/total over every (entry, case) run")
    gates_stages: bool = Field(
        True, description="true: a stage earns its performance points only when its entry passes every case "
        "of this group; false: the group's cases are still run on every stage that lists it and earn the "
        "group's points, but a failure costs only those (an optional extension such as fp16)")
    visibility: Literal["visible", "after_deadline"] = Field(
        "visible", description="after_deadline: on the course server (grade serve), a student sees this group's "
        "cases, and the points that depend on them, only after the [submission] due date (Gradescope's hidden "
        "tests); local and batch grading show everything")


class CaseSpec(_Strict):
    name: str = Field(description="unique within the assignment, e.g. 'prime_97x89x101'")
    group: str
    dims: dict[str, int] = Field(description="value of every symbolic dim, e.g. {M=97, K=89, N=101}")
    dtypes: list[DTypeName] = Field(default_factory=lambda: ["float32"], min_length=1)
    distribution: dict[str, Distribution] = Field(
        default_factory=dict, description="per-input override of the input's distribution")

    @field_validator("dims")
    @classmethod
    def _positive(cls, value: dict[str, int]) -> dict[str, int]:
        bad = {k: v for k, v in value.items() if v < 1}
        if bad:
            raise ValueError(f"dims must be >= 1, got {bad}")
        return value


class PerfSpec(_Strict):
    dims: dict[str, int]
    dtype: DTypeName = "float32"


class BuiltinCalled(_Strict):
    kind: Literal["builtin_called"] = "builtin_called"
    builtin: str = Field(description="e.g. __bang_matmul; counted by the emulator per launch")
    min_count: int = Field(1, ge=1)


class MinCores(_Strict):
    kind: Literal["min_cores"] = "min_cores"
    cores: int = Field(2, ge=1, description="distinct cores that ran the kernel")


class FuncType(_Strict):
    kind: Literal["func_type"] = "func_type"
    one_of: list[str] = Field(min_length=1, description="accepted launch types, e.g. ['UNION1', 'UNION2']")


class OnchipUsed(_Strict):
    kind: Literal["onchip_used"] = "onchip_used"
    memory: Literal["nram", "wram", "sram"]
    min_bytes: int = Field(1, ge=1)


Requirement = Annotated[BuiltinCalled | MinCores | FuncType | OnchipUsed, Field(discriminator="kind")]


class RequirementSpec(_Strict):
    name: str
    description: str = Field(description="shown to the student when it is not met")
    check: Requirement


class StageSpec(_Strict):
    name: str = Field(description="stage id; grade.toml [entries] keys use it")
    title: str
    points: float = Field(ge=0, description="performance points; need a fully correct entry under the threshold")
    groups: list[str] = Field(min_length=1, description="case groups this stage's entry is checked on")
    perf: PerfSpec
    slack: float = Field(1.5, ge=1.0, description="threshold = reference time x slack (see grade calibrate)")
    requirements: list[RequirementSpec] = Field(default_factory=list)
    hint: str | None = Field(None, description="the change that reaches this stage from the previous one; shown "
                             "when this stage is not reached yet (and after the previous stage when it is)")


class ScreeningSpec(_Strict):
    """What a finding of the host's static screening (grader.checks.screening) does to the grade."""

    action: Literal["zero_stages", "review"] = Field(
        "zero_stages", description="zero_stages: a finding withholds every stage's performance points (correctness "
        "points stand) and the report shows the lines; review: the points stand and the submission is flagged "
        "for an instructor to look at")


class IntegritySpec(_Strict):
    """What the host does where it cannot verify the sandbox's claims (grader.checks.kernel_use)."""

    unverified_kernel_use: Literal["zero_stages", "review"] = Field(
        "review", description="mlu backend without CNPAPI in the sandbox: no call can be checked for a kernel of "
        "the student's extension. review (default; the machine's gap, not the student's): the points stand and "
        "the grading says it is flagged for review; zero_stages: every stage's performance points are withheld")


# Torch operators a submission may run on mlu tensors around its kernels (issue 36): data movement, casts, fills,
# padding, concatenation, slicing, clamping and scaling. torch_mlu runs them on the card as CNNL kernels; the
# emulator's replay runs them itself on the twin's data (bang_harness/replay_ops.py). Anything else, e.g.
# sigmoid, exp, tanh, mm, matmul, bmm, einsum, linear, addmm, is never run by the replay: whatever it wrote is not
# the kernels' work, and an output holding it is not_using_kernel. Names are as the dispatcher sees them (views,
# reshapes and transposes move no data and never reach it; CompositeImplicit operators arrive decomposed).
DEFAULT_DEVICE_OPS = (
    "aten::copy_", "aten::clone", "aten::_to_copy", "aten::contiguous", "aten::fill_", "aten::zero_", "aten::zeros_like",
    "aten::ones_like", "aten::full_like", "aten::cat", "aten::stack", "aten::constant_pad_nd", "aten::pad",
    "aten::repeat", "aten::flip", "aten::roll", "aten::narrow_copy", "aten::clamp", "aten::clamp_", "aten::clamp_min",
    "aten::clamp_min_", "aten::clamp_max", "aten::clamp_max_", "aten::clip", "aten::clip_", "aten::hardtanh",
    "aten::hardtanh_", "aten::nan_to_num", "aten::nan_to_num_",
)
# Arithmetic allowed with at most one operand of more than one element: `x * 0.5`, `x + 1`, `-x`, never `x * y`.
DEFAULT_SCALAR_DEVICE_OPS = (
    "aten::mul", "aten::mul_", "aten::div", "aten::div_", "aten::add", "aten::add_", "aten::sub", "aten::sub_",
    "aten::rsub", "aten::neg", "aten::neg_",
)


class DeviceOpsSpec(_Strict):
    """Torch operators on the device that count as the submission's own device work (DEFAULT_DEVICE_OPS); its
    model_dump() is what the replay harness reads (bang_harness.replay_ops.OpPolicy.from_json)."""

    allowed: list[str] = Field(default_factory=lambda: list(DEFAULT_DEVICE_OPS), description="`aten::<op>` "
                               "(every overload) or `aten::<op>.<overload>`: operators a submission may run on mlu "
                               "tensors around its kernels; their result counts as device work")
    scalar_only: list[str] = Field(default_factory=lambda: list(DEFAULT_SCALAR_DEVICE_OPS), description="operators "
                                   "allowed only with at most one operand of more than one element (scaling)")

    @field_validator("allowed", "scalar_only")
    @classmethod
    def _names(cls, names: list[str]) -> list[str]:
        bad = [n for n in names if not re.fullmatch(r"aten::[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?", n)]
        if bad:
            raise ValueError(f"not ATen operator names: {bad}")
        return names


class SimilaritySpec(_Strict):
    """Code similarity across a batch (grader.batch.similarity): pairs listed on the dashboard for review."""

    threshold: float = Field(0.6, gt=0, le=1, description="list a pair when this share of one student's own (non-"
                             "template) code is found in the other's; `grade batch --similarity-threshold` overrides")
    min_shared: int = Field(50, ge=0, description="filtered characters (weighted by how few hold them: see "
                            "common_share) two students must share before a pair is "
                            "listed at all (a few common lines are no evidence)")
    noise_threshold: int = Field(25, ge=5, description="shortest match counted, in filtered characters (copydetect k)")
    guarantee_threshold: int = Field(30, ge=5, description="matches at least this long are always found (>= noise)")
    common_share: float = Field(0.5, gt=0, le=1, description="a passage found in more than this share of the class's "
                                "submissions (and in more than 3) counts as template, as MOSS's -m does: a "
                                "fill-in-the-blank lab needs no --template")
    starter: str = Field("starter", description="folder beside assignment.toml with the handout's files, subtracted "
                         "as template when it exists (besides `grade batch --template DIR`)")

    @model_validator(mode="after")
    def _window(self) -> SimilaritySpec:
        if self.guarantee_threshold < self.noise_threshold:
            raise ValueError("similarity: guarantee_threshold must be >= noise_threshold")
        return self


class SubmissionSpec(_Strict):
    """The course server's policy for uploads (grade serve); `grade serve --due/--late-hours/--late-penalty/--rate`
    override it."""

    due: datetime | None = Field(None, description="the deadline, a TOML date-time with its offset (e.g. "
                                 "2026-12-20T23:59:00+08:00); after_deadline groups are shown after it")
    late_hours: float = Field(0.0, ge=0, description="uploads after `due` are accepted this long, marked late; "
                              "after that they are refused (no attempt counted)")
    late_penalty: float = Field(0.0, ge=0, le=1, description="share of a late final submission's score taken off "
                                "in the exports")
    per_hour: int | None = Field(None, ge=1, description="uploads per student per hour (besides one in flight); "
                                 "more are refused with HTTP 429, no attempt counted")
    counts: Literal["latest", "best", "chosen"] = Field(
        "latest", description="which graded final submission of a student counts (exports, pages, leaderboard): "
        "the latest, the best (after any late penalty), or the one the student chose (the latest until they do)")

    @field_validator("due")
    @classmethod
    def _aware(cls, value: datetime | None) -> datetime | None:
        if value is not None and value.tzinfo is None:
            raise ValueError("due needs a UTC offset (e.g. 2026-12-20T23:59:00+08:00): whose midnight is it?")
        return value


class AssignmentSpec(_Strict):
    name: str
    title: str
    entry: str = Field(description="default entry function in the student's module, e.g. 'matmul'")
    signature: str = Field(description="for messages, e.g. 'matmul(a, b) -> Tensor'")
    reference: str = Field(description="float64 host reference, one of grader.spec.references.REFERENCES")
    inputs: list[InputSpec] = Field(min_length=1)
    output_dims: list[str] = Field(min_length=1, description="symbolic dims of the output")
    tolerances: dict[DTypeName, Tolerance]
    checks: CheckPolicy = Field(default_factory=CheckPolicy)
    groups: list[GroupSpec] = Field(min_length=1)
    cases: list[CaseSpec] = Field(min_length=1)
    stages: list[StageSpec] = Field(min_length=1)
    run_timeout_seconds: float = Field(600.0, gt=0, description="wall limit of one run phase")
    call_timeout_seconds: float = Field(60.0, gt=0, description="wall limit of one entry call (a hang fails there)")
    build_timeout_seconds: float = Field(
        300.0, gt=0, description="CPU seconds one compiler process may use; the build's wall limit is "
        "BUILD_WALL_FACTOR times this, so an honest build on a loaded host is not stopped by the load")
    similarity: SimilaritySpec = Field(default_factory=SimilaritySpec)
    screening: ScreeningSpec = Field(default_factory=ScreeningSpec)
    integrity: IntegritySpec = Field(default_factory=IntegritySpec)
    device_ops: DeviceOpsSpec = Field(default_factory=DeviceOpsSpec)
    feedback: FeedbackSpec = Field(default_factory=FeedbackSpec)
    submission: SubmissionSpec = Field(default_factory=SubmissionSpec)
    lang: str | None = Field(
        None, description="language of the students' feedback, en or zh (grade --lang overrides it); "
        "unset: the grading machine's locale")

    @field_validator("lang")
    @classmethod
    def _language(cls, value: str | None) -> str | None:
        return None if value is None else check_language(value)

    @model_validator(mode="after")
    def _consistent(self) -> AssignmentSpec:
        problems: list[str] = []
        if self.reference not in REFERENCES:
            problems.append(f"reference {self.reference!r} is unknown; known: {sorted(REFERENCES)}")
        if not _IDENT.match(self.entry):
            problems.append(f"entry {self.entry!r} is not a Python identifier")
        dims = {d for i in self.inputs for d in i.dims}
        missing_out = [d for d in self.output_dims if d not in dims]
        if missing_out:
            problems.append(f"output_dims {missing_out} appear in no input's dims {sorted(dims)}")
        group_names = [g.name for g in self.groups]
        problems += _duplicates("group", group_names)
        problems += _duplicates("case", [c.name for c in self.cases])
        problems += _duplicates("stage", [s.name for s in self.stages])
        used_groups: set[str] = set()
        for case in self.cases:
            if case.group not in group_names:
                problems.append(f"case {case.name!r}: group {case.group!r} is not declared in [[groups]] {group_names}")
            if set(case.dims) != dims:
                problems.append(f"case {case.name!r}: dims {sorted(case.dims)} must be exactly {sorted(dims)}")
            for dtype in case.dtypes:
                if dtype not in self.tolerances:
                    problems.append(f"case {case.name!r}: dtype {dtype} has no [tolerances.{dtype}]")
            unknown = set(case.distribution) - {i.name for i in self.inputs}
            if unknown:
                problems.append(f"case {case.name!r}: distribution for unknown inputs {sorted(unknown)}")
            used_groups.add(case.group)
        empty = [g for g in group_names if g not in used_groups]
        if empty:
            problems.append(f"groups {empty} have no cases")
        if all(g.visibility == "after_deadline" for g in self.groups):
            problems.append("every group is visibility = after_deadline: a student would see no case before it")
        unknown_tails = [g for g in self.feedback.tail_groups if g not in group_names]
        if unknown_tails:
            problems.append(f"feedback.tail_groups {unknown_tails} are not declared in [[groups]]")
        for stage in self.stages:
            for group in stage.groups:
                if group not in group_names:
                    problems.append(f"stage {stage.name!r}: group {group!r} is not declared in [[groups]]")
            if not self.gating_groups(stage) and all(g in group_names for g in stage.groups):
                problems.append(f"stage {stage.name!r}: every group it lists has gates_stages = false; at least one "
                                "must gate its speed points")
            if set(stage.perf.dims) != dims:
                problems.append(f"stage {stage.name!r}: perf dims {sorted(stage.perf.dims)} must be exactly {sorted(dims)}")
            if stage.perf.dtype not in self.tolerances:
                problems.append(f"stage {stage.name!r}: perf dtype {stage.perf.dtype} has no tolerance")
            if not _IDENT.match(stage.name):
                problems.append(f"stage name {stage.name!r} is not an identifier")
        if problems:
            raise ValueError("\n  - ".join(problems))
        return self

    def facts(self) -> AssignmentFacts:
        """What the report needs of this spec, carried in the results document (it renders from it alone)."""
        return AssignmentFacts(reference=self.reference, inputs=[i.name for i in self.inputs],
                               tolerances=dict(self.tolerances), feedback=self.feedback)

    @property
    def max_score(self) -> float:
        return sum(g.points for g in self.groups) + sum(s.points for s in self.stages)

    def hidden_groups(self) -> frozenset[str]:
        """The groups shown to a course server's students only after the deadline (or the instructor's release)."""
        return frozenset(g.name for g in self.groups if g.visibility == "after_deadline")

    def gating_groups(self, stage: StageSpec) -> set[str]:
        """The stage's groups whose every case its entry must pass before its speed counts."""
        gating = {g.name for g in self.groups if g.gates_stages}
        return {g for g in stage.groups if g in gating}

    def stage(self, name: str) -> StageSpec:
        for stage in self.stages:
            if stage.name == name:
                return stage
        raise KeyError(name)


def _duplicates(what: str, names: list[str]) -> list[str]:
    seen: set[str] = set()
    dup = sorted({n for n in names if n in seen or seen.add(n)})  # type: ignore[func-returns-value]
    return [f"duplicate {what} names {dup}"] if dup else []
