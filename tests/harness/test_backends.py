"""grader.backends and bang_harness.backends: the emu and mlu strategies, host side and sandbox side."""

from __future__ import annotations

import glob

import pytest
from bang_harness import backends as harness_backends
from bang_harness.job import CallResult
from bang_harness.protocol import ErrorKind

from grader.backends import BACKENDS, get_backend
from grader.sandbox.base import Phase


def test_emu_backend_describes_the_emulator():
    emu = get_backend("emu")
    assert emu.name == "emu" and emu.timing_source == "modelled"
    assert emu.default_device == "mlu370-x8" and emu.default_device in emu.devices()
    assert {"mlu370-x4", "mlu270"} <= set(emu.devices())
    assert emu.run_env(None) == {"BANG_EMU_DEVICE": "mlu370-x8"}
    assert emu.run_env("mlu370-x4") == {"BANG_EMU_DEVICE": "mlu370-x4"}
    assert emu.timing_label(None) == "modelled (mlu370-x8)"
    ok, reason = emu.available()
    assert ok, reason
    assert emu.toolchain_version().startswith("cncc-emu ") and "g++ " in emu.toolchain_version()


def test_an_unknown_emulated_device_is_refused():
    with pytest.raises(ValueError, match="mlu999"):
        get_backend("emu").run_env("mlu999")


def test_harness_commands_per_phase():
    assert get_backend("emu").harness_argv(Phase.BUILD) == [
        "python3", "-m", "bang_harness", "build", "--backend", "emu"]
    assert get_backend("mlu").harness_argv(Phase.BUILD)[-1] == "mlu"
    assert get_backend("mlu").harness_argv(Phase.RUN) == ["python3", "-m", "bang_harness", "run"]


def test_mlu_backend_reports_hardware_timing_and_card_indices():
    mlu = get_backend("mlu")
    assert mlu.timing_source == "hardware" and mlu.default_device == "0"
    assert mlu.run_env("1") == {"MLU_VISIBLE_DEVICES": "1"}
    with pytest.raises(ValueError):
        mlu.run_env("mlu370-x8")


@pytest.mark.skipif(bool(glob.glob("/dev/cambricon_dev*")), reason="an MLU is present here")
def test_mlu_backend_is_unavailable_without_a_card_and_says_why():
    ok, reason = get_backend("mlu").available()
    assert not ok and ("torch_mlu" in reason or "cambricon_dev" in reason)
    assert get_backend("mlu").devices() == []


@pytest.mark.mlu
@pytest.mark.skipif(not glob.glob("/dev/cambricon_dev*"), reason="no MLU card (/dev/cambricon_dev*) here")
def test_mlu_backend_is_available_with_a_card():
    mlu = get_backend("mlu")
    assert mlu.available()[0] and "0" in mlu.devices()


def test_unknown_backend():
    with pytest.raises(ValueError, match="emu, mlu"):
        get_backend("gpu")


def test_every_backend_has_its_two_halves_and_nothing_else():
    """A backend is grader/backends/<name>.py (found by discovery) and bang_harness/backends/<name>.py (looked
    up by the job's backend name): each side names exactly the other's backends."""
    assert sorted(BACKENDS) == harness_backends.names() and {"emu", "mlu"} <= set(BACKENDS)
    for name in BACKENDS:
        assert harness_backends.get_harness_backend(name).name == name
    with pytest.raises(ValueError, match="gpu"):
        harness_backends.get_harness_backend("gpu")


def test_batch_slots_and_result_keys_are_the_backends_decision(monkeypatch):
    emu, mlu = get_backend("emu"), get_backend("mlu")
    assert emu.batch_devices(3, "mlu270") == ["mlu270"] * 3 and len(emu.batch_devices(None, None)) >= 1
    assert emu.result_key_device("mlu270") == "mlu270" and emu.result_key_device(None) == ""
    monkeypatch.setattr(type(mlu), "devices", lambda self: ["0", "1", "2"])  # the cards /dev would list
    assert mlu.batch_devices(None, None) == ["0", "1", "2"] and mlu.batch_devices(1, "1,2") == ["1"]
    assert mlu.result_key_device("2") == ""  # cards are alike: a result stands for every card
    monkeypatch.setattr(type(mlu), "devices", lambda self: [])
    with pytest.raises(ValueError, match="no usable MLU card"):
        mlu.batch_devices(None, None)


def test_the_harness_sides_device_facts():
    emu, mlu = harness_backends.get_harness_backend("emu"), harness_backends.get_harness_backend("mlu")
    assert emu.loads_emulator_runtime and not mlu.loads_emulator_runtime
    assert emu.worker_env("mlu270") == {"BANG_EMU_DEVICE": "mlu270"} and emu.worker_env(None) == {}
    assert mlu.worker_env("1") == {}  # the host's MLU_VISIBLE_DEVICES already picked the card
    cnrt = CallResult.failure(ErrorKind.PYTHON_EXCEPTION, "RuntimeError: CNRT error: cnrtErrorSysNoMem")
    fault = CallResult.failure(ErrorKind.EMULATOR_ERROR, "bang-emu: out of bounds")
    assert mlu.leaves_device_faulted(cnrt) and mlu.leaves_device_faulted(fault)
    assert not emu.leaves_device_faulted(cnrt) and emu.leaves_device_faulted(fault)
    assert type(emu.toolchain()).__name__ == "EmuToolchain" and mlu.toolchain().name == "mlu"
