"""bang_emu.safe_tar, the one tar unpacker: honest archives come out whole (with and without the standard library's
"data" filter, which Python 3.11.0-3.11.3 lack); hostile ones are refused by name and write nothing outside the
destination."""

from __future__ import annotations

import io
import stat
import tarfile

import pytest
from bang_emu import safe_tar


def tar_of(*members: tuple[tarfile.TarInfo, bytes | None], compression: str = "") -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w" + (f":{compression}" if compression else "")) as tf:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            tf.addfile(info, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()


def entry(name: str, kind: bytes = tarfile.REGTYPE, data: bytes | None = b"x", mode: int = 0o644,
          link: str = "") -> tuple[tarfile.TarInfo, bytes | None]:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.linkname, info.mtime = kind, mode, link, 1_700_000_000
    return info, data if kind == tarfile.REGTYPE else None


HONEST_MEMBERS = [
    entry("lab/", tarfile.DIRTYPE, mode=0o775),
    entry("lab/01_scalar.mlu", data=b"__mlu_global__ void k() {}\n"),
    entry("lab/run.sh", data=b"#!/bin/sh\necho hi\n", mode=0o4755),  # setuid dropped, exec kept
    entry("lab/deep/er/header.h", data=b"#pragma once\n", mode=0o666),  # world-writable dropped
    entry("./lab/./dotted.h", data=b"// dot\n"),
    entry("lab/empty/", tarfile.DIRTYPE),
]
HONEST = tar_of(*HONEST_MEMBERS)


@pytest.fixture(params=["stdlib data filter too", "as on 3.11.0-3.11.3"])
def python_floor(request, monkeypatch):
    """Both ways: with tarfile's data filter as a second opinion where this Python has it, and as on a Python
    without it (3.11.0-3.11.3: no `data_filter`, and extractall(filter=...) a TypeError), which is what
    Debian bookworm's and the sandbox image's 3.11.2 are."""
    if request.param.startswith("as on"):
        monkeypatch.setattr(safe_tar, "_STDLIB_DATA_FILTER", None)

        def old_extract(*args, **kwargs):
            raise TypeError("extract()/extractall() got an unexpected keyword argument 'filter' (3.11.2)")

        monkeypatch.setattr(tarfile.TarFile, "extractall", old_extract)
        monkeypatch.setattr(tarfile.TarFile, "extract", old_extract)
    return request.param


@pytest.mark.parametrize("compression", ["", "gz", "xz"])
def test_an_honest_archive_unpacks_whole_with_sane_modes(tmp_path, python_floor, compression):
    archive = tmp_path / f"honest.tar{'.' + compression if compression else ''}"
    archive.write_bytes(tar_of(*HONEST_MEMBERS, compression=compression))
    dest = safe_tar.extract_tar(archive, tmp_path / "out")
    lab = dest / "lab"
    assert (lab / "01_scalar.mlu").read_bytes() == b"__mlu_global__ void k() {}\n"
    assert (lab / "deep" / "er" / "header.h").read_text() == "#pragma once\n"
    assert (lab / "dotted.h").is_file()
    assert stat.S_IMODE((lab / "run.sh").stat().st_mode) == 0o755
    assert stat.S_IMODE((lab / "01_scalar.mlu").stat().st_mode) == 0o644
    assert stat.S_IMODE((lab / "deep" / "er" / "header.h").stat().st_mode) == 0o644
    assert (lab / "01_scalar.mlu").stat().st_mtime == 1_700_000_000
    assert not (lab / "empty").exists()  # folders are made as files need them
    assert sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file()) == [
        "lab/01_scalar.mlu", "lab/deep/er/header.h", "lab/dotted.h", "lab/run.sh"]


def test_the_archives_bytes_unpack_like_its_file(tmp_path, python_floor):
    safe_tar.extract_tar(HONEST, tmp_path / "a")
    assert (tmp_path / "a" / "lab" / "run.sh").read_bytes() == b"#!/bin/sh\necho hi\n"


HOSTILE = {
    "symlink out": ([entry("lab/passwd", tarfile.SYMTYPE, link="/etc/passwd")], safe_tar.UnsafeMember, "symlink"),
    "symlink up": ([entry("lab/up", tarfile.SYMTYPE, link="../../outside")], safe_tar.UnsafeMember, "symlink"),
    "symlink inside": ([entry("lab/a.h"), entry("lab/b.h", tarfile.SYMTYPE, link="a.h")], safe_tar.UnsafeMember,
                       "symlink"),
    "hardlink": ([entry("lab/a.h"), entry("lab/b.h", tarfile.LNKTYPE, link="lab/a.h")], safe_tar.UnsafeMember,
                 "hardlink"),
    "hardlink out": ([entry("lab/shadow", tarfile.LNKTYPE, link="/etc/shadow")], safe_tar.UnsafeMember, "hardlink"),
    "dotdot": ([entry("lab/../../outside/evil.h")], safe_tar.UnsafePath, "path traversal"),
    "backslash dotdot": ([entry("lab\\..\\..\\outside\\evil.h")], safe_tar.UnsafePath, "path traversal"),
    "absolute": ([entry("/tmp/evil.h")], safe_tar.UnsafePath, "absolute path"),
    "drive letter": ([entry("C:/evil.h")], safe_tar.UnsafePath, "absolute path"),
    "character device": ([entry("lab/null", tarfile.CHRTYPE)], safe_tar.UnsafeMember, "device"),
    "block device": ([entry("lab/sda", tarfile.BLKTYPE)], safe_tar.UnsafeMember, "device"),
    "fifo": ([entry("lab/pipe", tarfile.FIFOTYPE)], safe_tar.UnsafeMember, "fifo"),
    "too deep": ([entry("/".join(["d"] * 70) + "/f.h")], safe_tar.UnsafePath, "nests deeper than 64"),
}


@pytest.mark.parametrize("case", HOSTILE)
def test_a_hostile_archive_is_refused_by_name(tmp_path, python_floor, case):
    members, error, words = HOSTILE[case]
    archive = tmp_path / "hostile.tar"
    archive.write_bytes(tar_of(*members))
    (tmp_path / "inside").mkdir()
    with pytest.raises(error, match=words) as caught:
        safe_tar.extract_tar(archive, tmp_path / "inside" / "out")
    assert isinstance(caught.value, safe_tar.UnsafeArchive)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hostile.tar", "inside"]  # nothing written outside
    assert not any(p.is_symlink() or not (p.is_file() or p.is_dir()) for p in (tmp_path / "inside").rglob("*"))


def test_many_members_stop_at_the_member_cap(tmp_path, python_floor):
    archive = tar_of(*(entry(f"d{i}/", tarfile.DIRTYPE) for i in range(5000)))  # headers only, nothing to write
    with pytest.raises(safe_tar.TooLarge, match="more than 1000 members"):
        safe_tar.extract_tar(archive, tmp_path / "out", safe_tar.Limits(max_members=1000))


def test_files_and_bytes_stop_at_their_caps(tmp_path, python_floor):
    many = tar_of(*(entry(f"f{i}.h") for i in range(30)))
    with pytest.raises(safe_tar.TooLarge, match="more than 20 files"):
        safe_tar.extract_tar(many, tmp_path / "a", safe_tar.Limits(max_files=20))
    big = tar_of(entry("big.bin", data=b"\0" * (3 << 20)), compression="gz")  # ~3 KiB of archive
    assert len(big) < 64 << 10
    with pytest.raises(safe_tar.TooLarge, match="'big.bin' unpacks to more than"):
        safe_tar.extract_tar(big, tmp_path / "b", safe_tar.Limits(max_file_bytes=1 << 20))
    two = tar_of(entry("a.bin", data=b"\0" * 700), entry("b.bin", data=b"\0" * 700))
    with pytest.raises(safe_tar.TooLarge, match="archive unpacks to more than 1000 bytes"):
        safe_tar.extract_tar(two, tmp_path / "c", safe_tar.Limits(max_total_bytes=1000))


def test_skip_leaves_links_and_specials_out(tmp_path, python_floor):
    archive = tar_of(entry("lab/a.h"), entry("lab/link", tarfile.SYMTYPE, link="/etc/passwd"),
                     entry("lab/hard", tarfile.LNKTYPE, link="lab/a.h"), entry("lab/null", tarfile.CHRTYPE),
                     entry("lab/pipe", tarfile.FIFOTYPE), entry("lab/__pycache__/x.pyc"))
    dest = safe_tar.extract_tar(archive, tmp_path / "out", unsupported="skip", skip=lambda p: "__pycache__" in p)
    assert [p.relative_to(dest).as_posix() for p in dest.rglob("*")] == ["lab", "lab/a.h"]
    with pytest.raises(safe_tar.UnsafePath):  # skipping never loosens the path rule
        safe_tar.extract_tar(tar_of(entry("../x.h")), tmp_path / "out2", unsupported="skip")


def test_a_link_already_in_the_destination_is_not_followed(tmp_path, python_floor):
    outside = tmp_path / "outside"
    outside.mkdir()
    dest = tmp_path / "out"
    dest.mkdir()
    (dest / "lab").symlink_to(outside)
    (dest / "file.h").symlink_to(outside / "target.h")
    with pytest.raises(safe_tar.UnsafePath, match="outside the destination"):
        safe_tar.extract_tar(tar_of(entry("lab/evil.h")), dest)
    with pytest.raises(safe_tar.UnsafePath, match="outside the destination"):
        safe_tar.extract_tar(tar_of(entry("file.h")), dest)
    (dest / "file.h").unlink()
    (dest / "file.h").symlink_to("inside.h")  # resolves inside, and still is not written through (O_NOFOLLOW)
    with pytest.raises(OSError):
        safe_tar.extract_tar(tar_of(entry("file.h")), dest)
    assert not (dest / "inside.h").exists()
    assert list(outside.iterdir()) == []


def test_the_stdlib_filter_is_a_second_opinion_where_it_exists(tmp_path, monkeypatch):
    def refuses(member, dest):
        raise tarfile.TarError(f"{member.name} refused")

    monkeypatch.setattr(safe_tar, "_STDLIB_DATA_FILTER", refuses)
    with pytest.raises(safe_tar.UnsafeArchive, match="data filter"):
        safe_tar.extract_tar(HONEST, tmp_path / "out")


def test_check_member_is_the_rule_the_server_applies():
    assert safe_tar.check_member(entry("my_ops/ops.py")[0]) == ("my_ops", "ops.py")
    assert safe_tar.check_member(entry("my_ops/", tarfile.DIRTYPE)[0]) == ("my_ops",)
    with pytest.raises(safe_tar.UnsafeMember, match="'my_ops/x' -> '/etc/passwd'"):
        safe_tar.check_member(entry("my_ops/x", tarfile.SYMTYPE, link="/etc/passwd")[0])
