"""Structural requirements of a stage, checked against the emulator trace (e.g. the vector stage must call
__bang_matmul, the multi-core stage must run on more than one core)."""

from __future__ import annotations

from grader.i18n import _
from grader.results import RequirementResult, TraceSummary
from grader.spec.models import BuiltinCalled, FuncType, MinCores, OnchipUsed, RequirementSpec


def check_requirements(requirements: list[RequirementSpec], trace: TraceSummary | None,
                       trace_available: bool) -> list[RequirementResult]:
    results = []
    for req in requirements:
        if not trace_available:
            results.append(RequirementResult(name=req.name, description=_(req.description), passed=True,
                                             detail=_("not checked: this backend has no emulator trace")))
            continue
        passed, detail = evaluate(req, trace)
        results.append(RequirementResult(name=req.name, description=_(req.description), passed=passed,
                                         detail=detail))
    return results


def evaluate(req: RequirementSpec, trace: TraceSummary | None) -> tuple[bool, str]:
    if trace is None:
        return False, _("no kernel launch was recorded")
    check = req.check
    if isinstance(check, BuiltinCalled):
        count = trace.builtin_counts.get(check.builtin, 0)
        return count >= check.min_count, _("{builtin} called {count} time(s) per call").format(
            builtin=check.builtin, count=count)
    if isinstance(check, MinCores):
        return trace.cores_used >= check.cores, _("ran on {n} core(s)").format(n=trace.cores_used)
    if isinstance(check, FuncType):
        return trace.func_type in check.one_of, _("launched as {func_type}").format(func_type=trace.func_type)
    if isinstance(check, OnchipUsed):
        used = trace.onchip_peak_bytes.get(check.memory, 0)
        return used >= check.min_bytes, _("peak {memory} use {used} bytes").format(memory=check.memory.upper(),
                                                                                   used=used)
    raise TypeError(f"unknown requirement {type(check).__name__}")
