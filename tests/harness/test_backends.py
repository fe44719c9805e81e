"""grader.backends: the emu and mlu strategies."""

from __future__ import annotations

import glob

import pytest

from grader.backends import get_backend
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
