"""Assignment specs: pydantic models, loader, host references, seeds and concrete cases."""

from grader.spec.cases import PERF_GROUP, ConcreteCase, correctness_cases, perf_case
from grader.spec.loader import REFERENCE_ROOT, SpecError, available_assignments, load_assignment, parse_spec
from grader.spec.models import AssignmentSpec, StageSpec
from grader.spec.references import REFERENCES, Work
from grader.spec.seeds import SeedPlan

__all__ = ["PERF_GROUP", "REFERENCE_ROOT", "REFERENCES", "AssignmentSpec", "ConcreteCase", "SeedPlan", "SpecError", "StageSpec", "Work",
           "available_assignments", "correctness_cases", "load_assignment", "parse_spec", "perf_case"]
