"""Turns what an instructor hands in (a folder of student folders/archives, a class archive, or a roster CSV)
into a list of gradable submissions.

Archives come from students, so they are unpacked defensively: no absolute paths, no `..`, no links or
device files, and caps on the number of files and on the bytes actually decompressed (a zip bomb lies about
its sizes). A submission that cannot be taken in is not an exception: it carries a `problem` and becomes a
result with its verdict, like any other broken submission.
"""

from __future__ import annotations

import csv
import hashlib
import os
import re
import shutil
import stat
import tarfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from bang_emu import safe_tar

from grader.project_layouts import detect, text_name

ARCHIVE_SUFFIXES = (".zip", ".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz")
# Archives students send that the grader does not unpack: listed as not graded, named after the student.
UNSUPPORTED_ARCHIVES = (".rar", ".7z", ".tar.zst", ".zst", ".gz", ".bz2", ".xz", ".lz", ".lzma", ".cab", ".arj")
# Never part of what a student wrote; ignored by the content hash and by layout detection.
IGNORED_NAMES = frozenset({"__pycache__", ".git", ".DS_Store", "__MACOSX", ".ipynb_checkpoints", ".pytest_cache"})
IGNORED_SUFFIXES = (".pyc", ".pyo", ".so", ".o")


class IntakeError(Exception):
    """The batch input as a whole cannot be read (not one student's fault)."""


@dataclass(frozen=True)
class IntakeLimits(safe_tar.Limits):
    """safe_tar's caps, sized for one student's submission."""

    max_files: int = 2000
    max_total_bytes: int = 64 << 20
    max_file_bytes: int = 16 << 20
    max_depth: int = 12


@dataclass
class StudentSubmission:
    """One student's submission as the batch will grade it."""

    student_id: str
    name: str
    origin: str  # what the instructor pointed at: folder, archive or roster row
    path: Path | None  # folder to grade; None when intake failed
    content_hash: str = ""
    problem: str | None = None  # why it cannot be graded (bad archive, missing files); None when fine
    extra: dict[str, str] = field(default_factory=dict)  # roster columns passed to exports (section, login)

    @property
    def slug(self) -> str:
        return file_safe(self.student_id)


SLUG_MAX_BYTES = 80  # a slug's UTF-8 bytes: room for "-<digest>" and ".html" in a 255-byte file name


def file_safe(text: str) -> str:
    """A student id as a single safe path component (ids come from folder names and rosters): its letters and
    digits in any script kept (a class's folders are often named 张三, 李四: these must stay two students, and
    readable), anything else a run of "_"; at most SLUG_MAX_BYTES bytes of UTF-8."""
    slug = re.sub(r"[^\w.-]+", "_", text).strip("._") or "student"
    while len(slug.encode("utf-8")) > SLUG_MAX_BYTES:
        slug = slug[:-1]
    return slug


def is_archive(path: Path) -> bool:
    name = path.name.lower()
    return path.is_file() and name.endswith(ARCHIVE_SUFFIXES)


def file_digest(path: Path) -> str:
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()[:16]


def archive_stem(path: Path) -> str:
    name = path.name
    for suffix in sorted(ARCHIVE_SUFFIXES + UNSUPPORTED_ARCHIVES, key=len, reverse=True):
        if name.lower().endswith(suffix):
            return name[: -len(suffix)]
    return path.stem


def unsupported_archive(path: Path) -> str | None:
    """The suffix of an archive format the grader does not read (".rar"), or None."""
    name = path.name.lower()
    if name.endswith(ARCHIVE_SUFFIXES):
        return None
    return next((s for s in sorted(UNSUPPORTED_ARCHIVES, key=len, reverse=True) if name.endswith(s)), None)


# ---------------------------------------------------------------------------------------------- archives


def _member_target(root: Path, name: str, limits: IntakeLimits) -> Path | None:
    """Where an archive member may go (safe_tar's path rule), or None for members that are skipped (the root,
    junk)."""
    parts = safe_tar.member_parts(name, limits.max_depth)
    if not parts or _ignored(parts):
        return None
    return root.joinpath(*parts)


def _ignored(parts: tuple[str, ...]) -> bool:
    return any(p in IGNORED_NAMES for p in parts)


def _extract_zip(archive: Path, root: Path, limits: IntakeLimits) -> None:
    budget = safe_tar.Budget(limits)
    with zipfile.ZipFile(archive) as zf:
        for info in zf.infolist():
            target = _member_target(root, info.filename, limits)
            if target is None or info.is_dir():
                continue
            file_type = stat.S_IFMT(info.external_attr >> 16)
            if file_type and file_type != stat.S_IFREG:
                continue  # symlinks and specials (zip keeps the Unix mode of the creator's file system)
            budget.add_file(info.filename)
            target.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(info) as src:
                budget.copy(src, target, info.filename)


def _extract_tar(archive: Path, root: Path, limits: IntakeLimits) -> None:
    # links, devices and fifos are left out, never created; folders are made on demand
    safe_tar.extract_tar(archive, root, limits, unsupported="skip", skip=_ignored)


def unpack_archive(archive: Path, dest: Path, limits: IntakeLimits = IntakeLimits()) -> Path:
    """Unpacks `archive` into `dest` (created; reused when a previous run completed it) and returns the
    submission root inside it. Raises IntakeError for a hostile or broken archive."""
    done_marker = dest / ".unpacked"
    if done_marker.exists():
        return submission_root(dest / "files")
    if dest.exists():
        shutil.rmtree(dest)  # a previous run was interrupted mid-unpack
    staging = dest.with_name(dest.name + f".tmp{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    (staging / "files").mkdir(parents=True)
    try:
        if zipfile.is_zipfile(archive):
            _extract_zip(archive, staging / "files", limits)
        elif tarfile.is_tarfile(archive):
            _extract_tar(archive, staging / "files", limits)
        else:
            raise IntakeError("not a zip or tar archive")
    except IntakeError:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    except safe_tar.UnsafeArchive as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise IntakeError(str(exc)) from exc
    except (zipfile.BadZipFile, tarfile.TarError, EOFError, OSError, ValueError) as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise IntakeError(f"cannot unpack archive: {exc}") from exc
    (staging / ".unpacked").write_text(archive.name)
    os.replace(staging, dest)
    return submission_root(dest / "files")


# --------------------------------------------------------------------------------------------- folders


class UnreadableFile(IntakeError):
    """A file or folder of a submission the grader itself cannot read (permissions, I/O)."""

    def __init__(self, name: str, reason: str) -> None:
        super().__init__(f"{name!r} cannot be read: {reason}")
        self.name, self.reason = name, reason


def stage_folder(source: Path, dest: Path, limits: IntakeLimits = IntakeLimits()) -> Path:
    """A copy of the folder `source` at `dest` (created) that any user can read -- what a sandbox's user sees when
    the student's checkout is 0700 or its files 0600 -- under the intake's caps. Regular files and folders only;
    a symlink is copied as its target's bytes when that resolves inside `source`, and left out otherwise (never
    followed out of the folder); IGNORED_NAMES and other special files are left out. Raises IntakeError past the
    caps and UnreadableFile naming what the grader cannot read."""
    try:
        return _stage_folder(source.resolve(), dest, limits)
    except safe_tar.TooLarge as exc:
        raise IntakeError(str(exc)) from exc


def _stage_folder(source: Path, dest: Path, limits: IntakeLimits) -> Path:
    budget = safe_tar.Budget(limits)
    stack = [(source, dest, 0)]
    while stack:
        src_dir, dst_dir, depth = stack.pop()
        if depth > limits.max_depth:
            raise IntakeError(f"the folder nests deeper than {limits.max_depth} folders")
        os.mkdir(dst_dir, 0o755)
        os.chmod(dst_dir, 0o755)  # whatever the umask
        try:
            entries = sorted(os.scandir(src_dir), key=lambda e: e.name)
        except OSError as exc:
            raise UnreadableFile(_relative(src_dir, source) + "/", exc.strerror or str(exc)) from exc
        for entry in entries:
            if entry.name in IGNORED_NAMES:
                continue
            path = Path(entry.path)
            name = _relative(path, source)
            try:
                target = path.resolve(strict=True) if entry.is_symlink() else path
                if target != source and source not in target.parents:
                    continue  # a link out of the folder: never followed
                info = target.stat()
            except (OSError, RuntimeError):
                continue  # a dangling or looping link
            if stat.S_ISDIR(info.st_mode):
                if not entry.is_symlink():  # a linked folder would copy the folder into itself
                    stack.append((path, dst_dir / entry.name, depth + 1))
                continue
            if not stat.S_ISREG(info.st_mode):
                continue
            budget.add_file(name)
            try:
                fd = os.open(target, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            except OSError as exc:
                raise UnreadableFile(name, exc.strerror or str(exc)) from exc
            with os.fdopen(fd, "rb") as src:
                budget.copy(src, dst_dir / entry.name, name, 0o755 if info.st_mode & 0o111 else 0o644)
    return dest


def _relative(path: Path, root: Path) -> str:
    return text_name(path.relative_to(root).as_posix()) if path != root else "."


def _visible_children(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.name not in IGNORED_NAMES and not p.name.startswith("."))


def submission_root(folder: Path) -> Path:
    """Descends through wrapper folders (`alice/my_ops/...`, an archive's single top folder) to the folder
    holding the submission."""
    current = folder
    for _ in range(4):
        if detect(current) is not None:  # a lab project (grader/project_layouts.py) starts here
            break
        children = _visible_children(current)
        if len(children) == 1 and children[0].is_dir() and not children[0].is_symlink():
            if children[0].name in ("mlu", "cpp"):
                break
            current = children[0]
        else:
            break
    return current


def _walk_files(root: Path) -> Iterator[Path]:
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if d not in IGNORED_NAMES)
        for name in sorted(filenames):
            if name in IGNORED_NAMES or name.endswith(IGNORED_SUFFIXES):
                continue
            yield Path(dirpath) / name


def content_hash(root: Path, limits: IntakeLimits = IntakeLimits()) -> str:
    """sha256 over (relative path, executable bit, bytes) of every file: equal for identical submissions
    wherever they sit and whatever the folder is called. Raises IntakeError past the size caps."""
    digest = hashlib.sha256()
    files = 0
    total = 0
    for path in _walk_files(root):
        # A name is bytes, not text (a student's tar may hold any): hashed as the file system has it.
        name = path.relative_to(root).as_posix()
        rel = os.fsencode(name)
        info = path.lstat()
        files += 1
        if files > limits.max_files:
            raise IntakeError(f"more than {limits.max_files} files")
        if stat.S_ISLNK(info.st_mode):
            digest.update(b"L " + rel + b"\0" + os.fsencode(os.readlink(path)) + b"\0")
            continue
        if not stat.S_ISREG(info.st_mode):
            continue  # FIFOs, sockets, devices: never opened here (layout checking refuses the submission)
        total += info.st_size
        if info.st_size > limits.max_file_bytes or total > limits.max_total_bytes:
            raise IntakeError(f"submission larger than the caps ({text_name(name)!r})")
        digest.update(b"F " + rel + f"\0{int(bool(info.st_mode & 0o111))}\0{info.st_size}\0".encode())
        with open(path, "rb") as fh:
            while chunk := fh.read(1 << 16):
                digest.update(chunk)
    return digest.hexdigest()


def _take_in(student_id: str, name: str, origin: str, source: Path, unpack_dir: Path,
             limits: IntakeLimits, extra: dict[str, str] | None = None) -> StudentSubmission:
    sub = StudentSubmission(student_id=student_id, name=name, origin=origin, path=None, extra=extra or {})
    try:
        if source.is_dir():
            root = submission_root(source)
        elif is_archive(source):
            if source.stat().st_size > limits.max_total_bytes:
                raise IntakeError(f"archive larger than {limits.max_total_bytes} bytes")
            root = unpack_archive(source, unpack_dir / f"{sub.slug}-{file_digest(source)}", limits)
        elif not source.exists():
            raise IntakeError(f"no submission at {source}")
        elif suffix := unsupported_archive(source):
            raise IntakeError(f"a {suffix} archive: the grader unpacks only .zip and .tar (.tar.gz, .tar.bz2, "
                              f".tar.xz); ask for one of those")
        else:
            raise IntakeError(f"not a folder or a .zip/.tar archive: {source.name}")
        sub.path = root
        sub.content_hash = content_hash(root, limits)
    except (IntakeError, OSError) as exc:  # OSError: unreadable (permissions, a dangling link, I/O)
        sub.problem = str(exc) if isinstance(exc, IntakeError) else f"cannot be read: {exc.strerror or exc}"
        sub.content_hash = sub.content_hash or hashlib.sha256(f"problem\0{exc}".encode()).hexdigest()
    return sub


# ---------------------------------------------------------------------------------------------- rosters

_ID_COLUMNS = ("student_id", "student id", "id", "sis user id", "sis_user_id", "sis_id", "login", "username")
_NAME_COLUMNS = ("name", "student name", "student", "full name", "full_name")
_PATH_COLUMNS = ("path", "submission", "folder", "file", "archive")


def _pick(header: list[str], candidates: tuple[str, ...]) -> int | None:
    lowered = [h.strip().lower() for h in header]
    for cand in candidates:
        if cand in lowered:
            return lowered.index(cand)
    return None


def read_roster(roster: Path, unpack_dir: Path, limits: IntakeLimits = IntakeLimits()) -> list[StudentSubmission]:
    """A roster CSV: student id, name, path (relative to the CSV's folder). With a header, columns are found
    by name and the others are kept for exports (section, SIS login ...); without one, the first three
    columns are id, name, path. A row with an empty or missing path is a student who did not submit."""
    with open(roster, newline="", encoding="utf-8-sig") as fh:
        rows = [row for row in csv.reader(fh) if any(cell.strip() for cell in row)]
    if not rows:
        raise IntakeError(f"roster {roster} is empty")
    header = rows[0]
    cols = (_pick(header, _ID_COLUMNS), _pick(header, _NAME_COLUMNS), _pick(header, _PATH_COLUMNS))
    if cols[0] is not None and cols[2] is not None:
        body = rows[1:]
        id_col, name_col, path_col = cols
    else:
        header, body = [], rows
        id_col, name_col, path_col = 0, 1, 2
    seen: set[str] = set()
    subs = []
    for lineno, row in enumerate(body, start=2 if header else 1):
        def cell(i: int | None, row: list[str] = row) -> str:
            return row[i].strip() if i is not None and i < len(row) else ""

        student_id = cell(id_col)
        if not student_id:
            raise IntakeError(f"roster {roster.name} line {lineno}: no student id")
        if student_id in seen:
            raise IntakeError(f"roster {roster.name} line {lineno}: student {student_id!r} listed twice")
        seen.add(student_id)
        extra = {h.strip(): cell(i) for i, h in enumerate(header) if i not in (id_col, name_col, path_col)}
        if header and header[id_col].strip().lower() == "id":
            extra.setdefault("canvas_id", student_id)  # a Canvas gradebook export used as the roster
        rel = cell(path_col)
        origin = f"{roster.name}:{lineno}"
        if not rel:
            subs.append(StudentSubmission(student_id, cell(name_col), origin, None, problem="no submission",
                                   content_hash=hashlib.sha256(b"no submission").hexdigest(), extra=extra))
            continue
        source = (roster.parent / rel).resolve()
        subs.append(_take_in(student_id, cell(name_col), origin, source, unpack_dir, limits, extra))
    _check_unique_slugs(subs)
    return subs


def _check_unique_slugs(subs: list[StudentSubmission]) -> None:
    slugs = [s.slug for s in subs]
    if len(set(slugs)) != len(slugs):
        raise IntakeError("two student ids map to the same file name; make the ids distinct")


# ------------------------------------------------------------------------------------------ entry point


def looks_like_submission(folder: Path) -> bool:
    return (folder / "mlu").is_dir() or (folder / "ops.py").is_file() or detect(folder) is not None


def collect_submissions(source: Path, unpack_dir: Path, limits: IntakeLimits = IntakeLimits()) -> list[StudentSubmission]:
    """Every submission under `source`: a folder whose entries are student folders or archives (the entry
    name is the student id), a roster CSV, or one archive of the whole class holding such entries."""
    source = source.resolve()
    if not source.exists():
        raise IntakeError(f"{source} does not exist")
    if source.is_file() and source.suffix.lower() == ".csv":
        return read_roster(source, unpack_dir, limits)
    if is_archive(source):
        class_limits = IntakeLimits(limits.max_files * 200, limits.max_total_bytes * 50,
                                    limits.max_total_bytes, limits.max_depth + 2)
        source = unpack_archive(source, unpack_dir / f"class-{file_digest(source)}", class_limits)
    if not source.is_dir():
        raise IntakeError(f"{source} is not a folder, an archive or a roster CSV")
    if looks_like_submission(source):
        raise IntakeError(f"{source} is one submission, not a class; grade it with `grade submit`")
    subs: list[StudentSubmission] = []
    seen: dict[str, str] = {}
    # Every entry is a student or a row saying why it is not graded (an unsupported archive, a stray file, an
    # unreadable folder); only hidden files and IGNORED_NAMES (OS and editor leftovers) are passed over.
    for entry in _visible_children(source):
        if entry.is_dir() or is_archive(entry) or unsupported_archive(entry):
            student_id = entry.name if entry.is_dir() else archive_stem(entry)
        else:
            student_id = entry.name  # a stray file: listed under its own name
        student_id = text_name(student_id)
        if student_id in seen:
            raise IntakeError(f"student {student_id!r} has both {seen[student_id]} and {entry.name}")
        seen[student_id] = entry.name
        subs.append(_take_in(student_id, "", text_name(entry.name), entry, unpack_dir, limits))
    if not subs:
        raise IntakeError(f"no student folders or archives in {source}")
    _check_unique_slugs(subs)
    return subs
