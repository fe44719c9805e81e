"""Structural requirements of a stage, checked against the emulator trace (e.g. the vector stage must call
__bang_matmul, the multi-core stage must run on more than one core)."""

from __future__ import annotations

from grader.results import RequirementResult, TraceSummary
from grader.spec.models import BuiltinCalled, FuncType, MinCores, OnchipUsed, RequirementSpec


def check_requirements(requirements: list[RequirementSpec], trace: TraceSummary | None,
                       trace_available: bool) -> list[RequirementResult]:
    results = []
    for req in requirements:
        if not trace_available:
            results.append(RequirementResult(name=req.name, description=req.description, passed=True,
                                             detail="not checked: this backend has no emulator trace"))
            continue
        passed, detail = evaluate(req, trace)
        results.append(RequirementResult(name=req.name, description=req.description, passed=passed, detail=detail))
    return results


def evaluate(req: RequirementSpec, trace: TraceSummary | None) -> tuple[bool, str]:
    if trace is None:
        return False, "no kernel launch was recorded"
    check = req.check
    if isinstance(check, BuiltinCalled):
        count = trace.builtin_counts.get(check.builtin, 0)
        return count >= check.min_count, f"{check.builtin} called {count} time(s) per call"
    if isinstance(check, MinCores):
        return trace.cores_used >= check.cores, f"ran on {trace.cores_used} core(s)"
    if isinstance(check, FuncType):
        return trace.func_type in check.one_of, f"launched as {trace.func_type}"
    if isinstance(check, OnchipUsed):
        used = trace.onchip_peak_bytes.get(check.memory, 0)
        return used >= check.min_bytes, f"peak {check.memory.upper()} use {used} bytes"
    raise TypeError(f"unknown requirement {type(check).__name__}")
