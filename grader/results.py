"""The results document: what one grading run decided, as a versioned JSON schema.

Everything here is decided on the host. Reports, batch exports and the CLI read only this.
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any, Literal, NamedTuple

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    computed_field,
    model_validator,
)

from grader.i18n import N_, _

SCHEMA_VERSION = "1.0"
# Where a grading's times come from: the cost model (emu) or a device clock (mlu). A backend's `timing_source`.
TimingSource = Literal["modelled", "hardware"]


class Verdict(StrEnum):
    """Verdict taxonomy, worst first: the overall verdict is the worst one seen."""

    ENVIRONMENT_ERROR = "environment_error"  # the machine cannot grade (no sandbox); nothing was run
    INTERNAL_ERROR = "internal_error"  # the grader itself failed; never the student's fault
    # the grader's two replays of the kernels disagree on a call (DESIGN.md "Confinement by construction"): the
    # grade waits for a person; never the student's fault, never credited either
    HELD_FOR_REVIEW = "held_for_review"
    UNGRADABLE_LAYOUT = "ungradable_layout"  # files missing or misplaced; nothing was built
    COMPILE_ERROR = "compile_error"
    INTEGRITY = "integrity"  # the sandbox's claims do not add up (forged trace, output not written by a kernel)
    NOT_USING_KERNEL = "not_using_kernel"  # wrapper computes on the host / kernel never launches
    TIMEOUT = "timeout"
    CRASH = "crash"  # process died (signal) or exited non-zero
    RUNTIME_ERROR = "runtime_error"  # emulator check fired: out-of-bounds, overflow, missing sync ...
    WRONG_ANSWER = "wrong_answer"
    TOO_SLOW = "too_slow"
    PASSED = "passed"

    @property
    def severity(self) -> int:
        return list(Verdict).index(self)


class VerdictWords(NamedTuple):
    """A verdict's names for people, untranslated (msgids); verdict_words() gives them in the active language."""

    label: str  # the CLI, exports, messages: "wrong answer"
    title: str  # the report's headline pill: "Wrong answer"
    cell: str  # the report's narrow case-table cell: "fail"


# The one place verdicts are named for people; the values of Verdict are the machine names in the JSON.
_VERDICT_WORDS: dict[Verdict, VerdictWords] = {
    Verdict.ENVIRONMENT_ERROR: VerdictWords(N_("environment error"), N_("Cannot grade on this machine"),
                                            N_("setup")),
    Verdict.INTERNAL_ERROR: VerdictWords(N_("internal error"), N_("Grader error"), N_("grader")),
    Verdict.HELD_FOR_REVIEW: VerdictWords(N_("held for review"), N_("Held for review"), N_("review")),
    Verdict.UNGRADABLE_LAYOUT: VerdictWords(N_("ungradable layout"), N_("Not gradable"), N_("layout")),
    Verdict.COMPILE_ERROR: VerdictWords(N_("compile error"), N_("Compile error"), N_("build")),
    Verdict.INTEGRITY: VerdictWords(N_("integrity"), N_("Results do not add up"), N_("integrity")),
    Verdict.NOT_USING_KERNEL: VerdictWords(N_("not using kernel"), N_("Kernel not used"), N_("no kernel")),
    Verdict.TIMEOUT: VerdictWords(N_("timeout"), N_("Timed out"), N_("timeout")),
    Verdict.CRASH: VerdictWords(N_("crash"), N_("Crashed"), N_("crash")),
    Verdict.RUNTIME_ERROR: VerdictWords(N_("runtime error"), N_("Runtime error"), N_("error")),
    Verdict.WRONG_ANSWER: VerdictWords(N_("wrong answer"), N_("Wrong answer"), N_("fail")),
    Verdict.TOO_SLOW: VerdictWords(N_("too slow"), N_("Correct, not yet fast enough"), N_("slow")),
    Verdict.PASSED: VerdictWords(N_("passed"), N_("Passed"), N_("pass")),
}


def verdict_words(verdict: Verdict | str) -> VerdictWords:
    """The verdict's names in the active language."""
    return VerdictWords(*(_(word) for word in _VERDICT_WORDS[Verdict(verdict)]))


def verdict_label(verdict: Verdict | str) -> str:
    """The verdict's display name in the active language (CLI, exports, messages)."""
    return verdict_words(verdict).label


def worst(verdicts: list[Verdict]) -> Verdict:
    return min(verdicts, key=lambda v: v.severity) if verdicts else Verdict.PASSED


class Student(BaseModel):
    id: str = "anonymous"
    name: str = ""


class SourceLocation(BaseModel):
    file: str | None = None
    line: int | None = None


class EmuDiagnostic(BaseModel):
    """One warning or error the emulator reported (checks real hardware never gives)."""

    severity: Literal["error", "warning", "note"] = "error"
    kind: str = Field(description="machine name, e.g. gdram_oob_write, nram_overflow, async_hazard, barrier_deadlock")
    message: str
    kernel: str | None = None
    location: SourceLocation = Field(default_factory=SourceLocation)


TIMELINE_LANES = ("issue", "compute", "io", "move")  # per core: scalar stream, vector/tensor queue, DMA queues
TIMELINE_KINDS = ("scalar", "load", "store", "move", "vector", "tensor", "sync", "barrier")
TIMELINE_MAX_EVENTS = 1000  # the emulator's own cap per launch record (runtime/exec.cpp kLaunchEvents)


class TimelineEvent(NamedTuple):
    core: int
    lane: str  # one of TIMELINE_LANES
    kind: str  # one of TIMELINE_KINDS
    start: int  # cycles from the launch's first task (launch overhead excluded)
    end: int


def _event_from_text(value: Any) -> Any:
    if isinstance(value, str):
        core, lane, kind, start, end = value.split()
        return TimelineEvent(int(core), lane, kind, int(start), int(end))
    return value


# In the JSON one line per event, "core lane kind start end" ("3 io load 1218 5634"): a fifth of the size of an
# indented five-element list, for documents that carry a thousand events a stage.
TimelineEventField = Annotated[TimelineEvent, BeforeValidator(_event_from_text),
                               PlainSerializer(lambda ev: f"{ev.core} {ev.lane} {ev.kind} {ev.start} {ev.end}",
                                               return_type=str, when_used="json")]


class Timeline(BaseModel):
    """The modelled per-core timeline of one launch (a stage's longest), from the replay's verified trace: busy
    intervals of each core's units. UNIONn cores are numbered cluster * 5 + role (role 4: the memory core)."""

    kernel: str
    clock_mhz: float
    makespan_cycles: int
    merged_within_cycles: int = Field(0, description="same-kind neighbours closer than this were merged (0: none)")
    union: int = Field(0, description="0 for BLOCK, n for UNIONn")
    cores: int = Field(description="cores on the card, as numbered in events")
    events: list[TimelineEventField] = Field(default_factory=list,
                                             description='"core lane kind start end", cycles')

    def core_label(self, core: int) -> tuple[int | None, int | None]:
        """(cluster, core in cluster; 4 = memory core) for UNIONn; (None, core) for BLOCK."""
        return (core // 5, core % 5) if self.union else (None, core)


class TorchOp(BaseModel):
    """A torch operator on the device, as the replay ran it (per invocation of the entry)."""

    op: str = Field(description="ATen name, e.g. aten::cat or aten::copy_ (a cast)")
    where: str = Field("", description="the student's line that called it (file:line), where known")
    count: int = 1
    modelled_us: float = Field(description="modelled time per invocation: its bytes through GDRAM plus a launch")
    allowed: bool = True


class TraceSummary(BaseModel):
    """Per-launch emulator trace, summarised (the emulator's trace JSON, read on the host under a size cap)."""

    kernel: str
    dim: tuple[int, int, int] = (1, 1, 1)
    func_type: str = "BLOCK"
    device_profile: str
    modelled_time_us: float
    time_split_us: dict[str, float] = Field(default_factory=dict, description="scalar/vector/tensor/io/wait")
    bytes_moved: dict[str, int] = Field(default_factory=dict, description="per direction, e.g. GDRAM2NRAM")
    onchip_peak_bytes: dict[str, int] = Field(default_factory=dict, description="nram/wram/sram peak use")
    onchip_capacity_bytes: dict[str, int] = Field(default_factory=dict)
    builtin_counts: dict[str, int] = Field(default_factory=dict)
    cores_used: int = 1
    launches: int = 1
    diagnostics: list[EmuDiagnostic] = Field(default_factory=list)
    timeline: Timeline | None = Field(None, description="modelled per-core timeline of the longest launch")
    torch_ops: list[TorchOp] = Field(default_factory=list, description="torch operators the replay ran on the "
                                     "device around the kernels (issue 36), in the order of their first run")


class ScreeningFinding(BaseModel):
    """An escape hatch found by the host's static screening of the sources, before anything is built."""

    rule: str = Field(description="machine name, e.g. inline_asm, dlopen, ctypes, emu_env, io_path")
    message: str
    file: str = Field(description="path relative to the submission root")
    line: int
    source_line: str = ""
    action: Literal["zero_stages", "review"] = Field(
        "zero_stages", description="what assignment.toml says a finding does: zero the stage points or flag")


class SourceExcerpt(BaseModel):
    """Lines of a submission file around a compiler error or an emulator diagnostic, for the report."""

    file: str = Field(description="path relative to the submission root")
    first_line: int = Field(description="1-based number of lines[0]")
    lines: list[str] = Field(default_factory=list)


class DevicePeaks(BaseModel):
    """Peak figures of a device over all its cores; source says where they come from. One class for the
    roofline floor (grader.scoring.roofline) and the report's roofline chart (grader.reporting.devices), both
    built by `from_figures` from the one device table (sandbox/bang_emu/devices.json)."""

    gdram_gbps: float
    tensor_gflops: float | None = Field(None, description="fp32 __bang_matmul peak over all cores")
    tensor_gflops_fp16: float | None = Field(None, description="fp16 __bang_matmul peak over all cores")
    vector_gflops: float | None = Field(None, description="fp32 vector-unit peak over all cores")
    clock_ghz: float | None = None
    cores: int | None = None
    source: str = ""

    @classmethod
    def from_figures(cls, figures: dict[str, float], source: str = "") -> DevicePeaks:
        """From a device-table entry (bang_emu.devices): per-cycle rates times cores times clock."""
        ghz = figures["clock_mhz"] / 1e3
        cores = int(figures["cores"])
        fp16 = figures.get("tensor_ops_per_cycle_fp16")
        return cls(gdram_gbps=figures["gdram_gbps"], tensor_gflops=figures["tensor_ops_per_cycle_fp32"] * cores * ghz,
                   tensor_gflops_fp16=fp16 * cores * ghz if fp16 else None,
                   vector_gflops=figures["vector_bytes_per_cycle"] / 4 * cores * ghz,  # one fp32 element per lane
                   clock_ghz=ghz, cores=cores, source=source)

    @classmethod
    def for_device(cls, device: str) -> DevicePeaks | None:
        """The peaks no kernel beats on `device` (bang_emu.devices.peaks: per figure the higher of the published
        card's and the cost model's, e.g. the MLU370-X8 at its top 1.3 GHz although the model runs at the lab's
        1.0 GHz): what the roofline floor scores with, what a result records, what the report draws. None: a
        device the table does not know (a card index)."""
        from bang_emu import devices  # standard library only; the emulator sits below everything

        figures = devices.peaks(device)
        if figures is None:
            return None
        source = devices.published(device).get("source", "")
        return cls.from_figures(figures, f"devices.json at {figures['clock_mhz'] / 1e3:.1f} GHz, the higher of "
                                         f"published and model; {source}")

    def unit_gflops(self, unit: str, dtype: str) -> float | None:
        """The peak of the tensor or vector unit for a dtype (half: twice the fp32 lanes; unknown: the highest)."""
        if unit == "tensor":
            rates = {"float32": self.tensor_gflops, "float16": self.tensor_gflops_fp16 or self.tensor_gflops}
        else:
            rates = {"float32": self.vector_gflops, "float16": 2 * self.vector_gflops if self.vector_gflops else None}
        known = [r for r in rates.values() if r]
        return rates.get(dtype) or (max(known) if known else None)


class CaseFinding(BaseModel):
    """A failed check on one case: which check (grader.checks.CHECKS' NAME), what it found (an advice registry
    kind: unwritten_output, nan_output, zero_output, precision, wrong_values ...) and its message."""

    check: str
    kind: str
    message: str = ""


class Mismatch(BaseModel):
    index: list[int]
    expected: float | None
    actual: float | None  # None when the element was never written (still holds the poison)


class CaseResult(BaseModel):
    name: str
    group: str
    entry: str
    shapes: dict[str, list[int]] = Field(description="input name -> shape")
    dtype: str
    verdict: Verdict
    passed: bool
    diff1: float | None = None
    diff2: float | None = None
    diff3: float | None = None
    max_abs_error: float | None = None
    unwritten_fraction: float | None = None
    nan_inf_mismatch: int = 0
    findings: list[CaseFinding] = Field(default_factory=list, description="the failed checks, in the order they ran")
    mismatches: list[Mismatch] = Field(default_factory=list, description="first few, in index order")
    mismatch_count: int | None = Field(None, description="all mismatching elements, not just the listed ones")
    element_count: int | None = Field(None, description="elements in the output")
    message: str = ""
    diagnostics: list[EmuDiagnostic] = Field(default_factory=list)
    wall_seconds: float | None = None


class GroupScore(BaseModel):
    name: str
    description: str = ""
    points: float
    points_possible: float
    passed_cases: int
    total_cases: int


class Timing(BaseModel):
    source: Literal["modelled", "hardware", "host_clock"]
    median_us: float
    min_us: float
    max_us: float
    spread: float = Field(description="(p75-p25)/median, relative")
    repeats: int
    floor_us: float | None = Field(None, description="roofline floor: bytes/peak bandwidth, flops/peak")
    below_floor: bool = False
    achieved_gbps: float | None = None
    achieved_gflops: float | None = None


class RequirementResult(BaseModel):
    name: str
    description: str
    passed: bool
    detail: str = ""


class StageResult(BaseModel):
    name: str
    title: str
    entry: str
    points: float
    points_possible: float
    correct: bool
    verdict: Verdict
    message: str = ""
    perf_shape: dict[str, list[int]] = Field(default_factory=dict)
    timing: Timing | None = None
    threshold_us: float | None = None
    reference_us: float | None = None
    requirements: list[RequirementResult] = Field(default_factory=list)
    trace: TraceSummary | None = None
    next_step: str | None = Field(None, description="the one change most likely to reach the next stage")


class BuildInfo(BaseModel):
    ok: bool
    toolchain: str = Field(description="e.g. cncc-emu 0.1 (g++ 12.2) or cncc 4.x")
    compiler_output: str = ""
    duration_seconds: float = 0.0
    cached: bool = False
    cache_key: str | None = None


class Seeds(BaseModel):
    mode: Literal["public", "secret"]
    master: str | None = Field(None, description="the master seed; withheld (None) in secret mode")
    master_digest: str = Field(description="sha256 prefix of the master seed, so a run can be matched later")


class Versions(BaseModel):
    grader: str
    toolchain: str = ""
    image: str = ""
    torch: str = ""
    python: str = ""
    device_driver: str = ""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# mlu-ops' th per dtype: below it DIFF3 is an absolute error, above it relative (its evaluator's EPSILON_FLOAT/HALF)
MLU_OPS_TH = {"float32": 1e-6, "float16": 1e-4}


class Tolerance(_Strict):
    """mlu-ops accuracy criteria (MLU-OPS-Accuracy-Acceptance-Standard); None switches a metric off."""

    diff1: float | None = Field(None, ge=0, description="sum|e-b| / sum|b|")
    diff2: float | None = Field(None, ge=0, description="sqrt(sum (e-b)^2 / sum b^2)")
    diff3: float | None = Field(None, ge=0, description="max point error: absolute where |b| < th, else relative")
    diff3_2: float | None = Field(None, ge=0, description="max |e-b|: catches a single wrong element")
    tiny: float | None = Field(
        None, gt=0, description="reference magnitude below which DIFF1/DIFF2 judge an element's absolute error: "
        "each |b| in their denominators counts as at least this (unset: mlu-ops' th, 1e-6 fp32, 1e-4 fp16), so a "
        "case whose reference is all near zero never divides by almost nothing; derive it from the builtin's "
        "documented absolute error: tiny >= that error / diff1")

    def floor(self, dtype: str) -> float:
        """The magnitude each |reference| counts as at least in DIFF1/DIFF2: `tiny`, else mlu-ops' th."""
        return self.tiny if self.tiny is not None else MLU_OPS_TH.get(dtype, MLU_OPS_TH["float32"])

    @model_validator(mode="after")
    def _something(self) -> Tolerance:
        if all(v is None for v in (self.diff1, self.diff2, self.diff3, self.diff3_2)):
            raise ValueError("a tolerance must set at least one of diff1, diff2, diff3, diff3_2")
        return self


class AdviceText(_Strict):
    """An assignment's own text for one finding kind; each field given replaces the generic one."""

    title: str | None = None
    advice: str | None = None
    action: str | None = None
    snippet: str | None = None
    case_hint: str | None = None


class FeedbackSpec(_Strict):
    """What the report says about this assignment beyond the generic advice (grader/reporting/advice.py)."""

    tail_groups: list[str] = Field(
        default_factory=list, description="groups whose cases exercise remainder handling: when only they fail, "
        "the report says the remainder is lost")
    alignment: int = Field(
        64, ge=1, description="elements: a case with a dim that is not a multiple of it is a tail case too")
    advice: dict[str, AdviceText] = Field(
        default_factory=dict, description="finding kind (e.g. wrong_values, precision, fp16_only, use_builtin) "
        "-> text replacing the generic advice for this assignment")


class AssignmentFacts(BaseModel):
    """What the report says of the assignment, carried in the document: it renders from the document alone,
    whatever assignment.toml says (or whether it exists) where it is rendered. None in documents from before
    grader 0.2: their report gives the generic advice and no achieved rates (render.py says so)."""

    reference: str = Field(description="the operator (grader.spec.references): the achieved rates' work")
    inputs: list[str] = Field(description="the operator's inputs, in call order")
    tolerances: dict[str, Tolerance] = Field(default_factory=dict, description="dtype -> the criteria cases were "
                                             "judged by (the report tells a builtin's documented error from them)")
    feedback: FeedbackSpec = Field(default_factory=lambda: FeedbackSpec(), description="the assignment's [feedback]")


class GradeResult(BaseModel):
    schema_version: str = SCHEMA_VERSION
    student: Student = Field(default_factory=Student)
    assignment: str
    assignment_title: str = ""
    submission_path: str
    submission_hash: str
    backend: str = Field(description="the backend graded on: emu, mlu (a module of grader/backends)")
    device_profile: str
    time_source: TimingSource = Field(description="the backend's timing_source: modelled (emulator) or hardware")
    sandbox: str = Field(description="docker / bwrap / process")
    verdict: Verdict
    message: str = ""
    score: float
    max_score: float
    pending_points: float = Field(0.0, description="points this view withholds until hidden cases are released "
                                                   "(a student's view before the deadline: score and max_score "
                                                   "are the visible groups'; the whole is max_score + this)")
    groups: list[GroupScore] = Field(default_factory=list)
    cases: list[CaseResult] = Field(default_factory=list)
    stages: list[StageResult] = Field(default_factory=list)
    build: BuildInfo | None = None
    layout: str = Field("handout", description="the submission layout found (handout, aics_exp_5_1, ...)")
    screening: list[ScreeningFinding] = Field(default_factory=list)
    integrity: list[str] = Field(default_factory=list,
                                 description="what did not add up in the sandbox's claims (one line each)")
    device_peaks: DevicePeaks | None = Field(None, description="None: the report uses its own profile table")
    assignment_facts: AssignmentFacts | None = Field(None, description="the assignment as the report needs it")
    source_excerpts: list[SourceExcerpt] = Field(
        default_factory=list, description="submission lines around errors; empty: the report reads them from submission_path"
    )
    seeds: Seeds
    versions: Versions
    lang: str = Field("en", description="the language of the messages: en or zh (grader/i18n.py)")
    started_at: datetime = Field(default_factory=lambda: datetime.now(UTC))
    finished_at: datetime | None = None

    @model_validator(mode="before")
    @classmethod
    def _time_source_from_flag(cls, data: Any) -> Any:
        """Documents written before `time_source` carry the flag alone; it is read once here and dumped again
        only as the computed field below (a document carries both: the flag is dropped, the field kept)."""
        if isinstance(data, dict) and "time_is_modelled" in data:
            data = dict(data)
            modelled = data.pop("time_is_modelled")
            data.setdefault("time_source", "modelled" if modelled else "hardware")
        return data

    @computed_field(description="True on the emulator: times come from the cost model")  # type: ignore[prop-decorator]
    @property
    def time_is_modelled(self) -> bool:
        return self.time_source == "modelled"

    def to_json(self) -> str:
        return self.model_dump_json(indent=2)

    @classmethod
    def from_json(cls, text: str) -> GradeResult:
        return cls.model_validate_json(text)
