"""Precompiled torch headers (bang_harness.toolchains): made with the build's own flags, put on the include
path ahead of torch's, really used by a harness build, and a build that cannot use them still compiles."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from bang_harness import build as harness_build
from bang_harness import toolchains
from bang_harness.build import ExtensionBuilder
from bang_harness.paths import HarnessPaths
from bang_harness.plan import BuildPlan
from bang_harness.toolchains import StepOutcome

from grader.backends import get_backend
from grader.sandbox.base import Limits, Mounts, Phase
from grader.sandbox.process import ProcessRunner, ensure_host_pch

REPO = Path(__file__).resolve().parents[2]
BINDING = """
#include <torch/extension.h>
torch::Tensor twice(torch::Tensor x) { return x * 2; }
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("twice", &twice); }
"""


def _captured_cpp_commands(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                           pchs: dict[toolchains.BindingCompiler, Path]) -> list[list[str]]:
    """The compile commands build.py runs for a binding, in order, when none of them compiles it (run_step
    replaced: nothing is compiled)."""
    submission = tmp_path / "sub"
    (submission / "cpp").mkdir(parents=True)
    (submission / "cpp" / "binding.cpp").write_text(BINDING)
    commands: list[list[str]] = []

    def fake_step(command: list[str]) -> StepOutcome:
        commands.append(command)
        return StepOutcome(command, 1, "error: no")

    monkeypatch.setattr(harness_build, "run_step", fake_step)
    monkeypatch.setattr(toolchains, "pch_dir", lambda compiler=toolchains.GXX: pchs.get(compiler))
    paths = HarnessPaths(submission, tmp_path / "build", tmp_path / "io")
    ExtensionBuilder(paths, toolchains.get_toolchain("emu"), BuildPlan.handout(submission, "some_ext")).build()
    return [c for c in commands if "-c" in c and c[c.index("-c") + 1].endswith(".cpp")]


def _flags(command: list[str]) -> list[str]:
    # -MD -MF <depfile>: the dependency list the object cache reads; no effect on code or on the PCH.
    return [a for a in command if a.startswith("-") and a not in ("-I", "-c", "-o", "-MD", "-MF", "-include")
            and a not in (c.error_limit for c in toolchains.BINDING_COMPILERS)]


def test_pch_flags_are_the_builds_own_less_the_extension_name(tmp_path, monkeypatch):
    pchs = {compiler: tmp_path / "pch" / compiler.command for compiler in toolchains.BINDING_COMPILERS}
    commands = _captured_cpp_commands(tmp_path, monkeypatch, pchs)
    # each precompiled header forced first, clang's before g++'s, then g++ as written (the outcome kept)
    assert [(c[0], "-include" in c) for c in commands] == [("clang++-19", True), ("g++", True), ("g++", False)]
    for command, compiler in zip(commands, [toolchains.CLANG, toolchains.GXX, toolchains.GXX], strict=True):
        flags = _flags(command)
        assert "-DTORCH_EXTENSION_NAME=some_ext" in flags
        flags.remove("-DTORCH_EXTENSION_NAME=some_ext")
        assert sorted(flags) == sorted(toolchains.pch_compile_flags(compiler)), "build.py's C++ flags changed: " \
            "update toolchains.torch_build / PCH_CODEGEN_FLAGS / BindingCompiler, or the PCH is silently never used"
        assert compiler.error_limit in command
        includes = [command[i + 1] for i, a in enumerate(command) if a == "-I"]
        torch_dirs = list(toolchains.torch_build().includes)
        assert includes[-len(torch_dirs):] == torch_dirs
        # the compiler's own PCH folder, ahead of torch's headers
        assert includes[0] == str(pchs[compiler]), includes


def test_without_precompiled_headers_a_binding_is_compiled_by_gxx_as_written(tmp_path, monkeypatch):
    commands = _captured_cpp_commands(tmp_path, monkeypatch, {})
    assert [(c[0], "-include" in c) for c in commands] == [("g++", False)]
    assert sorted(_flags(commands[0])) == sorted([*toolchains.pch_compile_flags(), "-DTORCH_EXTENSION_NAME=some_ext"])


def test_pch_dir_needs_a_complete_folder_for_this_key(tmp_path, monkeypatch):
    monkeypatch.setenv("BANG_GRADER_PCH", str(tmp_path))
    monkeypatch.setattr(toolchains, "pch_key", lambda compiler=toolchains.GXX: "k1")
    (tmp_path / "k1" / "torch").mkdir(parents=True)
    assert toolchains.pch_dir() is None  # a half-made folder (no stamp) is never used
    (tmp_path / "k1" / toolchains.PCH_STAMP).write_text("{}")
    assert toolchains.pch_dir() == tmp_path / "k1"
    monkeypatch.setenv("BANG_GRADER_NO_PCH", "1")
    assert toolchains.pch_dir() is None


def test_clangs_pch_key_follows_the_torch_headers_times_and_gxxs_does_not(tmp_path, monkeypatch):
    """clang refuses a PCH whose headers changed time (torch reinstalled in place): that must be a new key, or
    every build would try the stale PCH, fail and go to g++."""
    header = tmp_path / "extension.h"
    header.write_text("// torch")
    monkeypatch.setattr(toolchains, "_torch_headers", lambda headers: [header])
    before = toolchains.pch_key(toolchains.CLANG), toolchains.pch_key(toolchains.GXX)
    os.utime(header, ns=(header.stat().st_atime_ns, header.stat().st_mtime_ns + 10**9))
    after = toolchains.pch_key(toolchains.CLANG), toolchains.pch_key(toolchains.GXX)
    assert after[0] != before[0] and after[1] == before[1]


def test_the_torch_record_gives_a_build_its_flags_without_importing_torch(tmp_path):
    record = toolchains.write_torch_build_record(tmp_path)
    fields = json.loads(record.read_text())
    assert tuple(fields["includes"]) == toolchains.torch_build().includes
    probe = ("import sys; from bang_harness import build, toolchains; "
             "flags = (toolchains.pch_dir(), build.torch_compile_flags('x'), build.torch_link_args(), "
             "toolchains.pch_compile_flags()); print('torch' in sys.modules, toolchains.torch_build().version)")
    env = {**os.environ, "PYTHONPATH": str(REPO / "sandbox"), "BANG_GRADER_PCH": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False", fields["version"]]
    # A record that does not parse is passed over: the flags then come from torch itself, as without one.
    record.write_text("{")
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["True", fields["version"]]


@pytest.fixture(scope="session")
def host_pch() -> dict[toolchains.BindingCompiler, Path]:
    """The host's precompiled headers, by compiler (made once per machine, shared with every ProcessRunner
    build): g++'s always, clang's where clang++-19 is installed."""
    cache = Path(os.environ.get("BANG_EMU_CACHE") or Path.home() / ".cache" / "bang_emu")
    env = {**os.environ, "PYTHONPATH": str(REPO / "sandbox")}
    runner = ProcessRunner()
    problem = ensure_host_pch(runner.command(["python"])[0], cache, env)
    assert problem is None, problem
    folders = {compiler: toolchains.pch_dir(compiler) for compiler in toolchains.BINDING_COMPILERS}
    assert folders[toolchains.GXX] is not None and (folders[toolchains.GXX] / "torch/extension.h.gch").is_file()
    return {compiler: folder for compiler, folder in folders.items() if folder is not None}


@pytest.fixture(scope="session")
def host_clang_pch(host_pch) -> Path:
    if shutil.which(toolchains.CLANG.command) is None:
        pytest.skip(f"{toolchains.CLANG.command} is not installed here, so builds here never take the fast path "
                    "(scripts/setup-system.sh --tests installs it; the image carries its own)")
    folder = host_pch.get(toolchains.CLANG)
    assert folder is not None and (folder / "torch/extension.h.pch").is_file()
    return folder


def _build(tmp_path: Path, binding: str, pch_root: Path) -> tuple[bool, str]:
    submission = tmp_path / "sub"
    (submission / "cpp").mkdir(parents=True)
    (submission / "cpp" / "binding.cpp").write_text(textwrap.dedent(binding))
    (submission / "ops.py").write_text("import my_ops_ext\n")
    build, io = tmp_path / "build", tmp_path / "io"
    build.mkdir()
    io.mkdir()
    backend = get_backend("emu")
    env = {**backend.run_env(backend.resolve_device(None)), "BANG_GRADER_PCH": str(pch_root)}
    outcome = ProcessRunner().run(Phase.BUILD, backend.harness_argv(Phase.BUILD),
                                  Mounts(submission=submission, build=build, io=io), Limits(wall_seconds=900), env=env)
    info = json.loads((build / "build.json").read_text())
    return bool(info["ok"]) and outcome.ok, (build / "build.log").read_text()


TRIPWIRE_STUB = ("#pragma once\n#ifndef PYBIND11_VERSION_MAJOR\n#error \"the precompiled torch/extension.h was not "
                 "used\"\n#endif\n#include_next <torch/extension.h>\n")


def _tripwire_copy(folders: list[Path], root: Path) -> Path:
    """The PCH folders with a stub header that fails where torch's headers were not read before it: a compiler
    reads the stub after it used the PCH (a second include, torch's macros defined) or instead of it (none)."""
    for source in folders:
        folder = root / source.name
        (folder / "torch").mkdir(parents=True)
        for pch in (source / "torch").glob("extension.h.*"):
            (folder / "torch" / pch.name).symlink_to(pch)
        shutil.copy2(source / toolchains.PCH_STAMP, folder / toolchains.PCH_STAMP)
        (folder / "torch" / "extension.h").write_text(TRIPWIRE_STUB)
    return root


@pytest.mark.slow
def test_a_harness_build_uses_the_gxx_pch_even_after_the_bindings_own_includes(host_pch, tmp_path):
    gxx = host_pch[toolchains.GXX]
    root = _tripwire_copy([gxx], tmp_path / "pch")  # g++'s alone: the path of a machine without clang
    ok, log = _build(tmp_path / "uses", BINDING, root)
    assert ok, log[-3000:]
    assert re.search(r"^\$ g\+\+ .* -c \S+binding\.cpp .*  \(\d+\.\d s\)$", log, re.M), log[-3000:]  # its seconds
    assert f"-I {root / gxx.name}" in log
    # An include before torch's (every lab binding): g++ could not use the .gch at that include; the forced
    # -include puts it first.
    ok, log = _build(tmp_path / "after_its_own", "#include <vector>\n" + BINDING, root)
    assert ok, log[-3000:]
    assert f"-include {root / gxx.name / 'torch' / 'extension.h'}" in log
    assert "not compiled by" not in log


@pytest.mark.slow
def test_clang_compiles_a_binding_with_its_pch_and_g_plus_plus_what_clang_does_not(host_pch, host_clang_pch, tmp_path):
    root = _tripwire_copy(list(host_pch.values()), tmp_path / "pch")
    ok, log = _build(tmp_path / "fast", "#include <vector>\n" + BINDING, root)
    assert ok, log[-3000:]
    assert f"$ clang++-19 -include {root / host_clang_pch.name / 'torch' / 'extension.h'}" in log, log[-3000:]
    assert "not compiled by" not in log and "$ g++ -include" not in log
    # torch::nn's modules are torch's C++ frontend, which the fast path's torch/extension.h leaves out: g++
    # compiles this binding, with its own PCH, and says why.
    uses_nn = BINDING.replace("return x * 2;", "torch::nn::Linear unused(2, 2); return x * 2;")
    ok, log = _build(tmp_path / "nn", uses_nn, root)
    assert ok, log[-3000:]
    assert f"$ g++ -include {root / host_pch[toolchains.GXX].name / 'torch' / 'extension.h'}" in log, log[-3000:]
    assert "[not compiled by clang++-19: the outcome below is kept]" in log
    assert "Linear" not in log  # clang's error is not the student's problem: dropped


@pytest.mark.slow
def test_a_binding_that_needs_its_own_order_is_compiled_as_written(host_pch, tmp_path):
    """Code that fails with torch's headers first (here on purpose) still builds: as written, no -include."""
    binding = "#ifdef PYBIND11_VERSION_MAJOR\n#error torch came first\n#endif\n" + BINDING
    ok, log = _build(tmp_path / "own_order", binding, host_pch[toolchains.GXX].parent)
    assert ok, log[-3000:]
    assert "-include" not in log and "torch came first" not in log


@pytest.mark.docker
@pytest.mark.slow
def test_the_image_carries_a_pch_its_builds_use(emu_image):
    import docker

    script = textwrap.dedent('''
        import json, os, subprocess, sys
        from bang_harness import build, toolchains
        folder = toolchains.pch_dir()
        includes, defines = build.torch_compile_flags("student_ext")
        link = build.torch_link_args()
        imported = "torch" in sys.modules
        open("/tmp/b.cpp", "w").write(%r)
        cmd = ["g++", toolchains.torch_build().std, *toolchains.PCH_CODEGEN_FLAGS, *defines, "-I", str(folder),
               *[a for d in includes for a in ("-I", str(d))], "-H", "-Winvalid-pch", "-c", "/tmp/b.cpp",
               "-o", "/tmp/b.o"]
        done = subprocess.run(cmd, capture_output=True, text=True)
        open("/tmp/c.cpp", "w").write("#include <vector>\\n" + open("/tmp/b.cpp").read())
        forced = [*cmd[:1], "-include", str(folder / "torch/extension.h"), *cmd[1:-3], "/tmp/c.cpp", "-o", "/tmp/c.o"]
        later = subprocess.run(forced, capture_output=True, text=True)
        # clang's PCH, behind a stub that fails unless the PCH stood in for it
        fast = toolchains.pch_dir(toolchains.CLANG)
        os.makedirs("/tmp/t/torch")
        os.symlink(fast / "torch/extension.h.pch", "/tmp/t/torch/extension.h.pch")
        open("/tmp/t/torch/extension.h", "w").write(%r)
        clang = ["clang++-19", "-include", "/tmp/t/torch/extension.h", *toolchains.pch_compile_flags(toolchains.CLANG),
                 *defines, "-I", "/tmp/t", *[a for d in includes for a in ("-I", str(d))], "-c", "/tmp/c.cpp",
                 "-o", "/tmp/f.o"]
        quick = subprocess.run(clang, capture_output=True, text=True)
        print(json.dumps({"imported": imported, "folder": str(folder), "rc": done.returncode, "err": done.stderr[:3000],
                          "forced_rc": later.returncode, "forced_err": later.stderr[:3000], "fast": str(fast),
                          "fast_rc": quick.returncode, "fast_err": quick.stderr[:3000]}))
    ''') % (BINDING, TRIPWIRE_STUB)
    client = docker.from_env(timeout=600)
    output = client.containers.run(emu_image, ["python3", "-c", script], remove=True, network_mode="none",
                                   read_only=True, tmpfs={"/tmp": "size=256m"})
    facts = json.loads(output.decode().strip().splitlines()[-1])
    assert facts["folder"].startswith(str(toolchains.IMAGE_PCH_ROOT)), facts
    assert facts["imported"] is False, "the image's torch record is missing: every build phase imports torch"
    assert facts["rc"] == 0, facts["err"]
    # g++ -H marks a precompiled header it used with "!" (and "x" one it could not use)
    assert facts["err"].startswith(f"! {facts['folder']}/torch/extension.h.gch"), facts["err"][:500]
    # the image's folder holds the stub build.py passes with -include: a binding's own includes first still
    # get the .gch
    assert facts["forced_rc"] == 0, facts["forced_err"]
    assert facts["forced_err"].startswith(f"! {facts['folder']}/torch/extension.h.gch"), facts["forced_err"][:500]
    # and the fast path's: clang's PCH with the templates instantiated, used behind the tripwire stub
    assert facts["fast"].startswith(str(toolchains.IMAGE_PCH_ROOT)), facts
    assert facts["fast_rc"] == 0, facts["fast_err"]
