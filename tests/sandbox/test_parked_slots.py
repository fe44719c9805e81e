"""Parked slots (issue 41; grader.sandbox.slot_runner.park_at_exit): a `grade submit` leaves its warm slots for the
next grader process on the host, which adopts them instead of starting a container and importing torch. Real
containers, real `grade submit`s, real reapers: a parked slot outlives the process that parked it (its reaper
and the sweep leave it), is adopted whole (the same container, the same verdicts), ends itself when nobody comes,
and is taken down with an adopter that is killed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from grader.sandbox import slot_runner
from grader.sandbox.docker_runner import container_summaries, summary_name, sweep_leftovers
from grader.sandbox.docker_settings import PARKED_NAME, RUN_LABEL, TAG_ENV, TAG_LABEL, owner_of

pytestmark = pytest.mark.docker

ROOT = Path(__file__).resolve().parents[2]
VECTOR = ROOT / "reference_kernels" / "sigmoid" / "vector"


def _needs_slots() -> None:
    if not slot_runner.slots_possible():
        pytest.skip("slots need root, mount and a local Docker daemon sharing our mount namespace")


@pytest.fixture
def tag(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """This test's containers carry a tag of their own; every slot it parked is removed after it."""
    value = uuid.uuid4().hex
    monkeypatch.setenv(TAG_ENV, value)
    yield value
    _forget_parked(value)
    client = docker.from_env(timeout=60)
    for summary in container_summaries(client, f"{TAG_LABEL}={value}"):
        client.api.remove_container(summary["Id"], force=True)


def _ours(tag: str) -> list[dict]:
    return container_summaries(docker.from_env(timeout=60), f"{TAG_LABEL}={tag}")


def _parked(tag: str) -> dict[str, dict]:
    """This test's parked slots' records (by container id) whose containers are this test's."""
    root = slot_runner._parked_root()
    assert root is not None
    ids = {s["Id"] for s in _ours(tag)}
    return {record["container"]: record for _, record in slot_runner._parked_records(root)
            if record.get("container") in ids}


def _forget_parked(tag: str) -> None:
    root = slot_runner._parked_root()
    client = docker.from_env(timeout=60)
    if root is None:
        return
    ids = {s["Id"] for s in container_summaries(client, f"{TAG_LABEL}={tag}")}
    for path, record in slot_runner._parked_records(root):
        if record.get("container") in ids:
            path.unlink(missing_ok=True)
            slot_runner._remove_parked(client, record, root)


def _submit(out: Path, seconds: float) -> dict:
    env = {**os.environ, slot_runner.PARK_ENV: str(seconds), slot_runner.SLOTS_ENV: "1"}
    done = subprocess.run([sys.executable, "-m", "grader.cli", "submit", str(VECTOR), "--sandbox", "docker",
                           "--out", str(out), "--no-setup"], capture_output=True, text=True, env=env, timeout=600)
    result = json.loads((out / "results.json").read_text())
    # the vector stage's reference: correct everywhere, too slow for the later stages (exit status 1, not an error)
    assert (done.returncode, result["verdict"]) == (1, "too_slow"), done.stdout[-3000:] + done.stderr[-3000:]
    return result


def _wait_until(what, seconds: float = 60.0):
    deadline = time.monotonic() + seconds
    while True:
        found = what()
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.25)


def test_a_submit_parks_its_slots_and_the_next_submit_adopts_them_with_the_same_grades(
        emu_image: str, tag: str, tmp_path: Path) -> None:
    _needs_slots()
    first = _submit(tmp_path / "first", 120)
    parked = _parked(tag)
    assert parked, f"the first submit parked no slot: {[summary_name(s) for s in _ours(tag)]}"
    names = {s["Id"]: summary_name(s) for s in _ours(tag)}
    assert all(names[c].startswith(PARKED_NAME) for c in parked), names
    # The parker is gone and its reaper has read the end of its lifeline; they, and the sweep, left the parked slots.
    time.sleep(1.0)
    assert not set(sweep_leftovers(only_dead_owners=True)) & set(names.values())
    running = {s["Id"] for s in _ours(tag) if s.get("State") == "running"}
    assert set(parked) <= running, "a parked slot outlived its parker's exit, its reaper and the sweep"
    assert all(owner_of(names[c], {}) is None for c in parked)

    second = _submit(tmp_path / "second", 120)
    assert [(r["verdict"], r["score"], [(c["name"], c["verdict"]) for c in r["cases"]]) for r in (first, second)] == \
        [("too_slow", 80, [(c["name"], c["verdict"]) for c in first["cases"]])] * 2
    again = _parked(tag)
    # Adopted, used and parked again: the very containers of the first submit, with more jobs behind them.
    assert set(again) == set(parked), (sorted(parked), sorted(again))
    assert all(again[c]["jobs"] > parked[c]["jobs"] for c in parked), (parked, again)
    assert len({s["Id"] for s in _ours(tag)}) == len(parked), "the second submit started no slot of its own"


def _park_one(emu_image: str, seconds: float) -> subprocess.CompletedProcess:
    """A process that takes one slot, gives it back and exits, parking it (PARK_ENV = seconds)."""
    code = ("import docker\n"
            "from grader.sandbox import slot_runner\n"
            "from grader.sandbox.base import Limits\n"
            "slot_runner.park_at_exit()\n"
            f"slot = slot_runner._POOL.take(docker.from_env(), {emu_image!r}, Limits())\n"
            "slot_runner._POOL.give_back(slot)\n")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, slot_runner.PARK_ENV: str(seconds)})


def test_a_parked_slot_nobody_adopts_ends_itself_and_is_cleared_by_the_next_process(
        emu_image: str, tag: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _needs_slots()
    from grader.sandbox.base import Limits

    done = _park_one(emu_image, 3)
    assert done.returncode == 0, done.stderr[-3000:]
    (container, record), = _parked(tag).items()
    root = slot_runner._parked_root()
    assert root is not None and (root / record["id"]).is_dir()
    # ended, or ended and already removed by the sweep of a grading starting meanwhile (another test's)
    ended = _wait_until(lambda: not [s for s in _ours(tag) if s["Id"] == container and s.get("State") == "running"],
                        60)
    assert ended, "the parked slot's zygote did not end it after its idle seconds"
    # Other limits are another kind of slot: not adopted, and a live one's record is left alone.
    monkeypatch.setenv(slot_runner.PARK_ENV, "60")
    client = docker.from_env(timeout=60)
    assert slot_runner._adopt_parked(client, emu_image, Limits(memory_bytes=Limits().memory_bytes * 2)) is None
    assert not _parked(tag), "an ended parked slot's record was cleared by the process that looked"
    assert not [s for s in _ours(tag) if s["Id"] == container], "... and its container removed"
    assert not (root / record["id"]).exists() and f" {root / record['id']} " not in Path("/proc/self/mountinfo").read_text()


def test_the_parkers_reaper_leaves_its_parked_slot_and_an_adopter_killed_takes_it_down(
        emu_image: str, tag: str) -> None:
    _needs_slots()
    done = _park_one(emu_image, 120)
    assert done.returncode == 0, done.stderr[-3000:]
    (container, record), = _parked(tag).items()
    time.sleep(1.0)  # the parker's reaper has read its end of the lifeline by now
    assert [s for s in _ours(tag) if s["Id"] == container and s.get("State") == "running"]
    code = ("import time, docker\n"
            "from grader.sandbox import slot_runner\n"
            "from grader.sandbox.base import Limits\n"
            f"slot = slot_runner._POOL.take(docker.from_env(), {emu_image!r}, Limits())\n"
            "print(slot.container_id, slot.folder, flush=True)\n"
            "time.sleep(600)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, slot_runner.PARK_ENV: "120"})
    adopted, folder = proc.stdout.readline().split()  # type: ignore[union-attr]
    assert adopted == container, "the adopter took the parked slot"
    (summary,) = [s for s in _ours(tag) if s["Id"] == container]
    assert owner_of(summary_name(summary), summary.get("Labels") or {}) == proc.pid
    assert not _parked(tag), "an adopted slot's record is gone"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    left = _wait_until(lambda: not [s for s in _ours(tag) if s["Id"] == container]
                       and f" {folder} " not in Path("/proc/self/mountinfo").read_text(), 60)
    assert left, "the killed adopter's reaper removed the slot it held and released its folder"


def test_whose_a_container_is_by_its_name_and_labels() -> None:
    from grader.sandbox.docker_settings import OWNER_LABEL

    labels = {OWNER_LABEL: "41", RUN_LABEL: "1"}
    assert owner_of("bang-grader-slot-0123456789ab", labels) == 41
    assert owner_of("/bang-grader-slot-0123456789ab-of-77", labels) == 77
    assert owner_of("bang-grader-parked-0123456789ab", labels) is None
    assert owner_of("bang-grader-run-of-77", labels) == 41  # only a slot's name says an adopter
    assert owner_of("bang-grader-slot-0123456789ab", {}) is None


def test_a_record_not_as_park_writes_it_is_passed_over_never_adopted_nor_fatal(monkeypatch: pytest.MonkeyPatch) -> None:
    """A record of another shape (another version of the grader, a bug) in the parked folder: the next process takes
    no slot from it and grades on (a fresh slot), rather than failing the grading."""
    root = slot_runner._parked_root()
    if root is None:
        pytest.skip("the parked slots' folder is not this user's own here")
    monkeypatch.setenv(slot_runner.PARK_ENV, "60")
    good = {"id": "0123456789ab", "key": "k", "container": "c", "jobs": 1, "masks": [[], []], "parked_at": time.time(),
            "seconds": 60}
    assert slot_runner._well_formed(good)
    odd = [{**good, "id": "../../etc"}, {**good, "masks": [[]]}, {**good, "parked_at": "soon"},
           {k: v for k, v in good.items() if k != "jobs"}, ["not", "a", "record"]]
    paths = [root / f"{uuid.uuid4().hex[:12]}.json" for _ in odd]
    try:
        for path, record in zip(paths, odd, strict=True):
            path.write_text(json.dumps(record))
            os.chmod(path, 0o600)
        assert not slot_runner._parked_records(root) or all(
            p not in [q for q, _ in slot_runner._parked_records(root)] for p in paths)
        assert slot_runner._adopt_parked(docker.from_env(timeout=60), "no-such-image:0", slot_runner.Limits()) is None
        assert all(p.exists() for p in paths), "passed over, not claimed"
    finally:
        for path in paths:
            path.unlink(missing_ok=True)
