"""Sandbox images: content-hash tags, the mirror debootstrap uses, and what the real emulation image holds."""

from __future__ import annotations

import json
import shutil
import time

import docker
import pytest

from grader.sandbox import images


def test_tag_follows_sources_not_build_products(tmp_path, monkeypatch):
    for package in images.SANDBOX_PACKAGES:
        (tmp_path / "sandbox" / package).mkdir(parents=True)
        (tmp_path / "sandbox" / package / "__init__.py").write_text("x = 1\n")
    monkeypatch.setattr(images, "REPO_ROOT", tmp_path)
    first = images.emu_image_tag()
    assert first == images.emu_image_tag() and first.startswith(images.EMU_REPO + ":")
    cache = tmp_path / "sandbox" / "bang_emu" / "__pycache__"
    cache.mkdir()
    (cache / "__init__.cpython-311.pyc").write_bytes(b"\0")
    (tmp_path / "sandbox" / "bang_emu" / "lib.so").write_bytes(b"\0")
    assert images.emu_image_tag() == first
    (tmp_path / "sandbox" / "bang_harness" / "__init__.py").write_text("x = 2\n")
    assert images.emu_image_tag() != first
    assert images.base_image_tag().startswith(images.BASE_REPO + ":")


def test_mirror_is_read_from_apt_sources(tmp_path):
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\nURIs: http://mirror.example/debian\nSuites: bookworm bookworm-updates\nComponents: main\n\n"
        "Types: deb\nURIs: http://security.example/debian-security\nSuites: bookworm-security\n")
    assert images.apt_mirror("bookworm", tmp_path) == "http://mirror.example/debian"
    (tmp_path / "sources.list.d" / "debian.sources").unlink()
    (tmp_path / "sources.list").write_text("deb [arch=amd64] http://one.example/debian bookworm main\n")
    assert images.apt_mirror("bookworm", tmp_path) == "http://one.example/debian"
    (tmp_path / "sources.list").unlink()
    assert images.apt_mirror("bookworm", tmp_path) == "http://deb.debian.org/debian"


@pytest.mark.docker
def test_ensure_is_a_quick_no_op_when_present(emu_image):
    tag = images.ensure_emu_image(log=lambda _m: None)  # sandbox/ may have been edited since the session began
    started = time.monotonic()
    assert images.ensure_emu_image(log=lambda _m: None) == tag
    assert time.monotonic() - started < 3


@pytest.mark.docker
def test_emulation_image_contents(emu_image):
    client = docker.from_env(timeout=120)
    script = (
        "import json, os, subprocess, sys, torch, numpy, bang_emu, bang_harness\n"
        "status = json.load(open('/opt/bang-grader/prebuilt/status.json'))\n"
        "gxx = subprocess.run(['g++', '--version'], capture_output=True, text=True).stdout.split()[0]\n"
        "from pathlib import Path\n"
        "unreadable = [str(p) for p in Path('/opt/bang-grader').rglob('*') if not os.access(p, os.R_OK)]\n"
        "print(json.dumps({'uid': os.getuid(), 'torch': torch.__version__, 'gxx': gxx, 'status': status,\n"
        "                  'unreadable': unreadable[:5],\n"
        "                  'python': sys.version.split()[0], 'harness': bang_harness.__file__}))\n"
    )
    output = client.containers.run(emu_image, ["python3", "-c", script], remove=True, network_mode="none",
                                   read_only=True, tmpfs={"/tmp": "size=16m"})
    facts = json.loads(output.decode().strip().splitlines()[-1])
    assert facts["uid"] == 10001 and facts["torch"].startswith("2.13.0") and facts["gxx"] == "g++"
    assert facts["python"].startswith("3.11") and facts["harness"].startswith("/opt/bang-grader/sandbox/")
    assert facts["unreadable"] == []  # prebuilt runtime libraries must be readable by the sandbox user
    failed = {m: s for m, s in facts["status"].items() if s.get("returncode", 0) != 0}
    assert failed == {}, f"a prebuild entry point failed while the image was built: {failed}"
    image = client.images.get(emu_image)
    # 2.6 GB: torch, g++ and its 0.76 GB PCH, clang 19 (libLLVM, libclang-cpp: ~0.25 GB) and its 0.12 GB PCH, the
    # emulator's prebuilds. The cap catches a layer copied by accident (a chmod of the PCH doubles it).
    assert image.attrs["Size"] < 2.75e9
    assert image.labels.get(images.IMAGE_LABEL) == "emu"


def test_mlu_recipe_is_documented_and_never_pulls():
    dockerfile = (images.MLU_RECIPE_DIR / "Dockerfile").read_text()
    assert "ARG CAMBRICON_IMAGE" in dockerfile and "FROM ${CAMBRICON_IMAGE}" in dockerfile
    assert "docker load" in (images.MLU_RECIPE_DIR / "README.md").read_text()
    if shutil.which("docker"):
        with pytest.raises(RuntimeError, match="docker load"):
            images.ensure_mlu_image("yellow.hub.cambricon.com/pytorch/pytorch:not-loaded-here")
