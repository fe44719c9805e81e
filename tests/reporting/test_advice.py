"""The advice registry against the emulator and the assignments: every kind the runtime emits has advice, the
registry advises no kind the runtime never emits, and every assignment's [feedback] names registered kinds."""

from __future__ import annotations

import re
from pathlib import Path

import bang_emu
import pytest

from grader.reporting.advice import REGISTRY, advice_for, kinds
from grader.reporting.hints import case_hint, diagnose, is_tail_case
from grader.results import EmuDiagnostic, Mismatch, Verdict
from grader.spec import available_assignments, load_assignment

from . import samples

EMU = Path(bang_emu.__file__).resolve().parent
RUNTIME_SOURCES = sorted((EMU / "runtime").glob("*.cpp")) + sorted((EMU / "runtime").glob("*.h")) + sorted(
    (EMU / "include").rglob("*.h"))
_KIND = r'"([a-z]+(?:-[a-z]+)*)"'
# The three ways the runtime reports a check: kernel_error/kernel_warning(kind, ...) (its first argument may be
# a ternary of literals), emit(launch, severity, kind, ...), and a printed "bang-emu: error: <kind>: ..." line.
_CHECK_CALL = re.compile(r"\bkernel_(?:error|warning)\(\s*([^,;]*),")
_EMIT_CALL = re.compile(r"\bemit\([^,;]*,\s*\"(?:error|warning)\",\s*" + _KIND)
_PRINTED = re.compile(r"bang-emu: (?:error|warning): ([a-z]+(?:-[a-z]+)*):")


def emitted_kinds() -> set[str]:
    """Every diagnostic kind in the runtime sources, as the host names it (underscores)."""
    found: set[str] = set()
    for path in RUNTIME_SOURCES:
        text = path.read_text(encoding="utf-8", errors="replace")
        for match in _CHECK_CALL.finditer(text):
            argument = match.group(1)
            literals = re.findall(_KIND, argument)
            if not literals and "std::string" not in argument:  # a declaration names the parameter's type
                pytest.fail(f"{path.name}: kernel_error/kernel_warning with a computed kind ({argument!r}); "
                            "pass a string literal so the advice registry can be checked against it")
            found.update(literals)
        found.update(_EMIT_CALL.findall(text))
        found.update(_PRINTED.findall(text))
    return {kind.replace("-", "_") for kind in found}


def test_the_scan_finds_the_runtime_checks():
    kinds_seen = emitted_kinds()
    # one of each way of reporting: a plain call, a ternary, an emit(), a printed line
    assert {"gdram_out_of_bounds", "arithmetic_exception", "invalid_launch", "mpu_onchip_op", "host_access"} <= (
        kinds_seen)


def test_registry_advises_exactly_the_kinds_the_emulator_emits():
    emitted = emitted_kinds()
    advised = kinds("emulator")
    assert not emitted - advised, f"the emulator emits kinds without advice: {sorted(emitted - advised)}"
    assert not advised - emitted, f"advice for kinds the emulator never emits: {sorted(advised - emitted)}"


def test_every_verdict_without_cases_has_advice():
    case_verdicts = {Verdict.COMPILE_ERROR, Verdict.RUNTIME_ERROR, Verdict.WRONG_ANSWER, Verdict.TOO_SLOW,
                     Verdict.PASSED}
    assert kinds("verdict") == {v.value for v in Verdict if v not in case_verdicts}


def test_every_entry_is_complete():
    for kind, entry in REGISTRY.items():
        assert entry.title and entry.advice and entry.action, kind
        assert not entry.action.endswith("."), kind  # one-line imperatives


@pytest.mark.parametrize("assignment", available_assignments())
def test_assignment_feedback_names_registered_kinds(assignment):
    spec = load_assignment(assignment)
    unknown = set(spec.feedback.advice) - set(REGISTRY)
    assert not unknown, f"{assignment}: [feedback.advice] for unregistered kinds {sorted(unknown)}"
    assert set(spec.feedback.tail_groups) <= {g.name for g in spec.groups}


def test_assignment_text_replaces_the_generic_text():
    generic = REGISTRY["wrong_values"]
    matmul = advice_for("wrong_values", load_assignment("matmul").facts())
    assert "A[M][K] times B[K][N]" in matmul.advice and "left[M][N]" not in matmul.advice
    assert matmul.title == generic.title and matmul.action == generic.action  # fields it does not set stay
    assert advice_for("wrong_values", None) == generic  # a document from before it carried the assignment
    assert "__bang_active_sigmoid" in advice_for("use_builtin", load_assignment("sigmoid").facts()).action
    assert "__bang_matmul" in advice_for("use_builtin", load_assignment("matmul").facts()).action


def test_findings_and_case_hints_use_the_assignments_text():
    result = samples.failing_matmul()
    for case in result.cases:
        if not case.passed:  # written, and far off: wrong values rather than unwritten output
            case.unwritten_fraction = None
            case.mismatches = [Mismatch(index=[0, 0], expected=1.0, actual=5.0)]
    wrong = next(f for f in diagnose(result) if f.kind == "wrong_values")
    assert "A[M][K] times B[K][N]" in wrong.advice
    result.assignment_facts = load_assignment("sigmoid").facts()  # the document's, not its name's
    wrong = next(f for f in diagnose(result) if f.kind == "wrong_values")
    assert "sigmoid(x[i])" in wrong.advice
    case = next(c for c in result.cases if not c.passed)
    assert case_hint(case, result.assignment_facts) == REGISTRY["wrong_values"].case_hint


def test_tail_groups_come_from_the_assignment():
    case = samples.failing_matmul().cases[0]
    case.shapes = {"x": [4096]}
    case.group = "tail"
    assert is_tail_case(case, load_assignment("matmul").feedback)
    assert not is_tail_case(case)  # without the spec only the shape counts, and 4096 is aligned
    case.group = "aligned"
    assert not is_tail_case(case, load_assignment("matmul").feedback)


def test_an_emitted_kind_without_a_registry_entry_reads_generic():
    result = samples.runtime_error()
    result.stages[0].trace.diagnostics = []
    result.cases[1].diagnostics = [EmuDiagnostic(kind="arithmetic-exception", message="division by zero")]
    finding = diagnose(result)[0]
    assert finding.kind == "arithmetic_exception" and "zero" in finding.advice
