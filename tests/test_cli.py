"""The `grade` command line, run as a real process: exit codes, --json on stdout, spec check, self-tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.sandbox_ready import emu_image_ready

GRADE = [sys.executable, "-m", "grader.cli"]
ROOT = Path(__file__).resolve().parents[1]


def grade(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*GRADE, *args], capture_output=True, text=True, timeout=120, cwd=cwd)


def test_submit_of_a_broken_layout_exits_1_with_json_on_stdout(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "ops.py").write_text("def sigmoid(x):\n    return x\n")
    proc = grade("submit", str(tmp_path / "sub"), "--out", str(tmp_path / "out"), "--json")
    assert proc.returncode == 1, proc.stderr
    data = json.loads(proc.stdout)
    assert data["verdict"] == "ungradable_layout" and data["assignment"] == "sigmoid"
    assert "missing folder mlu/" in data["message"]
    assert "ungradable layout" in proc.stderr and "score: 0 / 100" in proc.stderr
    assert json.loads((tmp_path / "out" / "results.json").read_text())["verdict"] == "ungradable_layout"


def test_submit_writes_a_gradescope_export_when_asked(tmp_path):
    (tmp_path / "sub").mkdir()
    proc = grade("submit", str(tmp_path / "sub"), "--out", str(tmp_path / "out"),
                 "--gradescope", str(tmp_path / "gs" / "results.json"))
    assert proc.returncode == 1
    assert json.loads((tmp_path / "gs" / "results.json").read_text())["score"] == 0


def test_spec_check_reports_every_problem_and_fails(tmp_path):
    bad = tmp_path / "bad"
    bad.mkdir()
    text = (Path(__file__).parents[1] / "assignments" / "sigmoid" / "assignment.toml").read_text()
    (bad / "assignment.toml").write_text("bogus = 1\n" + text)
    (tmp_path / "bad2").mkdir()
    (tmp_path / "bad2" / "assignment.toml").write_text(text.replace('group = "tiny"', 'group = "tinny"', 1))
    (tmp_path / "bad3").mkdir()  # checks are chosen by name: a name no check module has is refused here
    (tmp_path / "bad3" / "assignment.toml").write_text(text.replace("[checks]\n", '[checks]\nrun = ["nan_inf", "typo"]\n'))
    proc = grade("spec", "check", str(bad), str(tmp_path / "bad2"), str(tmp_path / "bad3"), "sigmoid")
    assert proc.returncode == 1
    assert "bad3: [checks] run names unknown checks ['typo']" in proc.stdout
    assert "bad/assignment.toml: invalid assignment spec:\n  - bogus: unknown key (typo?)" in proc.stdout
    assert "case 'n1': group 'tinny' is not declared in [[groups]]" in proc.stdout
    assert "sigmoid: ok" in proc.stdout


def test_selftest_passes():
    proc = grade("selftest")
    assert proc.returncode == 0 and "accuracy: ok" in proc.stdout


def test_bad_options_are_usage_errors(tmp_path):
    proc = grade("submit", str(tmp_path), "--backend", "gpu")
    assert proc.returncode == 2 and "--backend must be one of emu, mlu" in proc.stderr


@pytest.mark.parametrize("args", [
    ("submit", "{tmp}/nowhere"),  # no such folder
    ("submit", "{root}/README.md"),  # not a folder
    ("submit", "{root}/reference_kernels/example", "-a", "nope"),  # unknown assignment
    ("submit", "{root}/reference_kernels/example", "--bogus"),  # unknown option
    ("submit", "{root}/reference_kernels/example", "--lang", "fr"),
    ("submit", "{tmp}/nowhere", "--server", "http://127.0.0.1:9"),  # the course server's client: the same rules
    ("submit", "{root}/reference_kernels/example", "--server", "http://127.0.0.1:9", "--lang", "fr"),
    ("batch", "{tmp}/nowhere", "-a", "sigmoid"),
    ("batch", "{tmp}", "-a", "nope"),
    ("batch", "{tmp}", "-a", "sigmoid", "--workers", "many"),
])
def test_usage_errors_are_one_line_exit_2_and_write_nothing(tmp_path, args):
    """Issue 28: a typo is not a student's failure (1) or the grader's (internal error): one line, status 2."""
    out = tmp_path / "out"
    proc = grade(*[a.format(tmp=tmp_path, root=ROOT) for a in args], "--out", str(out))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and proc.stderr.startswith(f"grade {args[0]}: error: "), \
        proc.stderr
    assert proc.stdout == "" and not out.exists()


def test_an_unknown_course_time_zone_is_a_usage_error(tmp_path):
    proc = grade("serve", "--data", str(tmp_path / "srv"), "--timezone", "Mars/Olympus")
    assert proc.returncode == 2 and "unknown time zone 'Mars/Olympus'" in proc.stderr, proc.stderr
    assert not (tmp_path / "srv").exists()


def test_every_help_lists_the_exit_codes():
    from grader.cli.app import ExitCode

    for verb in ([], ["submit"], ["batch"], ["calibrate"], ["doctor"], ["setup"], ["selftest"], ["images", "build"],
                 ["spec", "check"], ["spec", "schema"]):
        text = " ".join(grade(*verb, "--help").stdout.split())
        assert "Exit status:" in text, verb
        assert all(f"{code.value:d} " in text for code in ExitCode), (verb, text)


def test_doctor_lists_backends_sandboxes_and_fixes():
    proc = grade("doctor")
    assert "backend" in proc.stdout and "emu" in proc.stdout and "mlu" in proc.stdout
    assert "sandbox" in proc.stdout and "thresholds" in proc.stdout


def test_batch_is_a_thin_wrapper_that_refuses_unsandboxed_grading(tmp_path):
    proc = grade("batch", str(tmp_path), "--assignment", "sigmoid", "--sandbox", "none", "--out", str(tmp_path / "o"))
    assert proc.returncode == 2 and "batch refused" in proc.stderr and len(proc.stderr.splitlines()) == 1


# --- a machine that is not set up (grader.orchestration.environment.prepare_environment) ------------------

def test_no_sandbox_is_an_environment_error_with_the_fix_not_an_internal_error(tmp_path):
    env = {**os.environ, "DOCKER_HOST": f"unix://{tmp_path}/nothing-listens.sock"}
    proc = subprocess.run([*GRADE, "submit", str(ROOT / "reference_kernels" / "sigmoid" / "vector"), "--sandbox",
                           "docker", "--no-setup", "--out", str(tmp_path / "out"), "--json"],
                          capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 2, proc.stderr
    data = json.loads(proc.stdout)
    assert data["verdict"] == "environment_error" and data["assignment"] == "sigmoid" and data["score"] == 0
    assert "sudo ./grade setup" in data["message"] and "sudo ./grade setup" in proc.stderr
    assert json.loads((tmp_path / "out" / "results.json").read_text())["verdict"] == "environment_error"


@pytest.fixture
def machine(monkeypatch):
    """prepare_environment's view of the machine, every probe replaced: nothing is installed or started."""
    from grader.orchestration import environment

    state = {"root": False, "docker": False, "image": True, "base": True, "bwrap": True, "setup_ok": True,
             "setup_runs": 0, "image_builds": 0}

    def setup_script(log, tests=False):
        state["setup_runs"] += 1
        if state["setup_ok"]:
            state["docker"] = True
        return state["setup_ok"], "apt-get: failed" if not state["setup_ok"] else ""

    def build_image(log=None, rebuild=False):
        state["image_builds"] += 1
        state["image"] = True
        return "bang-grader-emu:test"

    monkeypatch.setattr(environment, "_is_root", lambda: state["root"])
    monkeypatch.setattr(environment, "_docker_ready", lambda: (state["docker"], "no Docker daemon answers"))
    monkeypatch.setattr(environment, "_image_state", lambda _backend: (state["image"], state["base"], "bang-grader-emu:test"))
    monkeypatch.setattr(environment, "bwrap_works", lambda: (state["bwrap"], "ok" if state["bwrap"] else "no bwrap"))
    monkeypatch.setattr(environment, "run_setup_script", setup_script)
    monkeypatch.setattr("grader.sandbox.images.ensure_emu_image", build_image)
    return state


def _prepare(**environment):
    from grader.orchestration import GradeEnvironment
    from grader.orchestration.environment import prepare_environment

    lines: list[str] = []
    return prepare_environment(GradeEnvironment(**environment), log=lines.append), lines


def test_as_root_a_bare_machine_is_set_up_then_graded_in_docker(machine):
    machine.update(root=True, image=False, base=False)
    prepared, lines = _prepare()
    assert prepared.sandbox == "docker" and machine["setup_runs"] == 1 and machine["image_builds"] == 1
    assert any("installing and starting" in line for line in lines)
    assert any("building the sandbox image" in line for line in lines)


def test_a_ready_machine_is_left_alone(machine):
    machine.update(root=True, docker=True)
    prepared, lines = _prepare()
    assert prepared.sandbox == "docker" and machine["setup_runs"] == 0 and machine["image_builds"] == 0
    assert lines == []


def test_without_root_a_self_check_falls_back_to_bubblewrap_and_says_so(machine):
    prepared, lines = _prepare()
    assert prepared.sandbox == "bwrap" and machine["setup_runs"] == 0
    assert "bubblewrap" in prepared.notes[0] and "sudo ./grade setup" in prepared.notes[0]


def test_without_root_docker_or_bwrap_it_stops_naming_the_fix(machine):
    from grader.orchestration.environment import EnvironmentProblem

    machine.update(bwrap=False)
    with pytest.raises(EnvironmentProblem) as problem:
        _prepare()
    assert problem.value.fix == "sudo ./grade setup" and "needs root" in str(problem.value)


def test_a_failed_setup_falls_back_and_batch_never_does(machine):
    from grader.orchestration.environment import EnvironmentProblem

    machine.update(root=True, setup_ok=False)
    prepared, _ = _prepare()
    assert prepared.sandbox == "bwrap" and machine["setup_runs"] == 1
    with pytest.raises(EnvironmentProblem, match="setup-system.sh failed"):
        _prepare(batch=True)
    with pytest.raises(EnvironmentProblem):
        _prepare(sandbox="docker")


def test_without_root_only_a_missing_base_image_stops_the_image_build(machine):
    machine.update(docker=True, image=False, base=True)
    assert _prepare()[0].sandbox == "docker" and machine["image_builds"] == 1  # the thin layer needs no root
    machine.update(image=False, base=False, bwrap=False)
    with pytest.raises(Exception, match="needs root"):
        _prepare()


def test_submit_keeps_builds_in_a_default_cache_and_prunes_it(tmp_path, monkeypatch):
    from grader.cli.app import default_build_cache, prune_build_cache

    monkeypatch.delenv("BANG_GRADER_BUILD_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_build_cache() == tmp_path / "xdg" / "bang-grader" / "builds"
    monkeypatch.setenv("BANG_GRADER_BUILD_CACHE", str(tmp_path / "mine"))
    assert default_build_cache() == tmp_path / "mine"
    for i in range(5):
        (tmp_path / "mine" / f"k{i}").mkdir(parents=True)
        os.utime(tmp_path / "mine" / f"k{i}", (1000 + i, 1000 + i))
    prune_build_cache(tmp_path / "mine", keep=2)
    assert sorted(p.name for p in (tmp_path / "mine").iterdir()) == ["k3", "k4"]


def test_setup_lines_and_the_fix_speak_the_students_language(machine):
    """`grade submit --lang zh` on a bare machine: every setup line and the fix are in Chinese (the reasons the
    machine's probes give, e.g. Docker's own, are quoted as they come)."""
    from grader.i18n import use_language
    from grader.orchestration.environment import EnvironmentProblem

    machine.update(root=True, image=False, base=False)
    with use_language("zh"):
        prepared, lines = _prepare()
    assert prepared.sandbox == "docker" and len(lines) >= 2
    assert all(line.startswith("环境准备：") for line in lines), lines
    assert any("正在构建沙箱镜像" in line for line in lines), lines
    machine.update(root=False, docker=False, bwrap=False)
    with use_language("zh"), pytest.raises(EnvironmentProblem) as problem:
        _prepare()
    assert "需要 root 权限" in str(problem.value) and "解决方法：sudo ./grade setup" in str(problem.value)


def test_doctor_in_chinese():
    proc = grade("doctor", "--lang", "zh")
    assert "类别" in proc.stdout and "沙箱" in proc.stdout and "后端" in proc.stdout, proc.stdout
    assert "area" not in proc.stdout and "status" not in proc.stdout


_DEV_TEST = '''\
import os, pathlib, unittest
import torch, torch_mlu


class TestOnTheEmulator(unittest.TestCase):
    def test_device_and_default_events(self):
        start, end = torch.mlu.Event(), torch.mlu.Event()  # torch_mlu times events made with the defaults
        start.record()
        y = (torch.ones(4).to("mlu") * 2).cpu()
        end.record()
        end.synchronize()
        self.assertEqual(y.tolist(), [2.0] * 4)
        self.assertEqual(start.hardware_time(end), 0.0)  # no BANG kernel ran: no modelled time

    def test_writes_stay_in_the_sandbox_copy(self):
        pathlib.Path("written_by_the_test.txt").write_text("x")

    def test_no_network(self):
        import socket
        with self.assertRaises(OSError):
            socket.create_connection(("1.1.1.1", 53), timeout=3)

    def test_fails(self):
        self.assertEqual(os.environ.get("BANG_EMU_DEVICE"), "no such device")
'''


def test_run_builds_nothing_without_setup_py_and_runs_the_projects_tests_in_the_sandbox(tmp_path):
    if not emu_image_ready():
        pytest.skip("grade run's test needs Docker and the emulation image (grade setup)")
    project = tmp_path / "my_project"
    (project / "tests").mkdir(parents=True)
    (project / "tests" / "test_dev.py").write_text(_DEV_TEST)
    proc = subprocess.run([*GRADE, "run", str(project), "--sandbox", "docker", "--no-setup", "--", "python", "-m",
                           "unittest", "discover", "-s", "tests", "-v"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1, proc.stderr  # unittest's own status: one test fails on purpose
    for name in ("test_device_and_default_events", "test_writes_stay_in_the_sandbox_copy", "test_no_network"):
        assert f"{name} (test_dev.TestOnTheEmulator.{name}) ... ok" in proc.stderr, proc.stderr
    assert "test_fails (test_dev.TestOnTheEmulator.test_fails) ... FAIL" in proc.stderr
    assert "'mlu370-x8' != 'no such device'" in proc.stderr  # the emulated device profile reached the tests
    assert "modelled times" in proc.stderr and "setup.py build_ext" not in proc.stderr
    assert sorted(p.name for p in project.iterdir()) == ["tests"]  # the student's folder is never written


def test_run_passes_a_failed_setup_py_builds_status_on_and_skips_the_command(tmp_path):
    if not emu_image_ready():
        pytest.skip("grade run's test needs Docker and the emulation image (grade setup)")
    (tmp_path / "setup.py").write_text("import sys\nprint('building')\nsys.exit(3)\n")
    proc = subprocess.run([*GRADE, "run", str(tmp_path), "--sandbox", "docker", "--no-setup", "--", "python", "-c",
                           "print('command ran')"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 3 and "building" in proc.stdout and "command ran" not in proc.stdout
    assert "setup.py build_ext failed (exit status 3)" in proc.stderr

