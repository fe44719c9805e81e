"""The host's build plan as the harness reads it, and the dotted entries the lab layouts resolve to."""

from __future__ import annotations

import types

import pytest
import torch
from bang_harness.plan import BUILD_PLAN_FILE, BuildPlan, PlanError, load_plan
from bang_harness.worker import resolve_entry


def test_a_plan_round_trips_and_resolves_includes_once(tmp_path):
    plan = BuildPlan("libmlu_custom_ext", ("p/mlu/src/k.mlu",), ("p/mlu/src/b.cpp",), ("p/mlu/include",))
    (tmp_path / BUILD_PLAN_FILE).write_text(plan.to_json())
    assert load_plan(tmp_path, tmp_path / "sub", "unused") == plan
    mlu, cpp, includes = plan.resolve(tmp_path / "sub")
    assert mlu == [tmp_path / "sub/p/mlu/src/k.mlu"] and cpp == [tmp_path / "sub/p/mlu/src/b.cpp"]
    assert includes == [tmp_path / "sub/p/mlu/include", tmp_path / "sub/p/mlu/src"]


def test_prebuilt_objects_round_trip(tmp_path):
    plan = BuildPlan("ext", ("mlu/k.mlu",), ("cpp/b.cpp", "cpp/c.cpp"), (), prebuilt=(("cpp/c.cpp", "cpp_1.o"),))
    assert BuildPlan.from_json(plan.to_json()) == plan


def test_without_a_plan_the_handout_folders_are_built(tmp_path):
    for name in ("mlu/b.mlu", "mlu/a.mlu", "cpp/x.cpp", "mlu/sub/c.mlu"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    assert load_plan(tmp_path / "io", tmp_path, "ext") == BuildPlan("ext", ("mlu/a.mlu", "mlu/b.mlu"), ("cpp/x.cpp",),
                                                                    ("mlu", "cpp"))


@pytest.mark.parametrize("plan", [
    {"extension": "a.b", "mlu_sources": [], "cpp_sources": []},
    {"extension": "ext", "mlu_sources": ["../../etc/passwd"], "cpp_sources": []},
    {"extension": "ext", "mlu_sources": [], "cpp_sources": ["/abs.cpp"]},
    {"mlu_sources": []},
    {"extension": "ext", "mlu_sources": [], "cpp_sources": ["b.cpp"], "prebuilt": {"other.cpp": "cpp_0.o"}},
    {"extension": "ext", "mlu_sources": [], "cpp_sources": ["b.cpp"], "prebuilt": {"b.cpp": "../x.o"}},
])
def test_a_plan_cannot_leave_the_submission_or_name_a_bad_module(plan):
    import json

    with pytest.raises(PlanError):
        BuildPlan.from_json(json.dumps(plan))


def test_entries_are_dotted_paths_from_the_module_and_torch_ops_from_torch():
    package = types.ModuleType("mlu_custom_ext")
    package.mlu_functions = types.SimpleNamespace(sigmoid=torch.sigmoid)
    assert resolve_entry(package, "mlu_functions.sigmoid") is torch.sigmoid
    assert resolve_entry(package, "mlu_functions.tanh") is None
    assert resolve_entry(torch, "ops.aten.sigmoid") is torch.ops.aten.sigmoid
    assert resolve_entry(torch, "ops.no_such_namespace_13.op") is None  # torch.ops raises, not AttributeError
