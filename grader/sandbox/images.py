"""Sandbox images, built offline and tagged by a content hash of their inputs (never pulled).

Emulation image = a heavy base (debootstrap rootfs + a venv with torch CPU from a host-made wheelhouse,
`docker import`ed, tagged by the hash of sandbox/images/emu/base.toml) + a thin layer (`docker build`
offline: the sandbox/ packages and the emulator prebuilds, tagged by the hash of those sources), so editing
the emulator never rebuilds torch. The MLU image is a recipe on top of a Cambricon PyTorch image the
instructor `docker load`s; it is built only on request.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path

import docker
import docker.errors

from grader.cache_home import cache_home
from grader.i18n import _

REPO_ROOT = Path(__file__).resolve().parents[2]
IMAGES_DIR = REPO_ROOT / "sandbox" / "images"
EMU_RECIPE_DIR = IMAGES_DIR / "emu"
MLU_RECIPE_DIR = IMAGES_DIR / "mlu"
SANDBOX_PACKAGES = ("bang_emu", "bang_harness")

BASE_REPO = "bang-grader-base"
EMU_REPO = "bang-grader-emu"
MLU_REPO = "bang-grader-mlu"
IMAGE_LABEL = "org.bang-grader.image"  # value: base | emu | mlu
SANDBOX_UID = 10001
SANDBOX_GID = 10001

# Files in the sandbox packages that are build products, not inputs.
_SKIP_DIRS = {"__pycache__", ".pytest_cache", "build", ".mypy_cache", ".ruff_cache", "_runtime"}
_SKIP_SUFFIXES = (".pyc", ".pyo", ".o", ".so", ".a")

Log = Callable[[str], None]


def _stderr_log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def docker_client(timeout: int = 60) -> docker.DockerClient:
    return docker.from_env(timeout=timeout)


def image_exists(client: docker.DockerClient, tag: str) -> bool:
    try:
        client.images.get(tag)
    except docker.errors.ImageNotFound:
        return False
    return True


def _hash_files(h: hashlib._Hash, root: Path, files: list[Path]) -> None:
    for path in files:
        rel = path.relative_to(root).as_posix()
        h.update(f"{rel}\0{path.stat().st_mode & 0o777:o}\0".encode())
        h.update(hashlib.sha256(path.read_bytes()).digest())


def _source_files(package_dir: Path) -> Iterator[Path]:
    for dirpath, dirnames, filenames in os.walk(package_dir):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS)
        for name in sorted(filenames):
            if not name.endswith(_SKIP_SUFFIXES):
                yield Path(dirpath) / name


def base_image_tag() -> str:
    recipe = EMU_RECIPE_DIR / "base.toml"
    return f"{BASE_REPO}:{hashlib.sha256(recipe.read_bytes()).hexdigest()[:16]}"


def emu_image_tag() -> str:
    """The tag the emulation image has for the current sources (cheap: hashes files, builds nothing)."""
    h = hashlib.sha256(base_image_tag().encode())
    _hash_files(h, EMU_RECIPE_DIR, [EMU_RECIPE_DIR / "Dockerfile", EMU_RECIPE_DIR / "prebuild.py"])
    sandbox_root = REPO_ROOT / "sandbox"
    for package in SANDBOX_PACKAGES:
        _hash_files(h, sandbox_root, list(_source_files(sandbox_root / package)))
    return f"{EMU_REPO}:{h.hexdigest()[:16]}"


def ensure_emu_image(rebuild: bool = False, log: Log | None = None) -> str:
    """Returns the emulation image's tag, building what is missing (a quick no-op when present)."""
    log = log or _stderr_log
    client = docker_client(timeout=600)
    tag = emu_image_tag()
    if not rebuild and image_exists(client, tag):
        return tag
    with _build_lock():
        # Another grader or test run may have built it while we waited for the lock.
        if not rebuild and image_exists(client, tag):
            return tag
        return _build_emu_image(client, tag, rebuild, log)


@contextlib.contextmanager
def _build_lock() -> Iterator[None]:
    """One image build at a time on this host (parallel test sessions and graders all call ensure)."""
    lock_dir = cache_home()
    lock_dir.mkdir(parents=True, exist_ok=True)
    with open(lock_dir / "images.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _build_emu_image(client: docker.DockerClient, tag: str, rebuild: bool, log: Log) -> str:
    base = ensure_base_image(client, rebuild=rebuild, log=log)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bang-grader-emu-ctx-") as ctx_dir:
        ctx = _stage_context(Path(ctx_dir), EMU_RECIPE_DIR / "Dockerfile")
        log("images: " + _("building {tag} on {base}").format(tag=tag, base=base))
        _docker_build(client, ctx, tag, {"BASE": base}, {IMAGE_LABEL: "emu"}, log)
    log("images: " + _("{tag} built in {seconds} s").format(tag=tag, seconds=f"{time.monotonic() - started:.1f}"))
    _remove_stale(client, EMU_REPO, keep=tag, log=log)
    return tag


def _stage_context(ctx: Path, dockerfile: Path) -> Path:
    """A build context holding only the Dockerfile, prebuild.py and the sandbox packages' sources."""
    shutil.copy2(dockerfile, ctx / "Dockerfile")
    shutil.copy2(EMU_RECIPE_DIR / "prebuild.py", ctx / "prebuild.py")
    sandbox_root = REPO_ROOT / "sandbox"
    for package in SANDBOX_PACKAGES:
        for src in _source_files(sandbox_root / package):
            dest = ctx / "sandbox" / src.relative_to(sandbox_root)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest)
    return ctx


def _docker_build(client: docker.DockerClient, ctx: Path, tag: str, buildargs: dict[str, str],
                  labels: dict[str, str], log: Log) -> None:
    # Low-level API so the build log streams; pull=False and no network: the build never reaches a registry.
    stream = client.api.build(path=str(ctx), tag=tag, buildargs=buildargs, labels=labels, pull=False,
                              network_mode="none", rm=True, forcerm=True, decode=True)
    for chunk in stream:
        if "error" in chunk:
            raise RuntimeError(f"docker build of {tag} failed: {chunk['error'].strip()}")
        text = chunk.get("stream", "").rstrip()
        if text:
            log(f"  {text}")
    if not image_exists(client, tag):
        raise RuntimeError(f"docker build of {tag} finished without producing the image")


def _remove_stale(client: docker.DockerClient, repo: str, keep: str, log: Log, keep_recent: int | None = None) -> None:
    """Drops older content-hash tags of one repository, so rebuilds do not pile up gigabytes. The newest few
    stay: a grader started a moment ago may still be about to create a container from one of them, and
    several checkouts side by side (BANG_GRADER_KEEP_IMAGES) each keep their own."""
    if keep_recent is None:
        keep_recent = int(os.environ.get("BANG_GRADER_KEEP_IMAGES", "2"))
    others = [image for image in client.images.list(name=repo) if keep not in image.tags]
    others.sort(key=lambda image: image.attrs.get("Created", ""), reverse=True)
    for image in others[keep_recent:]:
        for stale in image.tags:
            try:
                client.images.remove(stale, noprune=False)
                log("images: " + _("removed stale {tag}").format(tag=stale))
            except docker.errors.APIError as exc:  # still used by a container or a child image
                log("images: " + _("kept stale {tag}: {why}").format(tag=stale, why=exc.explanation))


# --- heavy base ------------------------------------------------------------------------------------------


def apt_mirror(suite: str, apt_dir: Path = Path("/etc/apt")) -> str:
    """The Debian mirror apt uses on this host (deb822 or one-line sources), for debootstrap."""
    candidates: list[Path] = [apt_dir / "sources.list"]
    candidates += sorted((apt_dir / "sources.list.d").glob("*"))
    for path in candidates:
        if not path.is_file():
            continue
        text = path.read_text(errors="replace")
        if path.suffix == ".sources":
            for stanza in text.split("\n\n"):
                fields: dict[str, str] = {}
                for line in stanza.splitlines():
                    if ":" in line and not line.lstrip().startswith("#"):
                        key, _, value = line.partition(":")
                        fields[key.strip().lower()] = value.strip()
                if suite in fields.get("suites", "").split() and "debian" in fields.get("uris", ""):
                    return fields["uris"].split()[0]
        else:
            for line in text.splitlines():
                parts = line.split()
                if parts[:1] != ["deb"]:
                    continue
                parts = parts[1:]
                if parts and parts[0].startswith("["):  # [arch=amd64 signed-by=...] options
                    while parts and not parts[0].endswith("]"):
                        parts.pop(0)
                    parts = parts[1:]
                if len(parts) >= 2 and "debian" in parts[0] and parts[1] == suite:
                    return parts[0]
    return "http://deb.debian.org/debian"


def _run(argv: list[str], log: Log, **kwargs: object) -> None:
    log("images: $ " + " ".join(argv))
    proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kwargs)
    if proc.returncode != 0:
        raise RuntimeError(f"{argv[0]} failed ({proc.returncode}):\n{proc.stdout[-4000:]}")


def make_wheelhouse(requirements: list[str], dest: Path, log: Log) -> list[str]:
    """Downloads the wheels the image's venv needs with the host's pip configuration (offline for the image)."""
    dest.mkdir(parents=True, exist_ok=True)
    _run([sys.executable, "-m", "pip", "download", "-q", "--only-binary=:all:", "-d", str(dest), *requirements],
         log)
    return sorted(p.name for p in dest.glob("*.whl"))


def ensure_base_image(client: docker.DockerClient | None = None, rebuild: bool = False,
                      log: Log | None = None) -> str:
    log = log or _stderr_log
    client = client or docker_client(timeout=600)
    tag = base_image_tag()
    if not rebuild and image_exists(client, tag):
        return tag
    if os.geteuid() != 0:
        raise RuntimeError("building the base image runs debootstrap and chroot: run `grade images build` as root")
    if shutil.which("debootstrap") is None:
        raise RuntimeError("debootstrap is not installed (scripts/setup-system.sh installs it)")
    recipe = tomllib.loads((EMU_RECIPE_DIR / "base.toml").read_text())
    started = time.monotonic()
    work_parent = Path(os.environ.get("BANG_GRADER_IMAGE_WORKDIR", "/var/tmp"))
    with tempfile.TemporaryDirectory(prefix="bang-grader-base-", dir=work_parent) as work_dir:
        work = Path(work_dir)
        rootfs = work / "rootfs"
        wheels = make_wheelhouse(recipe["pip"], work / "wheels", log)
        log("images: " + _("wheelhouse {wheels} ({seconds} s)").format(wheels=", ".join(wheels),
                                                                        seconds=f"{time.monotonic() - started:.0f}"))
        mirror = apt_mirror(recipe["suite"])
        _run(["debootstrap", f"--variant={recipe['variant']}", "--include=" + ",".join(recipe["packages"]),
              recipe["suite"], str(rootfs), mirror], log)
        log("images: " + _("root file system from {mirror} ({seconds} s)").format(
            mirror=mirror, seconds=f"{time.monotonic() - started:.0f}"))
        _install_venv(rootfs, work / "wheels", recipe["pip"], log)
        log("images: " + _("Python venv installed ({seconds} s)").format(seconds=f"{time.monotonic() - started:.0f}"))
        _add_sandbox_user(rootfs, recipe["uid"], recipe["gid"])
        for rel in recipe["trim"]:
            target = rootfs / rel
            if target.is_dir():
                shutil.rmtree(target)
                target.mkdir()
            elif target.exists():
                target.unlink()
        _docker_import(rootfs, tag, wheels, log)
    log("images: " + _("{tag} built in {seconds} s").format(tag=tag, seconds=f"{time.monotonic() - started:.0f}"))
    _remove_stale(client, BASE_REPO, keep=tag, log=log)
    return tag


def _install_venv(rootfs: Path, wheelhouse: Path, requirements: list[str], log: Log) -> None:
    inside = rootfs / "tmp" / "wheels"
    shutil.copytree(wheelhouse, inside)
    try:
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root", "LANG": "C.UTF-8"}
        _run(["chroot", str(rootfs), "/usr/bin/python3", "-m", "venv", "/opt/venv"], log, env=env)
        _run(["chroot", str(rootfs), "/opt/venv/bin/python3", "-m", "pip", "install", "-q", "--no-index",
              "--no-cache-dir", "--find-links", "/tmp/wheels", *requirements], log, env=env)
        # The venv's own pycache is written now; at run time the root is read-only.
        _run(["chroot", str(rootfs), "/opt/venv/bin/python3", "-c", "import torch, numpy"], log, env=env)
    finally:
        shutil.rmtree(inside, ignore_errors=True)


def _add_sandbox_user(rootfs: Path, uid: int, gid: int) -> None:
    with open(rootfs / "etc" / "passwd", "a") as f:
        f.write(f"sandbox:x:{uid}:{gid}:sandboxed submission:/tmp:/usr/sbin/nologin\n")
    with open(rootfs / "etc" / "group", "a") as f:
        f.write(f"sandbox:x:{gid}:\n")


def _docker_import(rootfs: Path, tag: str, wheels: list[str], log: Log) -> None:
    changes = [
        "ENV PATH=/opt/venv/bin:/usr/local/bin:/usr/bin:/bin",
        "ENV LANG=C.UTF-8",
        "ENV PYTHONDONTWRITEBYTECODE=1",
        f"USER {SANDBOX_UID}:{SANDBOX_GID}",
        "WORKDIR /tmp",
        f"LABEL {IMAGE_LABEL}=base",
        f"LABEL org.bang-grader.wheels={','.join(wheels)}",
    ]
    argv = ["docker", "import"] + [a for c in changes for a in ("--change", c)] + ["-", tag]
    log(f"images: tar {rootfs} | docker import - {tag}")
    tar = subprocess.Popen(["tar", "-C", str(rootfs), "--numeric-owner", "-cf", "-", "."],
                           stdout=subprocess.PIPE)
    try:
        imported = subprocess.run(argv, stdin=tar.stdout, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True)
    finally:
        assert tar.stdout is not None
        tar.stdout.close()
        tar_rc = tar.wait()
    if imported.returncode != 0 or tar_rc != 0:
        raise RuntimeError(f"docker import failed (tar {tar_rc}, import {imported.returncode}): {imported.stdout}")


# --- MLU image (on request) -------------------------------------------------------------------------------


def mlu_image_tag(cambricon_image: str) -> str:
    h = hashlib.sha256(cambricon_image.encode())
    _hash_files(h, MLU_RECIPE_DIR, [MLU_RECIPE_DIR / "Dockerfile"])
    _hash_files(h, EMU_RECIPE_DIR, [EMU_RECIPE_DIR / "prebuild.py"])
    sandbox_root = REPO_ROOT / "sandbox"
    for package in SANDBOX_PACKAGES:
        _hash_files(h, sandbox_root, list(_source_files(sandbox_root / package)))
    return f"{MLU_REPO}:{h.hexdigest()[:16]}"


def ensure_mlu_image(cambricon_image: str, rebuild: bool = False, log: Log | None = None) -> str:
    """Builds the MLU image on a Cambricon PyTorch image that must already be local (`docker load -i ...`)."""
    log = log or _stderr_log
    client = docker_client(timeout=600)
    if not image_exists(client, cambricon_image):
        raise RuntimeError(f"{cambricon_image} is not a local image: `docker load -i <the Cambricon PyTorch "
                           "tarball>` first (see sandbox/images/mlu/README.md); images are never pulled")
    tag = mlu_image_tag(cambricon_image)
    if not rebuild and image_exists(client, tag):
        return tag
    with tempfile.TemporaryDirectory(prefix="bang-grader-mlu-ctx-") as ctx_dir:
        ctx = _stage_context(Path(ctx_dir), MLU_RECIPE_DIR / "Dockerfile")
        _docker_build(client, ctx, tag, {"CAMBRICON_IMAGE": cambricon_image}, {IMAGE_LABEL: "mlu"}, log)
    return tag
