"""Turns a results document into findings a student can act on: what went wrong, the evidence, what to change.

The rules read GradeResult fields (verdicts, DIFF metrics, mismatches, unwritten fractions, emulator
diagnostics, compiler messages) and, for one pattern (only fp16 fails), the submission's own binding and kernel
sources, to tell a half path that does not exist (every dtype cast to `float*`) from a half path that is wrong. Each finding names its kind with a machine name, so tests and the batch
dashboard can match on it, and carries a short title, the evidence seen and the advice.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from grader.reporting.compiler_output import CompilerMessage, parse_compiler_output, submission_relative
from grader.results import CaseResult, EmuDiagnostic, GradeResult, SourceLocation, Verdict

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

    @property
    def where(self) -> str:
        if self.location is None or not self.location.file:
            return ""
        file = submission_relative(self.location.file)
        return f"{file}:{self.location.line}" if self.location.line else file


# --- emulator diagnostics -------------------------------------------------------------------------------

_DIAGNOSTIC_ADVICE: dict[str, tuple[str, str]] = {  # kind -> (title, advice)
    "gdram_oob_write": (
        "Write past the end of a GDRAM buffer",
        "The last task or the last chunk writes a whole chunk although fewer elements remain. Clamp it: "
        "copy min(chunk, n - offset) elements, and size the final __memcpy(..., NRAM2GDRAM) in bytes of "
        "that remainder.",
    ),
    "gdram_oob_read": (
        "Read past the end of a GDRAM buffer",
        "A load reads beyond the input. Compute each task's [start, end) from taskId and clamp end to n "
        "before the __memcpy(..., GDRAM2NRAM); the byte count is elements * sizeof(float).",
    ),
    "nram_overflow": (
        "NRAM overflow",
        "The __nram__ buffers need more than one core's NRAM (768 KB on MLU370, 128 KB of it kept for the "
        "stack). Process the data in tiles: size each tile so all NRAM buffers fit in MAX_NRAM_SIZE, and "
        "loop over tiles.",
    ),
    "wram_overflow": (
        "WRAM overflow",
        "The __wram__ buffer is larger than WRAM (1 MB per core on MLU370). Split the right matrix along "
        "its output columns and load one block of columns at a time.",
    ),
    "sram_overflow": (
        "SRAM overflow",
        "The __mlu_shared__ buffer is larger than the cluster's SRAM (4 MB on MLU370). Stage smaller tiles.",
    ),
    "nram_oob": (
        "Index outside an __nram__ array",
        "A scalar access or a builtin's length runs past the end of an on-chip array. Check the element "
        "count you pass to __bang_* and __memcpy against the array's declared size.",
    ),
    "onchip_oob": (
        "Access outside an on-chip array",
        "A scalar access or a builtin's length runs past the end of an on-chip array. Check the element "
        "count you pass to __bang_* and __memcpy against the array's declared size.",
    ),
    "async_hazard": (
        "Buffer used before its asynchronous copy finished",
        "A buffer filled (or drained) by __memcpy_async was touched before the copy was waited for. Put "
        "__sync_io() (or __sync()) between issuing a copy and using its buffer; in a ping-pong pipeline, "
        "wait after issuing the next load and before computing on the current buffer.",
    ),
    "barrier_deadlock": (
        "Barrier deadlock",
        "Not every core reached the same __sync_cluster()/__sync_all(). In a UNION kernel the memory core "
        "(coreId 0x80) runs the kernel too: if it returns early, no core may call a cluster barrier after "
        "that point. Make every participant execute the same sequence of barriers.",
    ),
    "unwritten_output": (
        "Part of the output was never written",
        "Some output elements keep the poison value the grader filled them with. Check each task's offset "
        "(taskId * per_task, not taskId * nram_chunk) and that the last N % taskDim elements are handled.",
    ),
    "uninitialized_read": (
        "Read of uninitialised on-chip memory",
        "A computation read NRAM that nothing wrote first. Load the data (or __bang_write_zero the "
        "accumulator) before using it, and make sure the tile you compute on is the one you loaded.",
    ),
    "misaligned_operand": (
        "Misaligned builtin operand",
        "A __bang_* operand or length is not aligned as the builtin requires. Pad tile sizes to the "
        "alignment (e.g. multiples of 64 elements) and handle the remainder separately.",
    ),
    # the emulator's own names (bang_emu kernel_error kinds, hyphens normalised)
    "gdram_out_of_bounds": (
        "Access outside a GDRAM buffer",
        "An index or a copy runs past the end (or before the start) of a tensor in GDRAM, usually in the "
        "last task or the last, partial tile. Clamp it: process min(chunk, n - offset) elements there and "
        "size that __memcpy in bytes of the remainder.",
    ),
    "onchip_out_of_bounds": (
        "Access outside an on-chip array",
        "An access or a builtin's length runs past the end of an __nram__/__wram__/__mlu_shared__ array. "
        "Check the element count you pass against the array's size; if the data is larger than the array "
        "(or than NRAM itself), process it in tiles.",
    ),
    "barrier_timeout": (
        "A barrier never completed",
        "Some cores waited at __sync_cluster()/__sync_all() for partners that never arrived. Make every "
        "participant (including the memory core in UNION kernels) execute the same barriers.",
    ),
    "invalid_launch": (
        "The launch was refused",
        "The task dimension or function type is not valid: no dim may be 0, a UNIONn launch needs dim.x "
        "to be a multiple of 4*n and at most as many clusters as the device has.",
    ),
    "invalid_address": (
        "The kernel used a pointer that is not device memory",
        "Pass the kernel device pointers (the MLU tensor's data pointer), never host pointers or the "
        "address of a host variable.",
    ),
    "invalid_argument": (
        "A builtin rejected its arguments",
        "Read the emulator's message: it names the builtin and the argument. Counts must be positive and "
        "meet the builtin's alignment rules.",
    ),
    "invalid_memcpy_direction": (
        "The copy direction does not match the pointers",
        "The direction constant must match where source and destination live, e.g. GDRAM2NRAM for a GDRAM "
        "source and an __nram__ destination.",
    ),
    "kernel_exception": (
        "The kernel threw a C++ exception",
        "Something in the kernel code threw (for instance std::vector::at out of range); kernels should "
        "not use exceptions or host containers.",
    ),
    "mpu_onchip_op": (
        "On-chip work issued on the memory core",
        "In UNION launches the memory core runs the kernel too but has no NRAM/WRAM: guard compute and "
        "NRAM copies with if (__is_ipu()) (or return early on __is_mpu() before any barrier-free part).",
    ),
    "wram_scalar_access": (
        "Scalar access to WRAM",
        "Scalar code cannot read or write WRAM on real hardware. Fill WRAM with __memcpy(..., GDRAM2WRAM "
        "or NRAM2WRAM) and use it only as the right operand of __bang_matmul.",
    ),
}


_DIAGNOSTIC_ACTIONS: dict[str, str] = {
    "gdram_oob_write": "Clamp the last chunk to the elements that remain",
    "gdram_oob_read": "Clamp each task's range to the input length",
    "nram_overflow": "Tile the data so the NRAM buffers fit",
    "wram_overflow": "Load the right matrix into WRAM in column blocks",
    "sram_overflow": "Stage smaller tiles in SRAM",
    "nram_oob": "Keep builtin lengths within the on-chip arrays",
    "onchip_oob": "Keep builtin lengths within the on-chip arrays",
    "async_hazard": "Wait with __sync_io() before using an async copy's buffer",
    "barrier_deadlock": "Make every core reach the same barriers",
    "unwritten_output": "Give every task its own output range, remainder included",
    "uninitialized_read": "Load or zero on-chip buffers before reading them",
    "misaligned_operand": "Align builtin operands and lengths",
    "wram_scalar_access": "Touch WRAM only through __memcpy and __bang_matmul",
    "gdram_out_of_bounds": "Clamp the last chunk to the elements that remain",
    "onchip_out_of_bounds": "Keep every access inside its on-chip array",
    "barrier_timeout": "Make every core reach the same barriers",
    "invalid_launch": "Fix the launch dimensions or function type",
    "invalid_address": "Pass device pointers to the kernel",
    "invalid_argument": "Fix the builtin's arguments",
    "invalid_memcpy_direction": "Use the copy direction that matches the pointers",
    "kernel_exception": "Remove what throws inside the kernel",
    "mpu_onchip_op": "Guard on-chip work with __is_ipu()",
}


def diagnostic_kind(diag: EmuDiagnostic) -> str:
    """The kind as a Python-style name: the emulator prints gdram-out-of-bounds, the advice table says gdram_out_of_bounds."""
    return diag.kind.strip().lower().replace("-", "_")


def _relative(location: SourceLocation, root: str | None) -> SourceLocation | None:
    if not location.file:
        return None
    return SourceLocation(file=submission_relative(location.file, root), line=location.line)


def diagnostic_finding(diag: EmuDiagnostic, submission_root: str | None = None) -> Finding:
    kind = diagnostic_kind(diag)
    title, advice = _DIAGNOSTIC_ADVICE.get(
        kind, (kind.replace("_", " ").capitalize(), "See the emulator's message above.")
    )
    severity: Severity = "error" if diag.severity == "error" else "warning"
    kernel = f" in kernel {diag.kernel}" if diag.kernel else ""
    return Finding(
        kind=kind,
        title=title,
        evidence=f"The emulator reported{kernel}: {diag.message}",
        advice=advice,
        action=_DIAGNOSTIC_ACTIONS.get(kind, f"Fix the {title.lower()}"),
        severity=severity,
        location=_relative(diag.location, submission_root),
    )


# --- compile errors -----------------------------------------------------------------------------------

_COMPILE_RULES: list[tuple[re.Pattern[str], str]] = [
    (
        re.compile(
            r"['‘`](__bang_\w+|__memcpy\w*|__sync\w*)['’] was not declared|undeclared identifier ['‘](__bang|__memcpy)"
        ),
        "That builtin is unknown: check its spelling and that the file includes <bang.h>.",
    ),
    (
        re.compile(r"was not declared in this scope|undeclared identifier"),
        "Declare the name before use (or include the header that declares it); a typo in a variable or "
        "a missing taskId/taskDim-derived variable is the usual cause.",
    ),
    (
        re.compile(r"no matching function for call to ['‘](__bang_\w+|__memcpy\w*)"),
        "The builtin exists but not with these argument types: check the pointer types (float* into "
        "__nram__/__wram__ arrays), the argument order and the direction constant.",
    ),
    (
        re.compile(r"(?i)(nram|wram|sram).*(exceed|too large|overflow)|(exceed|too large).*(nram|wram|sram)"),
        "An on-chip array is larger than the memory it lives in; tile the data so each buffer fits.",
    ),
    (
        re.compile(r"undefined reference to|undefined symbol"),
        "A function is declared but never defined or its name does not match between the .mlu and the "
        '.cpp (check extern "C", the template instantiation and the exact signature).',
    ),
    (
        re.compile(r"expected ['‘][;)}\]]['’]|expected (primary-)?expression|expected unqualified-id"),
        "A syntax error: look at the line shown and the one before it (a missing ';' or bracket).",
    ),
    (
        re.compile(r"cannot convert|invalid conversion"),
        "A type mismatch: check pointer types between host tensors, GDRAM pointers and on-chip arrays.",
    ),
]


_SUGGESTION = re.compile(r"did you mean ['‘`]([^'’`]+)['’`]")


def compile_error_advice(message: str) -> str:
    advice = "Fix the first error first: later errors are often consequences of it."
    for pattern, rule_advice in _COMPILE_RULES:
        if pattern.search(message):
            advice = rule_advice
            break
    if suggestion := _SUGGESTION.search(message):
        advice = f"The compiler suggests `{suggestion.group(1)}`. {advice}"
    return advice


def _compile_findings(result: GradeResult) -> list[Finding]:
    output = parse_compiler_output(result.build.compiler_output if result.build else "")
    errors: list[CompilerMessage] = output.errors
    if not errors:
        tail = (result.build.compiler_output.strip().splitlines() or [""])[-1] if result.build else ""
        return [
            Finding(
                kind="compile_error",
                title="The build failed",
                evidence=tail or result.message or "The compiler gave no output.",
                advice="Read the compiler output below from the top.",
                action="Make the build pass",
            )
        ]
    findings = []
    # template instantiations repeat one error per instantiation: show each place once
    unique = list({(e.file, e.line, e.message): e for e in errors}.values())
    for err in unique[:3]:
        findings.append(
            Finding(
                kind="compile_error",
                title="Compile error",
                evidence=err.message,
                advice=compile_error_advice(err.message),
                action=f"Fix the compile error at {err.file}:{err.line}",
                location=SourceLocation(
                    file=submission_relative(err.file, result.submission_path), line=err.line
                ),
            )
        )
    return findings


# --- verdicts without cases ---------------------------------------------------------------------------

_VERDICT_ACTIONS = {
    Verdict.UNGRADABLE_LAYOUT: "Restore the handout's file layout",
    Verdict.NOT_USING_KERNEL: "Launch your BANG kernel from the entry function",
    Verdict.TIMEOUT: "Find the loop or barrier that never finishes",
    Verdict.CRASH: "Find what crashes the extension",
    Verdict.INTERNAL_ERROR: "Report this run to the course staff",
    Verdict.ENVIRONMENT_ERROR: "Set up the grading machine, then grade again",
    Verdict.INTEGRITY: "Compute the output with your kernel, and only with it",
}

_VERDICT_FINDINGS: dict[Verdict, tuple[str, str]] = {  # verdict -> (title, advice)
    Verdict.UNGRADABLE_LAYOUT: (
        "The submission layout is not gradable",
        "Keep the handout layout: my_ops/mlu/*.mlu, my_ops/cpp/*.cpp, my_ops/ops.py (and grade.toml "
        "if you renamed the module or the entry functions).",
    ),
    Verdict.NOT_USING_KERNEL: (
        "Your kernel never ran",
        "The entry function returned a result without launching a BANG kernel (for instance it computed "
        "with torch on the host). Call the op your extension registers, which launches the kernel with "
        "<<<dim, func_type, queue>>>.",
    ),
    Verdict.TIMEOUT: (
        "Time limit exceeded",
        "The run did not finish in time. Look for a loop whose bound never changes (e.g. a step of 0 "
        "when taskDim exceeds the work), a barrier some cores never reach, or a scalar loop run on the "
        "large performance shape.",
    ),
    Verdict.CRASH: (
        "The process crashed",
        "The extension died (a signal or a non-zero exit). Typical causes: dereferencing a host pointer "
        "in the kernel, a wrong byte count in cnrtMemcpy, or using a tensor's data_ptr() after it was freed.",
    ),
    Verdict.ENVIRONMENT_ERROR: (
        "This machine cannot grade yet",
        "Nothing of your submission was run: the grader found no sandbox to run it in. The message says "
        "which command sets the machine up.",
    ),
    Verdict.INTEGRITY: (
        "The grader could not confirm the result came from your kernel",
        "What the run reported does not add up: for instance the output was written by host code rather "
        "than by a kernel, the kernels did less work than the output needs, or the launch records were "
        "not the emulator's own. The message lists exactly what did not match. Compute the whole output "
        "with your BANG kernel, launched from the entry function.",
    ),
    Verdict.INTERNAL_ERROR: (
        "The grader failed",
        "This is not your fault: the grader itself hit an error. Tell the course staff and quote the "
        "submission hash at the top of this report.",
    ),
}


def _verdict_finding(result: GradeResult) -> Finding | None:
    if result.verdict not in _VERDICT_FINDINGS:
        return None
    title, advice = _VERDICT_FINDINGS[result.verdict]
    evidence = result.message or f"Verdict: {result.verdict.value.replace('_', ' ')}."
    severity: Severity = "info" if result.verdict == Verdict.INTERNAL_ERROR else "error"
    return Finding(
        kind=result.verdict.value,
        title=title,
        evidence=evidence,
        advice=advice,
        action=_VERDICT_ACTIONS[result.verdict],
        severity=severity,
    )


# --- wrong answers --------------------------------------------------------------------------------------

_TAIL_WORDS = ("tail", "remainder", "unaligned", "ragged", "odd", "prime")
ALIGNMENT = 64  # elements: the vector line / matmul tile size every stage's kernels are written around


def is_tail_case(case: CaseResult) -> bool:
    """Whether a case exercises remainder handling: its group or name says so, or a size is not a multiple of 64."""
    text = f"{case.group} {case.name}".lower()
    if any(word in text for word in _TAIL_WORDS):
        return True
    return any(d % ALIGNMENT for shape in case.shapes.values() for d in shape)


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


def case_kind(case: CaseResult) -> str | None:
    """The failure kind of one failing case (None when it passed)."""
    if case.passed:
        return None
    if case.verdict not in (Verdict.WRONG_ANSWER, Verdict.PASSED, Verdict.TOO_SLOW):
        return case.verdict.value
    if errors := [d for d in case.diagnostics if d.severity == "error"]:
        return diagnostic_kind(errors[0])
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


_CASE_HINTS = {
    "unwritten_output": "some outputs never written: check task offsets and the remainder",
    "nan_output": "NaN/Inf where the reference is finite: uninitialised NRAM or a read past loaded data",
    "zero_output": "zeros where values were expected: results not copied back (NRAM2GDRAM) or copied too early",
    "precision": "close, but outside the tolerance: accumulate in fp32, check the approximation",
    "wrong_values": "wrong values: check indexing (row-major strides) and the operand layout",
}


def case_hint(case: CaseResult) -> str | None:
    kind = case_kind(case)
    if kind is None:
        return None
    if kind in _CASE_HINTS:
        return _CASE_HINTS[kind]
    if kind in _DIAGNOSTIC_ADVICE:
        return _DIAGNOSTIC_ADVICE[kind][0].lower()
    return kind.replace("_", " ")


def case_label(case: CaseResult) -> str:
    """A case named so it is unique across entries: one shape is usually checked on every stage's entry."""
    return case.name if case.entry in case.name else f"{case.entry}/{case.name}"


def _percent(fraction: float) -> str:
    return f"{fraction * 100:.3g}%"


def _shape_text(case: CaseResult) -> str:
    return ", ".join("x".join(str(d) for d in shape) for shape in case.shapes.values())


def _only_these_fail(kind: str, title: str, passing: str, failing_what: str, failing: list[CaseResult],
                     advice: str, action: str) -> Finding:
    """A pattern finding: every case of one kind fails while the others pass."""
    shapes = "; ".join(f"{case_label(c)} ({_shape_text(c)})" for c in failing[:4])
    return Finding(kind=kind, title=title, advice=advice, action=action,
                   evidence=f"All {passing} cases pass; {len(failing)} {failing_what} case(s) fail: {shapes}.",
                   cases=tuple(case_label(c) for c in failing))


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
    if cast is not None:
        finding = _only_these_fail(
            "fp16_float_pointers", "Half tensors go through float pointers", f"{len(passing_fp32)} float32",
            "float16", failing,
            advice="Your fp32 kernel is right, but there is no half path: the binding hands every tensor to the "
            f"kernel as `float*` (`{cast.text}`) and nothing looks at the dtype, so a float16 tensor of n elements "
            "is read as n floats, twice its size (the emulator reports the read past its end). Dispatch on the "
            "dtype: `if (x.scalar_type() == at::kHalf)` call a `half` instantiation of your kernel "
            "(`template void entry(cnrtQueue_t, half *, half *, int);`), else the `float` one, and size every "
            "copy with `sizeof(T)`. If you only support float32, the fp16 cases cost their own points only.",
            action="Dispatch on the dtype: give half tensors a half kernel instead of casting them to float*")
        return replace(finding, location=SourceLocation(file=cast.file, line=cast.line),
                       evidence=f"{finding.evidence} The binding casts every dtype to float* at "
                       f"{cast.file}:{cast.line}: `{cast.text}`, and no source checks the dtype.")
    if result.assignment == "matmul" or any("matmul" in c.entry for c in failing):
        advice = ("Your fp32 path is right; the half one loses precision or reads the data wrongly. Sum fp16 "
                  "products in fp32 (a `float` running sum, or `__bang_matmul(float *dst, half *lhs, half *rhs, ...)`) "
                  "and round to half once, when a result is final (`__bang_float2half_rn`); keep partial sums "
                  "between K tiles in fp32 too. Dispatch on the dtype so half data never goes through float "
                  "pointers, and pad K for `__bang_matmul` to 64 bytes: 32 halves, not 16.")
        action = "Sum fp16 products in fp32 and round to half once, at the end"
    else:
        advice = ("Your fp32 path is right; the half one is not. Check that the binding dispatches on the dtype "
                  "(a `half` instantiation for float16 tensors), that every byte count uses `sizeof(T)` (2 for "
                  "half), and that the NRAM tile sizes are counted in elements of T.")
        action = "Fix the half path: dispatch on the dtype and size copies with sizeof(T)"
    return _only_these_fail("fp16_only", "Only fp16 cases fail", f"{len(passing_fp32)} float32", "float16",
                            failing, advice=advice, action=action)


FP16_PATTERNS = ("fp16_only", "fp16_float_pointers")


def _wrong_answer_findings(cases: list[CaseResult], result: GradeResult | None = None) -> list[Finding]:
    failing = [
        c for c in cases if not c.passed and c.verdict in (Verdict.WRONG_ANSWER, Verdict.RUNTIME_ERROR)
    ]
    if not failing:
        return []
    findings: list[Finding] = []
    passing_aligned = [c for c in cases if c.passed and not is_tail_case(c)]
    passing_fp32 = [c for c in cases if c.passed and c.dtype == "float32"]
    # fp16 first: an fp16 defect shows on long or odd shapes, which look like tails.
    if all(c.dtype == "float16" for c in failing) and passing_fp32:
        findings.append(_fp16_findings(result or _bare_result(cases), failing, passing_fp32))
    elif all(is_tail_case(c) for c in failing) and passing_aligned:
        findings.append(_only_these_fail(
            "tail_only", "Only tail shapes fail", f"{len(passing_aligned)} aligned", "tail", failing,
            advice="Your main loop is right but the remainder is lost. When the size is not a multiple of "
            "your chunk (or of taskDim), process the last, shorter piece too: loop "
            "`for (start = 0; start < n; start += chunk)` with `len = min(chunk, n - start)`, and give the "
            "first n % taskDim tasks one extra element (or row) each.",
            action="Handle the remainder when a size is not a multiple of your chunk"))
    pattern = findings  # the fp16 / tail-only pattern explains the others, so it stays first
    findings = []
    by_kind: dict[str, list[CaseResult]] = {}
    for case in failing:
        kind = case_kind(case)
        if kind:
            by_kind.setdefault(kind, []).append(case)

    if group := by_kind.get("unwritten_output"):
        worst_case = max(group, key=lambda c: c.unwritten_fraction or 0.0)
        fraction = worst_case.unwritten_fraction
        amount = _percent(fraction) if fraction else "some"
        action = "Give every task its own output range, remainder included"
        nothing_written = all((c.unwritten_fraction or 0) >= 0.999 for c in group) and not any(
            c.passed for c in cases
        )
        if nothing_written:
            action = "Copy the results back to GDRAM"
            advice = (
                "Nothing reached the output. Copy the results back with __memcpy(dst_gdram, src_nram, bytes, "
                "NRAM2GDRAM) and make sure the host passes the output tensor's device pointer to the kernel."
            )
        else:
            advice = (
                "A fraction of the output keeps the poison the grader filled it with, so some tasks write "
                "the wrong range or none. Offset each task by taskId * per_task (not by the NRAM chunk "
                "size), cover all taskDim tasks, and write the final N % taskDim elements."
            )
        findings.append(
            Finding(
                kind="unwritten_output",
                title="Part of the output is never written",
                evidence=f"{amount} of the outputs of {case_label(worst_case)} ({_shape_text(worst_case)}) still hold "
                f"the poison value; {len(group)} case(s) affected.",
                advice=advice,
                action=action,
                cases=tuple(case_label(c) for c in group),
            )
        )
    if group := by_kind.get("nan_output"):
        count = sum(c.nan_inf_mismatch for c in group)
        findings.append(
            Finding(
                kind="nan_output",
                title="NaN or Inf in the output",
                evidence=f"{count or 'Some'} output element(s) are NaN/Inf where the float64 reference is finite "
                f"({len(group)} case(s)).",
                advice="NaN usually comes from memory read before anything wrote it (the grader poisons "
                "buffers with NaN): load every NRAM tile before computing on it, zero accumulators with "
                "__bang_write_zero, and do not compute past the loaded length.",
                action="Initialise on-chip buffers before computing on them",
                cases=tuple(case_label(c) for c in group),
            )
        )
    if group := by_kind.get("zero_output"):
        findings.append(
            Finding(
                kind="zero_output",
                title="Zeros instead of results",
                evidence=f"Mismatching outputs are all 0.0 in {len(group)} case(s).",
                advice="The output buffer was written before the result was computed, or from the wrong "
                "buffer: copy NRAM2GDRAM after the compute step and from the buffer the builtin wrote.",
                action="Copy the results back after computing them",
                cases=tuple(case_label(c) for c in group),
            )
        )
    if group := by_kind.get("precision"):
        worst_case = max(group, key=lambda c: c.diff1 or 0.0)
        findings.append(
            Finding(
                kind="precision",
                title="Results are close but outside the tolerance",
                evidence=f"{case_label(worst_case)}: DIFF1 {_num(worst_case.diff1)}, DIFF2 {_num(worst_case.diff2)}.",
                advice="Accumulate in fp32, keep the reduction order of one dot product together, and for "
                "sigmoid remember __bang_active_sigmoid saturates beyond +-7.75.",
                action="Tighten the numerics: accumulate in fp32",
                severity="warning" if len(group) < len(failing) else "error",
                cases=tuple(case_label(c) for c in group),
            )
        )
    if group := by_kind.get("wrong_values"):
        first = group[0]
        example = ""
        if first.mismatches:
            m = first.mismatches[0]
            example = f" First at index {m.index}: expected {_num(m.expected)}, got {_num(m.actual)}."
        findings.append(
            Finding(
                kind="wrong_values",
                title="Wrong values",
                evidence=f"{len(group)} case(s) differ from the reference beyond rounding.{example}",
                advice="Check the indexing: row-major left[M][N] times right[N][K] gives out[m][k] = "
                "sum_n left[m*N+n] * right[n*K+k]. With __bang_matmul, check the layout the right matrix "
                "must have in WRAM and the M/N/K argument order.",
                action="Check the indexing against the row-major layout",
                cases=tuple(case_label(c) for c in group),
            )
        )
    # the kind that explains the most failing cases first (stable: ties keep the order above)
    return pattern + sorted(findings, key=lambda f: -len(f.cases))


def _bare_result(cases: list[CaseResult]) -> GradeResult:
    """A results document around bare cases (callers that pass cases only): no sources to read."""
    return GradeResult.model_construct(cases=cases, submission_path="", source_excerpts=[], assignment="")


def _num(value: float | None) -> str:
    if value is None:
        return "unwritten"
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
    from_emulator = [diagnostic_finding(d, root) for d in diagnostics if d.severity == "error"]
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
        diagnostic_finding(d, root)
        for d in diagnostics
        if d.severity != "error" and diagnostic_kind(d) not in covered
    ]
    return findings
