"""Which harness commands a slot may run as a job (bang_harness.protocol.slot_command: the host routes by it, the
zygote refuses anything else) and what a container's command label says (docker_settings.command_of)."""

from __future__ import annotations

from bang_harness.protocol import SLOT_ARGV_PREFIX, slot_command

from grader.sandbox.docker_settings import command_of

HARNESS = list(SLOT_ARGV_PREFIX)


def test_a_slot_runs_the_rounds_and_the_replay_and_nothing_else() -> None:
    assert slot_command(HARNESS + ["run"]) == "run"
    assert slot_command(HARNESS + ["replay"]) == "replay"
    for argv in (HARNESS + ["build", "--backend", "emu"], HARNESS + ["make-engine"], HARNESS + ["run", "extra"],
                 HARNESS + ["zygote", "--profile", "p"], HARNESS, ["python3", "-c", "run"], ["run"], []):
        assert slot_command(argv) is None, argv


def test_a_containers_command_label_names_the_harness_command_or_the_program() -> None:
    assert command_of(HARNESS + ["replay"]) == "replay"
    assert command_of(HARNESS + ["build", "--backend", "emu"]) == "build"
    assert command_of(["/usr/bin/true"]) == "true"
    assert command_of(HARNESS) == "python3" and command_of([]) == ""
