"""Gradings whose run sandbox is a job of a slot container (grader.sandbox.slot_runner; BANG_GRADER_SLOTS=0: not) get
the grades of plain containers, both ways: honest students (the sigmoid references) keep every point, and the
attacks of the adversarial corpus and the known-bad fixtures get the verdicts they get in plain containers; a
slot that cannot confine a job falls back to a plain container with the same grade. Real docker, the real
emulation image, real batch workers (each its own slot, reused from one student to the next)."""

from __future__ import annotations

import csv
import io
import os
import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from grader.sandbox import slot_runner
from grader.sandbox.docker_settings import TAG_ENV
from tests.sandbox.container_events import Created

pytestmark = pytest.mark.docker

KERNELS = Path(__file__).resolve().parents[2] / "reference_kernels"
HONEST = ("sigmoid/vector", "sigmoid/multicore", "sigmoid/pipeline")
ODD = ("adversarial/fork_bomb", "adversarial/endless_output", "adversarial/tmpfs_fill", "adversarial/read_proc",
       "adversarial/kill_parent", "adversarial/ptrace_siblings", "adversarial/key_from_memory",
       "adversarial/forged_results", "known_bad/wrong_task_offset", "known_bad/wrapper_calls_torch_sigmoid")


def _needs_slots() -> None:
    if not slot_runner.slots_possible():
        pytest.skip("slots need root, mount and a local Docker daemon sharing our mount namespace")


@pytest.fixture(autouse=True)
def _tagged(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """This test's containers (its batch workers' too) carry a tag of their own: the suite's other workers make
    containers at the same time."""
    tag = uuid.uuid4().hex
    monkeypatch.setenv(TAG_ENV, tag)
    monkeypatch.setenv(slot_runner.SLOTS_ENV, "0")  # each test says where it wants slots
    slot_runner.close_slots()  # none of an earlier test's
    yield tag
    slot_runner.close_slots()


def _book(out: Path) -> dict[str, tuple[str, str]]:
    return {row["student_id"]: (row["verdict"], row["total"])
            for row in csv.DictReader(io.StringIO((out / "gradebook.csv").read_text()))}


@pytest.mark.slow
def test_a_class_graded_in_slots_gets_the_grades_of_plain_containers(emu_image: str, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    _needs_slots()
    from grader.drivers.batch import run_batch

    class_dir = tmp_path / "class"
    for name in (*HONEST, *ODD):
        shutil.copytree(KERNELS / name, class_dir / name.replace("/", "-"))
    books, created = {}, {}
    (tmp_path / "no-references").mkdir()
    for mode in ("plain", "slots"):
        if mode == "slots":
            monkeypatch.setenv(slot_runner.SLOTS_ENV, "1")
        with Created() as created[mode]:
            run_batch(class_dir, "sigmoid", tmp_path / mode, workers=2, sandbox="docker", progress=False,
                      seed="slots", reference_root=tmp_path / "no-references")
        books[mode] = _book(tmp_path / mode)
    assert books["slots"] == books["plain"], {s: (books["plain"][s], books["slots"].get(s)) for s in books["plain"]
                                              if books["slots"].get(s) != books["plain"][s]}
    honest = [name.replace("/", "-") for name in HONEST]
    assert all(books["slots"][s][1] not in ("", "0") for s in honest), books["slots"]
    # the run sandboxes and the replays went to the slots (two per worker: the rounds', the replay's; replaced where
    # a job took its slot down)
    assert 2 <= created["slots"].get("slot", 0) <= 2 * 2 + len(ODD), created
    assert created["slots"].get("run:run", 0) == created["slots"].get("run:replay", 0) == 0, created
    assert created["plain"].get("run:run", 0) >= len(HONEST) and created["plain"].get("run:replay", 0) >= len(HONEST)


def test_a_slot_that_cannot_confine_its_job_falls_back_to_a_plain_container(
        emu_image: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A slot started under the run profile (which refuses unshare): its zygote cannot confine the job, so the
    run sandbox and the replay are plain containers, and the grade is the plain one."""
    _needs_slots()
    from grader.orchestration.build_cache import default_build_cache
    from grader.orchestration.job import run_job
    from grader.orchestration.options import GradeEnvironment, GradeObserver, GradeRequest

    def grade(out: Path):  # noqa: ANN202
        return run_job(KERNELS / "sigmoid" / "vector", GradeRequest(seed="slots", seed_mode="public"),
                       GradeEnvironment(backend="emu", sandbox="docker", batch=True,
                                        build_cache=default_build_cache()), GradeObserver(out_dir=out)).result

    plain = grade(tmp_path / "plain")
    monkeypatch.setenv(slot_runner.SLOTS_ENV, "1")
    monkeypatch.setattr(slot_runner, "SLOT_PROFILE", slot_runner.SECCOMP_PROFILE)
    with Created() as made:
        fallen = grade(tmp_path / "fallen")
    assert made.get("slot", 0) >= 1, made  # a slot tried ...
    assert made.get("run:run", 0) >= 1 and made.get("run:replay", 0) >= 1, made  # ... the run and the replay plain
    assert (fallen.verdict, fallen.score) == (plain.verdict, plain.score)
    assert [s.verdict for s in fallen.stages] == [s.verdict for s in plain.stages]
    assert [s.timing.median_us if s.timing else None for s in fallen.stages] == \
        [s.timing.median_us if s.timing else None for s in plain.stages]


def test_gradings_in_one_slot_one_after_another_keep_their_grades(emu_image: str, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """One process, its two slots (the rounds', the replay's): an honest grading, a fork bomb, a process left behind
    (kill_parent), then the honest one again -- the same grade as the first, in the same slot containers, and not
    one run-phase container of its own."""
    _needs_slots()
    from grader.orchestration.build_cache import default_build_cache
    from grader.orchestration.job import run_job
    from grader.orchestration.options import GradeEnvironment, GradeObserver, GradeRequest

    def grade(name: str, out: Path):  # noqa: ANN202
        return run_job(KERNELS / name, GradeRequest(seed="slots", seed_mode="public"),
                       GradeEnvironment(backend="emu", sandbox="docker", batch=True,
                                        build_cache=default_build_cache()), GradeObserver(out_dir=out)).result

    monkeypatch.setenv(slot_runner.SLOTS_ENV, "1")
    with Created() as made:
        first = grade("sigmoid/vector", tmp_path / "first")
        bomb = grade("adversarial/fork_bomb", tmp_path / "bomb")
        left = grade("adversarial/kill_parent", tmp_path / "left")
        again = grade("sigmoid/vector", tmp_path / "again")
    assert str(bomb.verdict) not in ("passed", "internal_error") and str(left.verdict) != "internal_error"
    assert (again.verdict, again.score) == (first.verdict, first.score) and first.score > 0
    assert [s.timing.median_us if s.timing else None for s in again.stages] == \
        [s.timing.median_us if s.timing else None for s in first.stages]
    assert 2 <= made.get("slot", 0) <= 3, made  # reused (a job that took one down may cost one replacement)
    assert made.get("run:run", 0) == made.get("run:replay", 0) == 0, made  # the rounds and the replays in slots


def test_a_grader_killed_with_its_slot_leaves_no_container_and_no_mount(emu_image: str, tmp_path: Path) -> None:
    """SIGKILL of a process holding a slot: its reaper removes the slot container and unmounts the slot's folder
    (release_slot_mounts_of), as it does for the plain containers and the io tmpfs."""
    _needs_slots()
    import signal
    import subprocess
    import sys

    from grader.sandbox.docker_runner import container_summaries
    from grader.sandbox.docker_settings import OWNER_LABEL

    code = ("import sys, time, docker\n"
            "from grader.sandbox import slot_runner\n"
            "from grader.sandbox.base import Limits\n"
            f"slot = slot_runner._POOL.take(docker.from_env(), {emu_image!r}, Limits())\n"
            "print(slot.folder, flush=True)\n"
            "time.sleep(600)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    folder = Path(proc.stdout.readline().strip())  # type: ignore[union-attr]
    mounted = Path("/proc/self/mountinfo").read_text()
    assert f" {folder} " in mounted, "the slot's folder is a mount of its own while the slot lives"
    client = docker.from_env(timeout=60)
    assert container_summaries(client, f"{OWNER_LABEL}={proc.pid}"), "the slot container runs"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        left = (container_summaries(client, f"{OWNER_LABEL}={proc.pid}"),
                str(folder.parent) in Path("/proc/self/mountinfo").read_text(), folder.parent.exists())
        if left == ([], False, False):
            break
        time.sleep(0.5)
    assert left == ([], False, False), left
