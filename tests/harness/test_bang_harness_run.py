"""`python -m bang_harness run` through ProcessRunner, against a prebuilt cpp-only extension."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.slow

X = np.linspace(-6.0, 6.0, 1001, dtype=np.float32)  # odd length: a tail shape


def test_calls_are_recorded_one_by_one_and_failures_do_not_stop_the_others(host_run):
    host_run.add_input("x.npy", X)
    host_run.write_job([
        {"id": "ok", "entry": "sigmoid", "inputs": ["x.npy"], "warmup": 1, "timed_repeats": 3},
        {"id": "raises", "entry": "raises", "inputs": ["x.npy"]},
        {"id": "aborts", "entry": "aborts", "inputs": ["x.npy"]},
        {"id": "after_crash", "entry": "sigmoid", "inputs": ["x.npy"], "timed_repeats": 2},
        {"id": "missing", "entry": "no_such_function", "inputs": ["x.npy"]},
        {"id": "bad", "entry": "not_a_tensor", "inputs": ["x.npy"]},
        {"id": "torch_library", "entry": "sigmoid_op", "inputs": ["x.npy"]},
    ])
    outcome = host_run.harness("run")
    assert outcome.exit_code == 0, outcome.stderr_tail

    ok = host_run.result("ok")
    assert ok["ok"] and ok["error_kind"] is None
    assert len(ok["wall_us"]) == 3 and all(t > 0 for t in ok["wall_us"])
    assert ok["repeats_consistent"] is True
    expected = torch.sigmoid(torch.from_numpy(X).double()).numpy()
    out = host_run.output("ok")
    assert out.dtype == np.float32 and out.shape == X.shape
    np.testing.assert_allclose(out, expected, rtol=1e-6, atol=1e-7)

    raised = host_run.result("raises")
    assert raised["error_kind"] == "python_exception" and not raised["ok"]
    assert "student bug in raises()" in raised["error"] and "bang_harness" not in raised["error"]

    crashed = host_run.result("aborts")
    assert crashed["error_kind"] == "crash" and "SIGABRT" in crashed["error"]
    assert not (host_run.outputs / "aborts.npy").exists()

    after = host_run.result("after_crash")  # run by a fresh worker
    assert after["ok"] and len(after["wall_us"]) == 2
    np.testing.assert_allclose(host_run.output("after_crash"), expected, rtol=1e-6, atol=1e-7)

    assert host_run.result("missing")["error_kind"] == "python_exception"
    assert "no_such_function" in host_run.result("missing")["error"]
    bad = host_run.result("bad")
    assert bad["error_kind"] == "bad_output" and "list" in bad["error"]
    assert host_run.result("torch_library")["ok"], host_run.result("torch_library")["error"]
    np.testing.assert_allclose(host_run.output("torch_library"), expected, rtol=1e-6, atol=1e-7)


def test_fresh_inputs_poisoned_memory_and_the_number_of_invocations(host_run):
    host_run.add_input("x.npy", X)
    host_run.write_job([
        {"id": "mutates", "entry": "mutates", "inputs": ["x.npy"], "warmup": 1, "timed_repeats": 2},
        {"id": "unwritten", "entry": "unwritten", "inputs": ["x.npy"]},
        {"id": "counts", "entry": "counts", "inputs": ["x.npy"], "timed_repeats": 2},
    ])
    assert host_run.harness("run").exit_code == 0
    counted = host_run.result("counts")
    # No warm-up: the checked invocation is the first timing sample, so two samples take two invocations.
    assert len(counted["wall_us"]) == 2 and counted["repeats_consistent"] is False
    assert (host_run.output("counts") == 1.0).all()
    mutated = host_run.result("mutates")
    # Had the entry seen the zeroed tensor of an earlier call, a repeat would differ from the checked output.
    assert mutated["ok"] and mutated["repeats_consistent"] is True
    np.testing.assert_array_equal(host_run.output("mutates"), X)
    assert np.isnan(host_run.output("unwritten")).all()


def test_a_call_past_the_per_call_limit_is_killed_and_the_next_call_still_runs(host_run):
    host_run.add_input("x.npy", X)
    host_run.write_job([
        {"id": "hangs", "entry": "hangs", "inputs": ["x.npy"]},
        {"id": "next", "entry": "sigmoid", "inputs": ["x.npy"]},
    ], call_timeout_seconds=3)
    outcome = host_run.harness("run", wall_seconds=120)
    assert outcome.exit_code == 0 and not outcome.timed_out
    assert host_run.result("hangs")["error_kind"] == "timeout"
    assert host_run.result("next")["ok"]


def test_a_hanging_job_is_killed_by_the_runner_keeping_finished_calls(host_run):
    host_run.add_input("x.npy", X)
    host_run.write_job([
        {"id": "first", "entry": "sigmoid", "inputs": ["x.npy"]},
        {"id": "hangs", "entry": "hangs", "inputs": ["x.npy"]},
    ])
    # Generous: the limit must cover starting torch in the worker on a loaded 2-core machine.
    outcome = host_run.harness("run", wall_seconds=60)
    assert outcome.timed_out and outcome.exit_code is None
    assert outcome.wall_seconds < 70
    assert host_run.result("first")["ok"]
    assert not (host_run.outputs / "hangs.json").exists()


def test_an_unimportable_module_fails_every_call_with_the_reason(host_run):
    host_run.add_input("x.npy", X)
    host_run.write_job([{"id": "a", "entry": "sigmoid", "inputs": ["x.npy"]},
                        {"id": "b", "entry": "sigmoid", "inputs": ["x.npy"]}])
    job = (host_run.io / "job.json").read_text().replace('"module": "ops"', '"module": "no_such_module"')
    (host_run.io / "job.json").write_text(job)
    assert host_run.harness("run").exit_code == 0
    for call_id in ("a", "b"):
        result = host_run.result(call_id)
        assert result["error_kind"] == "load_failure" and "no_such_module" in result["error"]
        assert result["during"] == "load"


def test_a_missing_input_is_the_harness_fault_not_the_students(host_run):
    host_run.write_job([{"id": "a", "entry": "sigmoid", "inputs": ["absent.npy"]}])
    assert host_run.harness("run").exit_code == 0
    assert host_run.result("a")["error_kind"] == "harness_error"


def test_a_malformed_job_exits_non_zero(host_run):
    (host_run.io / "job.json").write_text('{"calls": [{"id": "../escape", "entry": "sigmoid"}]}')
    outcome = host_run.harness("run")
    assert outcome.exit_code == 2 and "not a safe file name" in outcome.stderr_tail


def test_a_crash_while_importing_the_module_fails_every_call(host_run, tmp_path):
    crashing = tmp_path / "crashing_submission"
    crashing.mkdir()
    (crashing / "ops.py").write_text("import os\nos.abort()\n")
    host_run.submission = crashing
    host_run.add_input("x.npy", X)
    host_run.write_job([{"id": "a", "entry": "sigmoid", "inputs": ["x.npy"]},
                        {"id": "b", "entry": "sigmoid", "inputs": ["x.npy"]}])
    assert host_run.harness("run").exit_code == 0
    for call_id in ("a", "b"):
        result = host_run.result(call_id)
        assert result["error_kind"] == "crash" and "importing the module" in result["error"]
        assert result["during"] == "load"


KEY_PEEK_OPS = """
import os, stat
import torch

def peek(x):
    # What student code could find of the trace key: the key file, the variable, any readable pipe.
    found = 0
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        try:
            if not stat.S_ISFIFO(os.fstat(fd).st_mode):
                continue
            os.set_blocking(fd, False)
            found += len(os.read(fd, 64))
        except OSError:
            pass
    io = os.environ.get("BANG_GRADER_IO", "/io")
    flags = [os.path.exists(os.path.join(io, "trace.key")), "BANG_EMU_KEY_FD" in os.environ, found > 0]
    return torch.tensor([float(f) for f in flags])
"""


def test_the_supervisor_takes_the_key_and_student_code_cannot_see_it(host_run, tmp_path):
    """Protocol step 1: read and unlink /io/trace.key, hand it over a pipe the runtime reads and closes."""
    from bang_harness.protocol import KEY_FILE

    peeking = tmp_path / "peeking_submission"
    peeking.mkdir()
    (peeking / "ops.py").write_text(KEY_PEEK_OPS)
    host_run.submission = peeking
    host_run.add_input("x.npy", X)
    (host_run.io / KEY_FILE).write_bytes(bytes(range(32)))
    host_run.write_job([{"id": "a", "entry": "peek", "inputs": ["x.npy"]}])
    outcome = host_run.harness("run")
    assert outcome.exit_code == 0, outcome.stderr_tail
    assert host_run.result("a")["ok"], host_run.result("a")
    assert host_run.output("a").tolist() == [0.0, 0.0, 0.0]  # no file, no variable, no readable key pipe
    assert not (host_run.io / KEY_FILE).exists()


def test_a_short_key_file_is_a_host_fault(host_run):
    from bang_harness.protocol import KEY_FILE

    (host_run.io / KEY_FILE).write_bytes(b"short")
    host_run.write_job([{"id": "a", "entry": "sigmoid", "inputs": []}])
    outcome = host_run.harness("run")
    assert outcome.exit_code == 2 and "expected 32" in outcome.stderr_tail
