"""A grading's work folder goes in the background (grader/orchestration/work_folder.py): all of it, never what
a link inside points to, and at once where no background `rm` can start."""

from __future__ import annotations

import time
from pathlib import Path

from grader.orchestration.work_folder import discard


def work_folder(root: Path) -> tuple[Path, Path]:
    work, outside = root / "bang-grade-x", root / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("kept")
    (work / "io" / "replay" / "inputs").mkdir(parents=True)
    (work / "io" / "replay" / "inputs" / "c0.0.bin").write_bytes(b"\0" * (1 << 20))
    (work / "io" / "job.json").write_text("{}")
    (work / "io" / "link").symlink_to(outside)
    (work / "io" / "ro").mkdir()
    (work / "io" / "ro" / "f").write_text("x")
    (work / "io" / "ro").chmod(0o500)
    return work, outside


def test_the_folder_goes_in_the_background_and_no_link_is_followed(tmp_path):
    work, outside = work_folder(tmp_path)
    discard(work)
    deadline = time.monotonic() + 30
    while work.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not work.exists()
    assert (outside / "keep.txt").read_text() == "kept"


def test_without_a_background_rm_it_goes_at_once(tmp_path, monkeypatch):
    work, outside = work_folder(tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))
    discard(work)
    assert not work.exists()
    assert (outside / "keep.txt").read_text() == "kept"
