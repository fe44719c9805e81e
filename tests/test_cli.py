"""The `grade` command line, run as a real process: exit codes, --json on stdout, spec check, self-tests."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

GRADE = [sys.executable, "-m", "grader.cli"]


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
    proc = grade("spec", "check", str(bad), str(tmp_path / "bad2"), "sigmoid")
    assert proc.returncode == 1
    assert "bad/assignment.toml: invalid assignment spec:\n  - bogus: unknown key (typo?)" in proc.stdout
    assert "case 'n1': group 'tinny' is not declared in [[groups]]" in proc.stdout
    assert "sigmoid: ok" in proc.stdout


def test_selftest_passes():
    proc = grade("selftest")
    assert proc.returncode == 0 and "accuracy: ok" in proc.stdout


def test_bad_options_are_usage_errors(tmp_path):
    proc = grade("submit", str(tmp_path), "--backend", "gpu")
    assert proc.returncode == 2 and "--backend must be one of emu, mlu" in proc.stderr


def test_doctor_lists_backends_sandboxes_and_fixes():
    proc = grade("doctor")
    assert "backend" in proc.stdout and "emu" in proc.stdout and "mlu" in proc.stdout
    assert "sandbox" in proc.stdout and "thresholds" in proc.stdout


def test_batch_is_a_thin_wrapper_that_refuses_unsandboxed_grading(tmp_path):
    proc = grade("batch", str(tmp_path), "--assignment", "sigmoid", "--sandbox", "none", "--out", str(tmp_path / "o"))
    assert proc.returncode == 2 and "batch refused" in proc.stdout
