"""`grade doctor`: what this machine can grade with, and the command that fixes what is missing."""

from __future__ import annotations

import shutil
from dataclasses import dataclass

from grader.backends import BACKENDS
from grader.checks import self_test_all
from grader.scoring.thresholds import thresholds_path
from grader.spec import SpecError, available_assignments, load_assignment


@dataclass
class MachineCheck:
    area: str
    item: str
    ok: bool
    detail: str
    fix: str = ""


def diagnose() -> list[MachineCheck]:
    out: list[MachineCheck] = []
    for name, cls in BACKENDS.items():
        backend = cls()
        ok, why = backend.available()
        fix = {"emu": "./bootstrap.sh   (apt-get install g++; pip install -e .)",
               "mlu": "needs a Cambricon MLU host with the driver, Neuware and torch_mlu"}.get(name, "")
        out.append(MachineCheck("backend", name, ok, why, "" if ok else fix))
        if ok:
            out.append(MachineCheck("devices", name, True, ", ".join(backend.devices()) or "none"))
            out.append(MachineCheck("toolchain", name, True, backend.toolchain_version()))
    out += _sandboxes()
    for tool, fix in (("g++", "apt-get install -y g++"), ("chromium", "apt-get install -y chromium")):
        found = shutil.which(tool)
        out.append(MachineCheck("tool", tool, bool(found), found or "not on PATH", "" if found else fix))
    failures = {k: v for k, v in self_test_all().items() if v}
    out.append(MachineCheck("checks", "self-tests", not failures, "every check tells good from bad outputs" if not failures
                       else f"self-tests failing: {failures}", "" if not failures else "a grader bug: report it"))
    for name in available_assignments():
        try:
            spec = load_assignment(name)
        except SpecError as exc:
            out.append(MachineCheck("assignment", name, False, str(exc).splitlines()[0], f"grade spec check {name}"))
            continue
        path = thresholds_path(spec, "emu", "mlu370-x8")
        out.append(MachineCheck("assignment", name, True, f"{len(spec.cases)} cases, {len(spec.stages)} stages, "
                           f"{spec.max_score:g} points"))
        out.append(MachineCheck("thresholds", f"{name} emu-mlu370-x8", path.is_file(),
                           str(path.relative_to(path.parents[3])) if path.is_file() else "not calibrated",
                           "" if path.is_file() else f"grade calibrate --assignment {name}"))
    return out


def _sandboxes() -> list[MachineCheck]:
    out = []
    try:
        from grader.sandbox.bwrap_runner import bwrap_available
        from grader.sandbox.images import emu_image_tag, image_exists
        from grader.sandbox.select import docker_status
    except ImportError as exc:
        return [MachineCheck("sandbox", "runners", False, f"sandbox modules missing: {exc}")]
    client, why = docker_status()
    out.append(MachineCheck("sandbox", "docker", client is not None, "daemon answers" if client else why,
                       "" if client else "sudo ./grade setup   (installs and starts dockerd, builds the image)"))
    if client is not None:
        tag = emu_image_tag()
        built = image_exists(client, tag)
        out.append(MachineCheck("sandbox", "emu image", built, tag if built else f"{tag} not built",
                           "" if built else "./grade setup   (or: grade images build)"))
    bwrap = bwrap_available()
    out.append(MachineCheck("sandbox", "bwrap", bwrap, "bubblewrap + prlimit + setpriv" if bwrap else "missing",
                       "" if bwrap else "apt-get install -y bubblewrap util-linux"))
    out.append(MachineCheck("sandbox", "process", True, "--sandbox none: unsandboxed, for your own code only"))
    return out
