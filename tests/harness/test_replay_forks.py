"""The replay's fork server (bang_harness.replay_forks): each journal's process forked from it gets the key through
its own pipe and nothing else of the server's -- no descriptor, not the server's environment -- is stopped at its
time, and a server a journal's process killed sends the replays after it back to fresh interpreters
(replay._replay_child). The journal's process here runs a stand-in for replay.replay_one (the function the server
is started with); the real replays run it in docker (tests/e2e, the corpus)."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
from bang_harness import replay
from bang_harness.protocol import KEY_FD_ENV
from bang_harness.replay_forks import ReplayForks, ServerGone

KEY = bytes(range(32))


def report(paths, journal: Path) -> int:  # noqa: ANN001 - HarnessPaths
    """Writes what the journal's process sees next to the journal: its key, descriptors, environment."""
    key = os.read(int(os.environ[KEY_FD_ENV]), 64)
    os.write(2, b"to the replay's stderr\n")  # fd 2: pytest's sys.stderr is a file of its own, closed here
    journal.with_suffix(".seen").write_text(json.dumps({
        "key": key.hex(), "fds": sorted(int(fd) for fd in os.listdir("/proc/self/fd")),
        "io": str(paths.io), "secret": os.environ.get("SERVER_ONLY"), "ppid": os.getppid()}))
    if journal.name.startswith("hang"):
        time.sleep(60)
    if journal.name.startswith("kill"):
        os.kill(os.getppid(), signal.SIGKILL)  # the server: same uid, as a natively replayed kernel could
    return 3 if journal.name.startswith("fail") else 0


@pytest.fixture
def forks(monkeypatch: pytest.MonkeyPatch):  # noqa: ANN201
    monkeypatch.setenv("SERVER_ONLY", "the keeper's environment, not the journal's")
    started = ReplayForks.start(report)
    assert started is not None
    yield started
    started.close()


def test_a_journal_process_gets_its_key_its_environment_and_no_descriptor_of_the_server(forks, tmp_path) -> None:
    env = {"BANG_GRADER_IO": str(tmp_path), "PATH": os.environ.get("PATH", "")}
    status, cpu = forks.replay(tmp_path / "a.journal", env, KEY, 10.0)
    seen = json.loads((tmp_path / "a.seen").read_text())
    assert (status, seen["key"], seen["io"], seen["secret"]) == (0, KEY.hex(), str(tmp_path), None), seen
    key_fd = int(env.get(KEY_FD_ENV, -1)) if KEY_FD_ENV in env else None
    assert key_fd is None  # the keeper's env dict is not changed
    assert len(seen["fds"]) <= 5, seen["fds"]  # 0, 1, 2, the key pipe, and listdir's own
    assert seen["ppid"] == forks.pid and cpu >= 0.0
    status, _cpu = forks.replay(tmp_path / "fail.journal", env, bytes(32), 10.0)
    assert status == 3 and json.loads((tmp_path / "fail.seen").read_text())["key"] == "00" * 32


def test_a_journal_process_past_its_time_is_stopped_and_the_server_goes_on(forks, tmp_path) -> None:
    env = {"BANG_GRADER_IO": str(tmp_path)}
    started = time.monotonic()
    assert forks.replay(tmp_path / "hang.journal", env, KEY, 1.0)[0] is None
    assert time.monotonic() - started < 10.0
    assert forks.replay(tmp_path / "b.journal", env, KEY, 10.0)[0] == 0 and forks.alive


def test_a_killed_server_sends_the_next_journals_to_fresh_interpreters(forks, tmp_path, capfd) -> None:
    """The journal whose process killed the server ends as if by a signal (the kernels' doing: its calls without a
    status are reported as not reached); the next journal is replayed by `python -m bang_harness replay-one`."""
    env = {"BANG_GRADER_IO": str(tmp_path)}
    assert replay._replay_child(tmp_path / "kill.journal", KEY, env, 1, forks) == -signal.SIGKILL
    assert not forks.alive
    with pytest.raises(ServerGone) as gone:
        forks.replay(tmp_path / "c.journal", env, KEY, 10.0)
    assert not gone.value.started and not (tmp_path / "c.seen").exists()
    # a fresh interpreter: not the stand-in (a file that is no journal: it says so and exits)
    status = replay._replay_child(tmp_path / "d.journal", KEY, {**os.environ, "BANG_GRADER_IO": str(tmp_path)}, 1,
                                  forks)
    assert status is not None and not (tmp_path / "d.seen").exists()
    assert "during its replay" in capfd.readouterr().err
