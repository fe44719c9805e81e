"""Binding objects shared between builds: most of a class hands in the lab's template binding unchanged, and its
g++ compile against the torch headers is nearly all of a build's time (a kernel compiles in about a second), so
a build whose binding was compiled before only compiles its kernels.

An object is looked up by what the compile command is made of (toolchain and image, backend, environment,
extension name, include folders, the source's path and content) and then by a variant: the exact files of the
submission the compiler read, from its depfile, each with its content. It is reused only when every one of
those files has the same content in the new submission, so an object is only ever used where compiling would
have produced it.

Trust: objects come from a successful build in an image sandbox, where no student code runs (build.json's
trust, build_step.py); the image tag in the key fixes every file outside /submission. A depfile naming a
file the sandbox could write (/build, /io, /tmp ...) or a symlink of the submission stores nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path, PurePosixPath

from bang_harness.plan import BuildPlan

from grader.orchestration.build_cache import NOT_COMPILED_SUFFIXES, OBJECTS_DIR
from grader.sandbox.base import SANDBOX_BUILD, SANDBOX_IO, SANDBOX_SUBMISSION
from grader.sandbox.capped import UntrustedFileError, read_bytes_capped

OFF_ENV = "BANG_GRADER_NO_SHARED_OBJECTS"  # =1: every build compiles its binding (for side-by-side benchmarks)
DEPFILE_CAP_BYTES = 1 << 20
FILE_CAP_BYTES = 64 << 20  # larger than any source intake accepts
VARIANTS_PER_KEY = 16  # looked at per lookup, newest first
# Paths in the image that a build could have written or that are not fixed by the image.
_WRITABLE_ROOTS = (SANDBOX_BUILD, SANDBOX_IO, "/tmp", "/var/tmp", "/dev/shm", "/proc", "/sys", "/dev", "/run",
                   "/root", "/home")


def object_key(plan: BuildPlan, source: str, root: Path, recipe: str) -> str | None:
    """The lookup key of `source`'s object (None: not shareable, e.g. a symlink): `recipe`
    (build_cache.build_recipe) names toolchain, image, backend and environment. The names of the files in the
    include folders count too: a header added where the compiler looks first would change what it reads."""
    digest = _file_digest(root, source)
    _mlu, _cpp, folders = plan.resolve(root)
    inside = [f for f in folders if f.is_dir() and f.resolve().is_relative_to(root.resolve())]
    if digest is None or len(inside) != len([f for f in folders if f.exists()]):
        return None
    names = sorted({str(p.relative_to(root)) for folder in inside for p in folder.rglob("*")
                    if p.suffix.lower() not in NOT_COMPILED_SUFFIXES and "__pycache__" not in p.parts})
    parts = [recipe, plan.extension, source, digest, *[str(f.relative_to(root)) for f in folders], "", *names]
    return hashlib.sha256(os.fsencode("\0".join(parts))).hexdigest()[:32]  # names are bytes, not text


def parse_depfile(text: str) -> list[str]:
    """The prerequisites of a make rule as g++ -MD writes it (backslash-newline continuations, `\\ ` in names)."""
    body = text.replace("\\\n", " ")
    _target, _, deps = body.partition(": ")
    names, current, chars = [], [], iter(deps)
    for ch in chars:
        if ch == "\\":
            nxt = next(chars, "")
            if nxt == " ":
                current.append(" ")
                continue
            current.append(ch + nxt)
        elif ch.isspace():
            if current:
                names.append("".join(current))
                current = []
        else:
            current.append(ch)
    if current:
        names.append("".join(current))
    return names


def _file_digest(root: Path, rel: str) -> str | None:
    """Content hash of a regular file of the submission (never through a symlink), or None."""
    try:
        return hashlib.sha256(read_bytes_capped(root / rel, FILE_CAP_BYTES, root=root)).hexdigest()
    except (UntrustedFileError, OSError):
        return None


def submission_files_read(depfile: str, root: Path) -> dict[str, str] | None:
    """{relative path: content hash} of the submission files a compile read, or None when the depfile names
    anything that is neither the submission's nor the image's own."""
    files: dict[str, str] = {}
    for name in parse_depfile(depfile):
        path = PurePosixPath(os.path.normpath(name))
        if not path.is_absolute():
            return None
        text = str(path)
        if text == SANDBOX_SUBMISSION or text.startswith(SANDBOX_SUBMISSION + "/"):
            rel = str(path.relative_to(SANDBOX_SUBMISSION))
            digest = _file_digest(root, rel)
            if digest is None:
                return None
            files[rel] = digest
        elif any(text == w or text.startswith(w + "/") for w in _WRITABLE_ROOTS):
            return None
    return files


def _variant_name(files: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps(sorted(files.items())).encode()).hexdigest()[:32]


def find(cache: Path, key: str, root: Path) -> Path | None:
    """A stored object of `key` whose files all read the same in `root`, marked as just used; or None."""
    folder = Path(cache) / OBJECTS_DIR / key
    try:
        variants = sorted(folder.glob("*.json"), key=lambda p: p.stat().st_mtime, reverse=True)
    except OSError:
        return None
    for manifest in variants[:VARIANTS_PER_KEY]:
        try:
            files = json.loads(manifest.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        obj = manifest.with_suffix(".o")
        if isinstance(files, dict) and obj.is_file() and all(_file_digest(root, rel) == digest
                                                             for rel, digest in files.items()):
            os.utime(manifest)
            os.utime(folder)
            return obj
    return None


def store(cache: Path, key: str, root: Path, obj: Path, depfile: Path) -> bool:
    """Keeps `obj` (just built from `root` in an image sandbox) under `key` and the files its depfile names;
    False when the depfile does not allow sharing it."""
    try:
        text = read_bytes_capped(depfile, DEPFILE_CAP_BYTES, root=depfile.parent).decode("utf-8")
    except (UntrustedFileError, OSError, UnicodeDecodeError):
        return False
    files = submission_files_read(text, root)
    if not files:  # not even the source itself: not a depfile of this compile
        return False
    folder = Path(cache) / OBJECTS_DIR / key
    folder.mkdir(parents=True, exist_ok=True)
    name = _variant_name(files)
    tmp = folder / f".{name}.{os.getpid()}.tmp"
    try:
        if obj.is_symlink() or not obj.is_file():
            return False
        shutil.copyfile(obj, tmp)
        os.replace(tmp, folder / f"{name}.o")
        tmp.write_text(json.dumps(files, indent=1), encoding="utf-8")
        os.replace(tmp, folder / f"{name}.json")  # written last: a lookup never sees a manifest without its object
    except OSError:
        tmp.unlink(missing_ok=True)
        return False
    return True
