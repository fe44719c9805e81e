"""Turns a results document into findings a student can act on: what went wrong, the evidence, what to change.

The rules read GradeResult fields (verdicts, DIFF metrics, mismatches, unwritten fractions, emulator
diagnostics, compiler messages) and, for one pattern (only fp16 fails), the submission's own binding and kernel
sources, to tell a half path that does not exist (every dtype cast to `float*`) from a half path that is
wrong. Each finding names its kind with a machine name, so tests and the batch dashboard can match on it, and
carries the evidence seen; its title, advice and action come from the one registry (advice.py).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from grader.i18n import _, ngettext
from grader.reporting.advice import COMPILE_PATTERNS, REGISTRY, Advice, advice_for, feedback
from grader.reporting.compiler_output import CompilerMessage, parse_compiler_output
from grader.reporting.submission_files import submission_relative
from grader.results import (
    AssignmentFacts,
    CaseResult,
    EmuDiagnostic,
    FeedbackSpec,
    GradeResult,
    SourceLocation,
    Verdict,
    verdict_label,
)

Severity = Literal["error", "warning", "info"]


@dataclass(frozen=True)
class Finding:
    kind: str
    title: str  # what is wrong
    evidence: str  # what the grader saw
    advice: str  # how to fix it
    action: str = ""  # the fix as a one-line imperative, for "What to do next"
    severity: Severity = "error"
    location: SourceLocation | None = None
    cases: tuple[str, ...] = field(default_factory=tuple)
    snippet: str | None = None  # code showing the fix
    # the emulator's own words (English, from the C++ runtime), shown after the advice and labelled as its
    # original output, like a compiler message: the title and advice above are the kind's, translated
    original: str = ""

    @property
    def where(self) -> str:
        if self.location is None or not self.location.file:
            return ""
        file = submission_relative(self.location.file)
        return f"{file}:{self.location.line}" if self.location.line else file


def then(first: str, second: str) -> str:
    """Two pieces of one text in a row: a space between them in English, none in Chinese (the catalogue's)."""
    return _("{first} {second}").format(first=first, second=second)


def lower_first(title: str) -> str:
    """A title used inside a sentence: only its first letter lowered (GDRAM, NRAM and names keep their case)."""
    if title[1:2].isupper():  # an acronym first ("GDRAM buffer ..."): as written
        return title
    return title[:1].lower() + title[1:]


# --- emulator diagnostics -------------------------------------------------------------------------------

def diagnostic_kind(diag: EmuDiagnostic) -> str:
    """The kind as a Python-style name: the emulator prints gdram-out-of-bounds, the advice table says gdram_out_of_bounds."""
    return diag.kind.strip().lower().replace("-", "_")


def _relative(location: SourceLocation, root: str | None) -> SourceLocation | None:
    if not location.file:
        return None
    return SourceLocation(file=submission_relative(location.file, root), line=location.line)


def diagnostic_finding(diag: EmuDiagnostic, submission_root: str | None = None, facts: AssignmentFacts | None = None
                       ) -> Finding:
    kind = diagnostic_kind(diag)
    entry = advice_for(kind, facts)
    title = entry.title if entry else _("The emulator reported a problem ({kind})").format(kind=diag.kind)
    severity: Severity = "error" if diag.severity == "error" else "warning"
    evidence = (_("The emulator detected this in kernel `{kernel}`.") if diag.kernel
                else _("The emulator detected this.")).format(kernel=diag.kernel)
    return Finding(
        kind=kind,
        title=title,
        evidence=evidence,
        advice=entry.advice if entry else _("See the emulator's original output below."),
        action=entry.action if entry else _("Fix the {problem}").format(problem=lower_first(title)),
        severity=severity,
        location=_relative(diag.location, submission_root),
        snippet=entry.snippet if entry else None,
        original=f"{diag.kind}: {diag.message}",
    )


def _advised(kind: str, facts: AssignmentFacts | None, evidence: str, cases: tuple[str, ...] = (),
             severity: Severity = "error", entry: Advice | None = None) -> Finding:
    """A finding with the registry's text for its kind (the assignment's own where it has some); `entry`
    names another registry entry to take the text from."""
    entry = entry or advice_for(kind, facts)
    if entry is None:
        raise KeyError(f"no advice registered for {kind}")
    return Finding(kind=kind, title=entry.title, evidence=evidence, advice=entry.advice, action=entry.action,
                   snippet=entry.snippet, cases=cases, severity=severity)


# --- compile errors -----------------------------------------------------------------------------------



_SUGGESTION = re.compile(r"did you mean ['‘`]([^'’`]+)['’`]")


def compile_error_advice(message: str, facts: AssignmentFacts | None = None) -> str:
    advice = _("Fix the first error first: later errors are often consequences of it.")
    for kind, pattern in COMPILE_PATTERNS.items():
        if pattern.search(message) and (entry := advice_for(kind, facts)) is not None:
            advice = entry.advice
            break
    if suggestion := _SUGGESTION.search(message):
        advice = _("The compiler suggests `{name}`. {advice}").format(name=suggestion.group(1), advice=advice)
    return advice


def _compile_findings(result: GradeResult) -> list[Finding]:
    output = parse_compiler_output(result.build.compiler_output if result.build else "")
    errors: list[CompilerMessage] = output.errors
    if not errors:
        tail = (result.build.compiler_output.strip().splitlines() or [""])[-1] if result.build else ""
        return [
            Finding(
                kind="compile_error",
                title=_("The build failed"),
                evidence=tail or result.message or _("The compiler gave no output."),
                advice=_("Read the compiler output below from the top."),
                action=_("Make the build pass"),
            )
        ]
    findings = []
    # template instantiations repeat one error per instantiation: show each place once
    unique = list({(e.file, e.line, e.message): e for e in errors}.values())
    for err in unique[:3]:
        findings.append(
            Finding(
                kind="compile_error",
                title=_("Compile error"),
                evidence=err.message,
                advice=compile_error_advice(err.message, result.assignment_facts),
                action=_("Fix the compile error at {where}").format(where=f"{err.file}:{err.line}"),
                location=SourceLocation(
                    file=submission_relative(err.file, result.submission_path), line=err.line
                ),
            )
        )
    return findings


# --- verdicts without cases ---------------------------------------------------------------------------

def _verdict_finding(result: GradeResult) -> Finding | None:
    entry = REGISTRY.get(result.verdict.value)
    if entry is None or entry.origin != "verdict":
        return None
    evidence = result.message or _("Verdict: {verdict}.").format(verdict=verdict_label(result.verdict))
    severity: Severity = "info" if result.verdict in (Verdict.INTERNAL_ERROR, Verdict.HELD_FOR_REVIEW) else "error"
    return _advised(result.verdict.value, result.assignment_facts, evidence, severity=severity)


# --- wrong answers --------------------------------------------------------------------------------------

def is_tail_case(case: CaseResult, spec: FeedbackSpec | None = None) -> bool:
    """Whether a case exercises remainder handling: the assignment's [feedback] lists its group as a tail group,
    or one of its sizes is not a multiple of the assignment's alignment (64 elements by default)."""
    spec = spec or FeedbackSpec()
    if case.group in spec.tail_groups:
        return True
    return any(d % spec.alignment for shape in case.shapes.values() for d in shape)


def _unwritten(case: CaseResult) -> float:
    if case.unwritten_fraction:
        return case.unwritten_fraction
    if case.mismatches and all(m.actual is None for m in case.mismatches):
        return float("nan")  # unwritten, amount unknown
    return 0.0


def _rel_error(expected: float | None, actual: float | None) -> float:
    if expected is None or actual is None or not math.isfinite(actual):
        return math.inf
    return abs(actual - expected) / max(abs(expected), 1e-6)


def within_documented_error(case: CaseResult, facts: AssignmentFacts | None) -> bool:
    """A wrong answer whose listed elements (the clearly wrong ones, else the worst) are each within what the
    assignment's tolerance allows one element: |e-b| <= diff1 x max(|b|, tiny), the builtins' documented error
    (saturation, 1% relative, fp16 rounding) the bounds are derived from. Such a failure is the tolerance's."""
    tolerance = facts.tolerances.get(case.dtype) if facts is not None else None
    if tolerance is None or case.verdict != Verdict.WRONG_ANSWER or not case.mismatches or case.unwritten_fraction \
            or case.nan_inf_mismatch or tolerance.diff1 is None:
        return False
    tiny = tolerance.floor(case.dtype)
    allowed = min(tolerance.diff1, tolerance.diff2 if tolerance.diff2 is not None else tolerance.diff1)
    return all(m.actual is not None and m.expected is not None and math.isfinite(m.actual)
               and abs(m.actual - m.expected) <= allowed * max(abs(m.expected), tiny)
               and (tolerance.diff3_2 is None or abs(m.actual - m.expected) <= tolerance.diff3_2)
               for m in case.mismatches)


def case_kind(case: CaseResult, facts: AssignmentFacts | None = None) -> str | None:
    """The failure kind of one failing case (None when it passed); `facts` (the assignment's tolerances, as
    the results document carries them) tell a failure within the builtins' documented error from the student's."""
    if case.passed:
        return None
    if within_documented_error(case, facts):
        return "builtin_tolerance"
    if errors := [d for d in case.diagnostics if d.severity == "error"]:  # what stopped it, e.g. a runtime error
        return diagnostic_kind(errors[0])
    if case.verdict not in (Verdict.WRONG_ANSWER, Verdict.PASSED, Verdict.TOO_SLOW):
        return case.verdict.value
    if case.findings:  # the checks said what they found (grader.checks): the first failed one is the kind
        return case.findings[0].kind
    return _legacy_kind(case)


def _legacy_kind(case: CaseResult) -> str:
    """A document from before checks recorded their findings: the kind read back from its counters and listed
    mismatches, as the report did then."""
    if _unwritten(case) != 0.0:
        return "unwritten_output"
    if case.nan_inf_mismatch or any(
        m.actual is not None and not math.isfinite(m.actual) for m in case.mismatches
    ):
        return "nan_output"
    written = [m for m in case.mismatches if m.actual is not None]
    if written and all(m.actual == 0.0 for m in written) and any(m.expected for m in written):
        return "zero_output"
    if written and max(_rel_error(m.expected, m.actual) for m in written) < 2e-2:
        return "precision"
    return "wrong_values"


def case_hint(case: CaseResult, facts: AssignmentFacts | None = None) -> str | None:
    kind = case_kind(case, facts)
    if kind is None:
        return None
    if entry := advice_for(kind, facts):
        return entry.case_hint or lower_first(entry.title)
    if kind in Verdict.__members__.values():
        return verdict_label(Verdict(kind))
    return kind.replace("_", " ")


def is_emulator_message(case: CaseResult) -> bool:
    """Whether the case's message is the emulator's own (it names a diagnostic's kind, as the runtime words its
    errors: "gdram-out-of-bounds: ..."): shown labelled as the emulator's original output, after the kind's
    translated hint, never as if the grader had said it."""
    return any(d.kind in case.message for d in case.diagnostics)


def case_label(case: CaseResult) -> str:
    """A case named so it is unique across entries: one shape is usually checked on every stage's entry."""
    return case.name if case.entry in case.name else f"{case.entry}/{case.name}"


def _percent(fraction: float) -> str:
    return f"{fraction * 100:.3g}%"


def _shape_text(case: CaseResult) -> str:
    return ", ".join("x".join(str(d) for d in shape) for shape in case.shapes.values())


def _only_these_fail(kind: str, pattern: Literal["fp16", "tail"], passed: int, failing: list[CaseResult],
                     facts: AssignmentFacts | None) -> Finding:
    """A pattern finding: every case of one kind (fp16 or tail cases) fails while the others pass."""
    shapes = "; ".join(f"{case_label(c)} ({_shape_text(c)})" for c in failing[:4])
    n = len(failing)
    if pattern == "fp16":
        passes = _("All {passed} float32 cases pass;")
        fails = ngettext("{failed} float16 case fails: {shapes}.", "{failed} float16 cases fail: {shapes}.", n)
    else:
        passes = _("All {passed} aligned cases pass;")
        fails = ngettext("{failed} tail case fails: {shapes}.", "{failed} tail cases fail: {shapes}.", n)
    evidence = then(passes.format(passed=passed), fails.format(failed=n, shapes=shapes))
    return _advised(kind, facts, evidence, tuple(case_label(c) for c in failing))


# --- sources: does the binding have a half path at all? -----------------------------------------------

# A cast of a tensor's data to float*: the binding's (or the host entry's) way of handing every dtype to a float kernel.
_FLOAT_CAST = re.compile(
    r"(?:reinterpret|static)_cast\s*<\s*(?:const\s+)?float\s*\*\s*>"
    r"|\(\s*(?:const\s+)?float\s*\*\s*\)\s*[A-Za-z_(]"
    r"|\b(?:data_ptr|data|mutable_data_ptr|const_data_ptr)\s*<\s*float\s*>\s*\("
)
# Any sign the sources look at the dtype (a dispatch, a check, a half type on the host side).
_DTYPE_AWARE = re.compile(
    r"AT_DISPATCH_\w+|\bscalar_type\s*\(|\.dtype\s*\(|\.element_size\s*\(|\bitemsize\b"
    r"|\bk(?:Half|Float16|BFloat16)\b|\b(?:at|c10)::(?:Half|BFloat16)\b|ScalarType::|\bis_floating_point\b"
)
_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_SOURCE_GLOBS = ("cpp/*.cpp", "cpp/*.cc", "cpp/*.h", "cpp/*.hpp", "mlu/*.mlu", "mlu/*.h")
_MAX_SOURCE_BYTES = 1 << 20


@dataclass(frozen=True)
class FloatCast:
    """Where a binding hands every dtype to float pointers."""

    file: str  # relative to the submission root
    line: int
    text: str  # the source line, stripped


def _blank_comments(text: str) -> str:
    """Comments replaced by spaces (newlines kept), so line numbers survive."""
    return _COMMENTS.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def _submission_sources(result: GradeResult) -> list[tuple[str, str]]:
    """(relative path, text) of the binding and kernel sources: read from the submission folder when it is
    still there, else the excerpts the results document carries."""
    root = Path(result.submission_path) if result.submission_path else None
    sources: list[tuple[str, str]] = []
    if root is not None and root.is_dir():
        for pattern in _SOURCE_GLOBS:
            for path in sorted(root.glob(pattern)):
                try:
                    if path.is_file() and path.stat().st_size <= _MAX_SOURCE_BYTES:
                        sources.append((path.relative_to(root).as_posix(), path.read_text(errors="replace")))
                except OSError:
                    continue
    if not sources:
        for excerpt in result.source_excerpts:
            # excerpts start mid-file: pad so the line numbers stay right
            sources.append((excerpt.file, "\n" * (excerpt.first_line - 1) + "\n".join(excerpt.lines)))
    return sources


def float_only_binding(result: GradeResult) -> FloatCast | None:
    """The first `float*` cast of tensor data when no source looks at the dtype: every dtype, half included,
    then reaches the kernel as float. Binding files (cpp/) are searched before kernel files (mlu/)."""
    sources = [(name, _blank_comments(text)) for name, text in _submission_sources(result)]
    if not sources or any(_DTYPE_AWARE.search(text) for _, text in sources):
        return None
    ordered = [s for s in sources if s[0].startswith("cpp/")] + [s for s in sources if not s[0].startswith("cpp/")]
    for name, text in ordered:
        for number, line in enumerate(text.splitlines(), start=1):
            if _FLOAT_CAST.search(line):
                return FloatCast(file=name, line=number, text=line.strip())
    return None


def _fp16_findings(result: GradeResult, failing: list[CaseResult], passing_fp32: list[CaseResult]) -> Finding:
    """Only fp16 cases fail. With a binding that casts every dtype to float* the half path does not exist, and
    that is the root cause whatever the emulator saw (a float read of a half tensor runs past its end)."""
    cast = float_only_binding(result)
    if cast is None:
        return _only_these_fail("fp16_only", "fp16", len(passing_fp32), failing, result.assignment_facts)
    finding = _only_these_fail("fp16_float_pointers", "fp16", len(passing_fp32), failing, result.assignment_facts)
    where = _("The binding casts every dtype to float* at {where}: `{code}`, and no source checks the dtype.")
    return replace(finding, location=SourceLocation(file=cast.file, line=cast.line),
                   advice=finding.advice.replace("{cast}", f"`{cast.text}`"),
                   evidence=f"{finding.evidence} " + where.format(where=f"{cast.file}:{cast.line}", code=cast.text))


FP16_PATTERNS = ("fp16_only", "fp16_float_pointers")


def _wrong_answer_findings(cases: list[CaseResult], result: GradeResult | None = None) -> list[Finding]:
    failing = [
        c for c in cases if not c.passed and c.verdict in (Verdict.WRONG_ANSWER, Verdict.RUNTIME_ERROR)
    ]
    if not failing:
        return []
    result = result or _bare_result(cases)
    facts = result.assignment_facts
    tolerance_cases = [c for c in failing if case_kind(c, facts) == "builtin_tolerance"]
    # never blamed on the student: no tail or fp16 pattern is read into them
    failing = [c for c in failing if c not in tolerance_cases]
    tolerance_finding = [] if not tolerance_cases else [_advised(
        "builtin_tolerance", facts, ngettext(
            "{n} case failed although every element checked is within the builtin's documented error: {cases}.",
            "{n} cases failed although every element checked is within the builtins' documented error: {cases}.",
            len(tolerance_cases)).format(n=len(tolerance_cases),
                                         cases=", ".join(case_label(c) for c in tolerance_cases[:4])),
        tuple(case_label(c) for c in tolerance_cases), severity="warning")]
    if not failing:
        return tolerance_finding
    tails = feedback(facts)
    findings: list[Finding] = []
    passing_aligned = [c for c in cases if c.passed and not is_tail_case(c, tails)]
    passing_fp32 = [c for c in cases if c.passed and c.dtype == "float32"]
    # fp16 first: an fp16 defect shows on long or odd shapes, which look like tails.
    if all(c.dtype == "float16" for c in failing) and passing_fp32:
        findings.append(_fp16_findings(result, failing, passing_fp32))
    elif all(is_tail_case(c, tails) for c in failing) and passing_aligned:
        findings.append(_only_these_fail("tail_only", "tail", len(passing_aligned), failing, facts))
    pattern = findings  # the fp16 / tail-only pattern explains the others, so it stays first
    findings = []
    by_kind: dict[str, list[CaseResult]] = {}
    for case in failing:
        kind = case_kind(case, facts)
        if kind:
            by_kind.setdefault(kind, []).append(case)

    def labels(group: list[CaseResult]) -> tuple[str, ...]:
        return tuple(case_label(c) for c in group)

    if group := by_kind.get("unwritten_output"):
        worst_case = max(group, key=lambda c: c.unwritten_fraction or 0.0)
        fraction = worst_case.unwritten_fraction
        nothing_written = all((c.unwritten_fraction or 0) >= 0.999 for c in group) and not any(
            c.passed for c in cases
        )
        evidence = (_("{amount} of the outputs of {case} ({shape}) still hold the poison value;").format(
            amount=_percent(fraction), case=case_label(worst_case), shape=_shape_text(worst_case)) if fraction
            else _("Some of the outputs of {case} ({shape}) still hold the poison value;").format(
                case=case_label(worst_case), shape=_shape_text(worst_case)))
        evidence = then(evidence, ngettext("{n} case affected.", "{n} cases affected.", len(group)).format(
            n=len(group)))
        findings.append(_advised(
            "unwritten_output", facts, evidence, labels(group),
            entry=advice_for("nothing_written", facts) if nothing_written else None))
    if group := by_kind.get("nan_output"):
        count = sum(c.nan_inf_mismatch for c in group)
        evidence = (ngettext("{count} output element is NaN/Inf where the float64 reference is finite",
                             "{count} output elements are NaN/Inf where the float64 reference is finite", count)
                    if count else _("Some output elements are NaN/Inf where the float64 reference is finite"))
        evidence = then(evidence.format(count=count),
                        ngettext("({n} case).", "({n} cases).", len(group)).format(n=len(group)))
        findings.append(_advised("nan_output", facts, evidence, labels(group)))
    if group := by_kind.get("zero_output"):
        findings.append(_advised(
            "zero_output", facts,
            ngettext("Mismatching outputs are all 0.0 in {n} case.", "Mismatching outputs are all 0.0 in {n} cases.",
                     len(group)).format(n=len(group)), labels(group)))
    if group := by_kind.get("precision"):
        worst_case = max(group, key=lambda c: c.diff1 or 0.0)
        findings.append(_advised(
            "precision", facts,
            f"{case_label(worst_case)}: DIFF1 {_num(worst_case.diff1)}, DIFF2 {_num(worst_case.diff2)}.",
            labels(group), severity="warning" if len(group) < len(failing) else "error"))
    if group := by_kind.get("wrong_values"):
        first = group[0]
        evidence = ngettext("{n} case differs from the reference beyond rounding.",
                            "{n} cases differ from the reference beyond rounding.", len(group)).format(n=len(group))
        if first.mismatches:
            m = first.mismatches[0]
            evidence = then(evidence, _("First at index {index}: expected {expected}, got {actual}.").format(
                index=m.index, expected=_num(m.expected), actual=_num(m.actual)))
        findings.append(_advised("wrong_values", facts, evidence, labels(group)))
    for kind, group in by_kind.items():  # any other check's kind: its registry text, its own message as evidence
        if kind in _OUTPUT_KINDS_WITH_EVIDENCE or not all(any(f.kind == kind for f in c.findings) for c in group):
            continue  # a diagnostic's or a verdict's kind has a finding of its own (diagnose)
        if (entry := advice_for(kind, facts)) is None:
            continue  # no registry text: the case hint names the kind
        first = next(f for f in group[0].findings if f.kind == kind)
        evidence = ngettext("The {check} check failed on {n} case.", "The {check} check failed on {n} cases.",
                            len(group)).format(check=first.check, n=len(group))
        findings.append(_advised(kind, facts, then(evidence, first.message) if first.message else evidence,
                                 labels(group), entry=entry))
    # the kind that explains the most failing cases first (stable: ties keep the order above)
    return pattern + sorted(findings, key=lambda f: -len(f.cases)) + tolerance_finding


# output kinds whose evidence is worded above from the case's counters; every other check kind is generic
_OUTPUT_KINDS_WITH_EVIDENCE = ("unwritten_output", "nan_output", "zero_output", "precision", "wrong_values")


def _bare_result(cases: list[CaseResult]) -> GradeResult:
    """A results document around bare cases (callers that pass cases only): no sources to read."""
    return GradeResult.model_construct(cases=cases, submission_path="", source_excerpts=[], assignment="",
                                        assignment_facts=None)


def _num(value: float | None) -> str:
    if value is None:
        return _("unwritten")
    if not math.isfinite(value):
        return str(value)
    return f"{value:.4g}"


# --- all together ---------------------------------------------------------------------------------------


def all_diagnostics(result: GradeResult) -> list[EmuDiagnostic]:
    """Every emulator diagnostic in cases and stage traces, deduplicated by kind and source line."""
    seen: set[tuple[str, str | None, int | None]] = set()
    found: list[EmuDiagnostic] = []
    sources = [d for c in result.cases for d in c.diagnostics]
    sources += [d for s in result.stages if s.trace for d in s.trace.diagnostics]
    for diag in sources:
        key = (diagnostic_kind(diag), diag.location.file, diag.location.line)
        if key not in seen:
            seen.add(key)
            found.append(diag)
    return found


def diagnose(result: GradeResult) -> list[Finding]:
    """The findings to show under "What went wrong", most important first."""
    findings: list[Finding] = []
    if result.verdict == Verdict.COMPILE_ERROR:
        return _compile_findings(result)
    if verdict_finding := _verdict_finding(result):
        findings.append(verdict_finding)
    diagnostics = all_diagnostics(result)
    root = result.submission_path
    from_outputs = _wrong_answer_findings(result.cases, result)
    if from_outputs and from_outputs[0].kind == "fp16_float_pointers":
        # The emulator's checks in the fp16 cases (a read past a half tensor's end) are what a float read of
        # half data does: a consequence, not a second bug. Only diagnostics seen elsewhere stay.
        elsewhere = [d for c in result.cases if c.dtype != "float16" for d in c.diagnostics]
        elsewhere += [d for s in result.stages if s.trace for d in s.trace.diagnostics]
        keep = {(diagnostic_kind(d), d.location.file, d.location.line) for d in elsewhere}
        diagnostics = [d for d in diagnostics if (diagnostic_kind(d), d.location.file, d.location.line) in keep]
    from_emulator = [diagnostic_finding(d, root, result.assignment_facts) for d in diagnostics if d.severity == "error"]
    # Both may describe one problem (e.g. unwritten output): keep the output's evidence, the emulator's line.
    located = {f.kind: f.location for f in from_emulator if f.location}
    output_kinds = {f.kind for f in from_outputs}
    # Only fp16 failing names the cause the emulator's checks there are symptoms of, so it leads.
    if from_outputs and from_outputs[0].kind in FP16_PATTERNS:
        findings.append(from_outputs.pop(0))
    findings += [f for f in from_emulator if f.kind not in output_kinds]
    findings += [replace(f, location=f.location or located.get(f.kind)) for f in from_outputs]
    covered = {f.kind for f in findings}
    findings += [
        diagnostic_finding(d, root, result.assignment_facts)
        for d in diagnostics
        if d.severity != "error" and diagnostic_kind(d) not in covered
    ]
    return findings
