"""Intake of a class: folders, archives (hostile ones included), rosters, content hashes."""

from __future__ import annotations

import io
import os
import tarfile
import zipfile
from pathlib import Path

import pytest

from grader.batch.intake import (
    IntakeError,
    IntakeLimits,
    collect_submissions,
    content_hash,
    file_safe,
    read_roster,
    stage_folder,
    unpack_archive,
)


def write_submission(folder: Path, body: str = "__mlu_global__ void k() {}\n") -> Path:
    (folder / "mlu").mkdir(parents=True)
    (folder / "mlu" / "k.mlu").write_text(body)
    (folder / "ops.py").write_text("def sigmoid(x):\n    return x\n")
    return folder


def zip_of(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return path


def tar_of(path: Path, members: dict[str, bytes], symlink: tuple[str, str] | None = None) -> Path:
    with tarfile.open(path, "w:gz") as tf:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
        if symlink:
            info = tarfile.TarInfo(symlink[0])
            info.type = tarfile.SYMTYPE
            info.linkname = symlink[1]
            tf.addfile(info)
    return path


GOOD = {"my_ops/mlu/k.mlu": b"__mlu_global__ void k() {}\n", "my_ops/ops.py": b"def sigmoid(x):\n    return x\n"}


def test_folder_of_folders_and_archives(tmp_path):
    class_dir = tmp_path / "class"
    write_submission(class_dir / "alice")
    write_submission(class_dir / "bob" / "my_ops")  # wrapped one level down
    zip_of(class_dir / "carol.zip", GOOD)
    tar_of(class_dir / "dave.tar.gz", GOOD)
    (class_dir / "notes.txt").write_text("not a submission")
    subs = collect_submissions(class_dir, tmp_path / "unpacked")
    assert [s.student_id for s in subs] == ["alice", "bob", "carol", "dave", "notes.txt"]
    assert all(s.problem is None for s in subs[:4]), [s.problem for s in subs]
    assert "not a folder or a .zip/.tar archive: notes.txt" in subs[4].problem  # listed, never silently dropped
    assert subs[1].path == class_dir / "bob" / "my_ops"
    assert (subs[2].path / "mlu" / "k.mlu").is_file() and (subs[3].path / "ops.py").is_file()
    # Same files wherever they sit: same content hash (that is what the build cache and scheduler rely on).
    assert len({s.content_hash for s in subs[:4]}) == 1


def test_students_named_in_chinese_stay_distinct_and_readable(tmp_path):
    """A class folder of 张三, 李四, 王五 (and a name mixed with a student number) is three, four students, each
    file-named by its own name -- not all "student", which refused the whole batch as two ids on one file name."""
    class_dir = tmp_path / "class"
    for name in ("张三", "李四", "王五", "2023010101 赵六"):
        write_submission(class_dir / name)
    subs = collect_submissions(class_dir, tmp_path / "unpacked")
    assert [s.slug for s in subs] == ["2023010101_赵六", "张三", "李四", "王五"]
    assert all(s.problem is None for s in subs), [s.problem for s in subs]
    for odd, safe in (("../张三", "张三"), ("a/b", "a_b"), ("...", "student"), ("名" * 100, "名" * 26)):
        assert file_safe(odd) == safe
    assert len(file_safe("名" * 100).encode()) <= 80 and "/" not in file_safe("张/../三")


def test_content_hash_sees_every_byte_and_ignores_junk(tmp_path):
    a = write_submission(tmp_path / "a")
    before = content_hash(a)
    (a / "__pycache__").mkdir()
    (a / "__pycache__" / "ops.cpython-311.pyc").write_bytes(b"junk")
    assert content_hash(a) == before
    (a / "mlu" / "k.mlu").write_text("__mlu_global__ void k() { }\n")
    assert content_hash(a) != before


@pytest.mark.parametrize("evil", ["../evil.txt", "/etc/evil", "a/../../evil"])
def test_archive_path_traversal_is_refused(tmp_path, evil):
    archive = zip_of(tmp_path / "x.zip", {**GOOD, evil: b"owned"})
    with pytest.raises(IntakeError, match="absolute|traversal"):
        unpack_archive(archive, tmp_path / "out")
    assert not (tmp_path / "evil.txt").exists()
    assert not (tmp_path / "out").exists()


def test_tar_symlinks_are_never_created(tmp_path):
    archive = tar_of(tmp_path / "x.tgz", GOOD, symlink=("my_ops/mlu/passwd", "/etc/passwd"))
    root = unpack_archive(archive, tmp_path / "out")
    assert (root / "mlu" / "k.mlu").is_file()
    assert not (root / "mlu" / "passwd").exists() and not (root / "mlu" / "passwd").is_symlink()


def test_zip_bomb_stops_at_the_byte_cap(tmp_path):
    archive = zip_of(tmp_path / "bomb.zip", {"my_ops/ops.py": b"0" * (3 << 20)})  # compresses to ~3 KiB
    assert archive.stat().st_size < 64 << 10
    with pytest.raises(IntakeError, match="more than"):
        unpack_archive(archive, tmp_path / "out", IntakeLimits(max_total_bytes=1 << 20, max_file_bytes=1 << 20))


def test_file_count_cap(tmp_path):
    archive = zip_of(tmp_path / "many.zip", {f"my_ops/f{i}.h": b"x" for i in range(30)})
    with pytest.raises(IntakeError, match="more than 20 files"):
        unpack_archive(archive, tmp_path / "out", IntakeLimits(max_files=20))


def test_broken_archive_becomes_a_problem_not_an_exception(tmp_path):
    class_dir = tmp_path / "class"
    write_submission(class_dir / "alice")
    (class_dir / "bob.zip").write_bytes(b"PK\x03\x04 this is not really a zip")
    subs = collect_submissions(class_dir, tmp_path / "unpacked")
    assert subs[0].problem is None
    assert subs[1].student_id == "bob" and subs[1].path is None
    assert "archive" in subs[1].problem


def test_unpack_is_reused_after_completion(tmp_path):
    archive = zip_of(tmp_path / "x.zip", GOOD)
    root = unpack_archive(archive, tmp_path / "out")
    marker = root / "mlu" / "k.mlu"
    marker.write_text("changed after unpack")
    assert unpack_archive(archive, tmp_path / "out") == root
    assert marker.read_text() == "changed after unpack"  # not unpacked twice


def test_roster_with_header_extra_columns_and_missing_submission(tmp_path):
    write_submission(tmp_path / "subs" / "a1")
    zip_of(tmp_path / "subs" / "b2.zip", GOOD)
    roster = tmp_path / "roster.csv"
    roster.write_text("Name,Student ID,Section,Path\nAda Lovelace,s001,L01,subs/a1\n"
                      "Bo Peep,s002,L02,subs/b2.zip\nCy Young,s003,L01,\n")
    subs = read_roster(roster, tmp_path / "unpacked")
    assert [(s.student_id, s.name) for s in subs] == [("s001", "Ada Lovelace"), ("s002", "Bo Peep"),
                                                      ("s003", "Cy Young")]
    assert subs[0].extra == {"Section": "L01"}
    assert subs[1].problem is None and (subs[1].path / "ops.py").is_file()
    assert subs[2].problem == "no submission"


def test_roster_without_header_and_duplicates(tmp_path):
    write_submission(tmp_path / "a")
    roster = tmp_path / "r.csv"
    roster.write_text("s1,Ann,a\n")
    assert read_roster(roster, tmp_path / "u")[0].student_id == "s1"
    roster.write_text("s1,Ann,a\ns1,Ann again,a\n")
    with pytest.raises(IntakeError, match="listed twice"):
        read_roster(roster, tmp_path / "u")


def test_a_single_submission_is_not_a_class(tmp_path):
    with pytest.raises(IntakeError, match="grade submit"):
        collect_submissions(write_submission(tmp_path / "one"), tmp_path / "u")


def test_class_archive(tmp_path):
    members = {f"class/{sid}/{name.removeprefix('my_ops/')}": data for sid in ("x1", "x2") for name, data in GOOD.items()}
    subs = collect_submissions(zip_of(tmp_path / "class.zip", members), tmp_path / "u")
    assert [s.student_id for s in subs] == ["x1", "x2"]


def test_zip_symlinks_are_never_created(tmp_path):
    archive = tmp_path / "x.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for name, data in GOOD.items():
            zf.writestr(name, data)
        link = zipfile.ZipInfo("my_ops/mlu/secret.h")
        link.external_attr = (0o120777 << 16)  # S_IFLNK: what `zip --symlinks` stores
        zf.writestr(link, "/etc/shadow")
    root = unpack_archive(archive, tmp_path / "out")
    assert (root / "ops.py").is_file()
    assert not (root / "mlu" / "secret.h").exists() and not (root / "mlu" / "secret.h").is_symlink()


def test_every_entry_is_a_student_or_a_reason(tmp_path):
    """Issue 28: archives the grader does not unpack and unreadable folders are rows with their reason, named
    after the student; a tar member whose name is not UTF-8 is taken in like any other file."""
    class_dir = tmp_path / "class"
    write_submission(class_dir / "frank")
    (class_dir / "dave.rar").write_bytes(b"Rar!\x1a\x07\x00")
    (class_dir / "erin.7z").write_bytes(b"7z\xbc\xaf\x27\x1c")
    locked = class_dir / "gina"
    write_submission(locked)
    (locked / "mlu").chmod(0)
    tar_of(class_dir / "hank.tar.gz", {**GOOD, "my_ops/mlu/notes_\udcff\udcfe.h": b"// notes\n"})
    try:
        subs = {s.student_id: s for s in collect_submissions(class_dir, tmp_path / "unpacked")}
    finally:
        (locked / "mlu").chmod(0o755)
    assert sorted(subs) == ["dave", "erin", "frank", "gina", "hank"]
    assert "a .rar archive" in subs["dave"].problem and "a .7z archive" in subs["erin"].problem
    assert subs["frank"].problem is None and subs["hank"].problem is None
    assert (subs["hank"].path / "mlu" / "notes_\udcff\udcfe.h").is_file()
    if os.geteuid() != 0:  # root reads anything
        assert "cannot be read" in subs["gina"].problem


def test_a_staged_folder_is_readable_by_anyone_and_never_leaves_the_folder(tmp_path: Path) -> None:
    """stage_folder (the lab programs' intake): a 0700 checkout with 0600 files becomes a copy any sandbox user
    reads; a link is copied as its target only when that is inside the folder; special files and junk stay out;
    the intake's caps hold."""
    outside = tmp_path / "secret.txt"
    outside.write_text("not the student's")
    src = tmp_path / "lab"
    (src / "inc").mkdir(parents=True)
    (src / "01_scalar.mlu").write_text("int main() {}\n")
    (src / "inc" / "common.h").write_text("#define N 4\n")
    (src / "run.sh").write_text("#!/bin/sh\n")
    (src / "run.sh").chmod(0o700)
    (src / "same.h").symlink_to("inc/common.h")
    (src / "leak.h").symlink_to(outside)
    (src / "up").symlink_to(tmp_path)
    os.mkfifo(src / "pipe")
    (src / ".git").mkdir()
    (src / ".git" / "HEAD").write_text("ref\n")
    for path in [src / "01_scalar.mlu", src / "inc" / "common.h"]:
        path.chmod(0o600)
    (src / "inc").chmod(0o700)
    src.chmod(0o700)
    staged = stage_folder(src, tmp_path / "staged")
    found = {p.relative_to(staged).as_posix(): oct(p.stat().st_mode & 0o777) for p in staged.rglob("*")}
    assert found == {"01_scalar.mlu": "0o644", "inc": "0o755", "inc/common.h": "0o644", "run.sh": "0o755",
                     "same.h": "0o644"}
    assert oct(staged.stat().st_mode & 0o777) == "0o755"
    assert (staged / "same.h").read_text() == "#define N 4\n" and not (staged / "same.h").is_symlink()
    with pytest.raises(IntakeError, match="more than 2 files"):
        stage_folder(src, tmp_path / "capped", IntakeLimits(max_files=2))
    with pytest.raises(IntakeError, match="more than 4 bytes"):
        stage_folder(src, tmp_path / "capped2", IntakeLimits(max_file_bytes=4))
