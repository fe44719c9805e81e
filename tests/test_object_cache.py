"""grader.orchestration.object_cache: a binding object is shared only with builds whose compiler would read the
same files, never from a depfile that names what a sandbox could write; and a real docker grading of a second
fixture with the same binding reuses the first one's object and still gets its own verdict."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from bang_harness.plan import BuildPlan

from grader.orchestration import object_cache

ROOT = Path(__file__).resolve().parents[1]
VECTOR = ROOT / "reference_kernels" / "sigmoid" / "vector"
RECIPE = "cncc-emu|tag|0\0emu\0BANG_EMU_DEVICE=mlu370-x8"


@pytest.fixture
def sub(tmp_path: Path) -> Path:
    shutil.copytree(VECTOR, tmp_path / "sub")
    return tmp_path / "sub"


def _plan(root: Path) -> BuildPlan:
    return BuildPlan.handout(root, "my_ops_ext")


def _depfile(tmp_path: Path, *deps: str) -> Path:
    path = tmp_path / "obj" / "cpp_0_sigmoid_binding.d"
    path.parent.mkdir(exist_ok=True)
    path.write_text("/build/obj/cpp_0_sigmoid_binding.o: " + " \\\n  ".join(deps) + "\n")
    (tmp_path / "obj" / "cpp_0_sigmoid_binding.o").write_bytes(b"\x7fELF object")
    return path


HONEST = ("/submission/cpp/sigmoid_binding.cpp", "/usr/include/c++/12/vector", "/submission/mlu/sigmoid_vector.h",
          "/opt/bang-grader/pch/k/torch/extension.h.gch")


def test_depfile_parsing_follows_continuations_and_escaped_spaces() -> None:
    text = "/build/obj/a.o: /submission/cpp/a.cpp \\\n /submission/my\\ dir/b.h \\\n  /usr/include/stdio.h\n"
    assert object_cache.parse_depfile(text) == ["/submission/cpp/a.cpp", "/submission/my dir/b.h",
                                                "/usr/include/stdio.h"]


def test_an_object_is_found_where_the_files_it_read_are_the_same(sub: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    key = object_cache.object_key(_plan(sub), "cpp/sigmoid_binding.cpp", sub, RECIPE)
    dep = _depfile(tmp_path, *HONEST)
    assert key and object_cache.store(cache, key, sub, dep.with_suffix(".o"), dep)
    other = tmp_path / "other"
    shutil.copytree(sub, other)
    (other / "mlu" / "sigmoid_vector.mlu").write_text("// a different kernel: not read by the binding\n")
    assert object_cache.object_key(_plan(other), "cpp/sigmoid_binding.cpp", other, RECIPE) == key
    found = object_cache.find(cache, key, other)
    assert found is not None and found.read_bytes() == b"\x7fELF object"
    (other / "mlu" / "sigmoid_vector.h").write_text("// the binding reads this header\n")
    assert object_cache.find(cache, key, other) is None


@pytest.mark.parametrize("change", ["binding", "new_header", "recipe", "extension"])
def test_the_key_changes_with_what_decides_the_compile(sub: Path, change: str) -> None:
    before = object_cache.object_key(_plan(sub), "cpp/sigmoid_binding.cpp", sub, RECIPE)
    recipe, plan = RECIPE, _plan(sub)
    if change == "binding":
        (sub / "cpp" / "sigmoid_binding.cpp").write_text("// changed\n")
    elif change == "new_header":  # found before mlu/'s copy by an #include "sigmoid_vector.h" from cpp/
        (sub / "cpp" / "sigmoid_vector.h").write_text("// shadows\n")
    elif change == "recipe":
        recipe = RECIPE.replace("tag", "tag2")
    else:
        plan = BuildPlan.handout(sub, "other_ext")
    assert object_cache.object_key(plan, "cpp/sigmoid_binding.cpp", sub, recipe) != before


@pytest.mark.parametrize("forged", ["/io/prebuilt/x.h", "/build/obj/gen.h", "/tmp/planted.h", "relative.h",
                                    "/submission/link.h"])
def test_a_depfile_naming_what_a_sandbox_could_write_stores_nothing(sub: Path, tmp_path: Path, forged: str) -> None:
    (sub / "link.h").symlink_to(sub / "mlu" / "sigmoid_vector.h")
    key = object_cache.object_key(_plan(sub), "cpp/sigmoid_binding.cpp", sub, RECIPE)
    dep = _depfile(tmp_path, *HONEST, forged)
    assert key and not object_cache.store(tmp_path / "cache", key, sub, dep.with_suffix(".o"), dep)
    assert object_cache.find(tmp_path / "cache", key, sub) is None


def test_a_symlinked_binding_is_not_shared(sub: Path, tmp_path: Path) -> None:
    target = sub / "cpp" / "sigmoid_binding.cpp"
    (tmp_path / "elsewhere.cpp").write_bytes(target.read_bytes())
    target.unlink()
    target.symlink_to(tmp_path / "elsewhere.cpp")
    assert object_cache.object_key(_plan(sub), "cpp/sigmoid_binding.cpp", sub, RECIPE) is None


@pytest.mark.slow
@pytest.mark.docker
def test_a_second_fixture_with_the_same_binding_reuses_its_object_and_keeps_its_verdict(tmp_path: Path) -> None:
    from grader.orchestration import GradeEnvironment, GradeRequest, grade_submission
    from grader.results import Verdict
    from grader.sandbox.select import docker_status

    client, why = docker_status()
    if client is None:
        pytest.skip(f"the docker sandbox is not available: {why}")
    cache = tmp_path / "cache"  # its own: the session's may already hold these objects
    environment = GradeEnvironment(sandbox="docker", build_cache=cache)
    first = grade_submission(VECTOR, GradeRequest(), environment)
    second = grade_submission(ROOT / "reference_kernels" / "known_bad" / "tail_dropped", GradeRequest(), environment)
    assert first.build and second.build and not second.build.cached, second.message
    compile_line = "-c /submission/cpp/sigmoid_binding.cpp"
    assert compile_line in first.build.compiler_output
    assert "$ reuse prebuilt/cpp_0.o" in second.build.compiler_output
    assert compile_line not in second.build.compiler_output
    assert first.verdict in (Verdict.PASSED, Verdict.TOO_SLOW) and second.verdict == Verdict.WRONG_ANSWER
    assert second.build.duration_seconds < first.build.duration_seconds
