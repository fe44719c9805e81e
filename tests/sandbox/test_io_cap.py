"""capped_io against a real tmpfs mount (root only): what the host staged comes back as the host staged it, whatever
the run did to its copies, and what the run added comes back beside it -- without copying the host's files twice."""

from __future__ import annotations

import os

import pytest

from grader.sandbox.io_cap import can_cap, capped_io

pytestmark = pytest.mark.skipif(not can_cap(), reason="the /io tmpfs cap needs root and mount: nothing to test here")


def _stage(io):
    (io / "inputs").mkdir(parents=True)
    (io / "outputs").mkdir()
    (io / "journals").mkdir()
    (io / "job.json").write_text('{"calls": ["c0"]}')
    (io / "inputs" / "c0_x.npy").write_bytes(b"host input" * 1000)
    (io / "journals" / "c1.journal").write_bytes(b"J" * (3 << 20))
    os.chmod(io / "inputs" / "c0_x.npy", 0o640)


def test_the_hosts_files_come_back_as_staged_and_the_runs_beside_them(tmp_path):
    io = tmp_path / "io"
    _stage(io)
    before = os.lstat(io / "journals" / "c1.journal")
    with capped_io(io, 1 << 20) as note:
        assert note.startswith("io_capped"), note
        assert os.path.ismount(io)
        assert (io / "journals" / "c1.journal").read_bytes() == b"J" * (3 << 20)  # copied in
        # the run: rewrites and removes the host's files, turns one into a folder, adds its own
        (io / "job.json").write_text('{"calls": ["forged"]}')
        (io / "inputs" / "c0_x.npy").unlink()
        (io / "journals" / "c1.journal").unlink()
        (io / "journals" / "c1.journal").mkdir()
        (io / "journals" / "c1.journal" / "inside").write_text("run")
        (io / "outputs" / "c0.json").write_text('{"ok": true}')
        (io / "outputs" / "deep").mkdir()
        (io / "outputs" / "deep" / "c0.out.bin").write_bytes(b"\1" * 4096)
        (io / "extra").mkdir()
        os.symlink("/etc/passwd", io / "extra" / "link")
    assert not os.path.ismount(io)
    assert (io / "job.json").read_text() == '{"calls": ["c0"]}'
    assert (io / "inputs" / "c0_x.npy").read_bytes() == b"host input" * 1000
    assert oct(os.lstat(io / "inputs" / "c0_x.npy").st_mode & 0o777) == oct(0o640)
    after = os.lstat(io / "journals" / "c1.journal")
    assert (after.st_ino, after.st_dev) == (before.st_ino, before.st_dev)  # the host's own file, never copied back
    assert (io / "outputs" / "c0.json").read_text() == '{"ok": true}'
    assert (io / "outputs" / "deep" / "c0.out.bin").read_bytes() == b"\1" * 4096
    assert os.readlink(io / "extra" / "link") == "/etc/passwd"  # kept a link: the host's readers refuse it
    assert sorted(p.name for p in tmp_path.iterdir()) == ["io"]  # no stash or copy left beside it


def test_what_the_run_adds_is_capped_and_the_host_keeps_its_own(tmp_path):
    io = tmp_path / "io"
    _stage(io)
    with capped_io(io, 1 << 20):
        with pytest.raises(OSError):  # ENOSPC: the host's 3 MiB are in, the cap is 1 MiB more
            (io / "outputs" / "big.bin").write_bytes(b"\0" * (2 << 20))
    assert (io / "journals" / "c1.journal").stat().st_size == 3 << 20
    assert (io / "outputs" / "big.bin").stat().st_size < 2 << 20  # cut at the cap (tmpfs pages)
