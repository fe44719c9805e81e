"""`grade doctor`: what this machine can grade with, and the command that fixes what is missing."""

from __future__ import annotations

import shutil
from dataclasses import dataclass

from grader.backends import BACKENDS, DEFAULT_BACKEND, get_backend
from grader.checks import self_test_all
from grader.i18n import N_, _
from grader.scoring.thresholds import thresholds_path
from grader.spec import SpecError, available_assignments, load_assignment

# The areas' names as shown (MachineCheck.area is the key the CLI matches on; translated when shown).
AREAS = {"backend": N_("backend"), "devices": N_("devices"), "toolchain": N_("toolchain"), "tool": N_("tool"),
         "checks": N_("checks"), "assignment": N_("assignment"), "thresholds": N_("thresholds"),
         "sandbox": N_("sandbox")}


@dataclass
class MachineCheck:
    area: str  # a key of AREAS
    item: str
    ok: bool
    detail: str
    fix: str = ""


def diagnose() -> list[MachineCheck]:
    out: list[MachineCheck] = []
    for name, cls in BACKENDS.items():
        backend = cls()
        ok, why = backend.available()
        out.append(MachineCheck("backend", name, ok, why, "" if ok else backend.unavailable_fix()))
        if ok:
            out.append(MachineCheck("devices", name, True, ", ".join(backend.devices()) or _("none")))
            out.append(MachineCheck("toolchain", name, True, backend.toolchain_version()))
    out += _sandboxes()
    for tool, fix in (("g++", "apt-get install -y g++"), ("chromium", "apt-get install -y chromium")):
        found = shutil.which(tool)
        out.append(MachineCheck("tool", tool, bool(found), found or _("not on PATH"), "" if found else fix))
    failures = {k: v for k, v in self_test_all().items() if v}
    out.append(MachineCheck("checks", _("self-tests"), not failures,
                            _("every check tells good from bad outputs") if not failures
                            else _("self-tests failing: {failures}").format(failures=failures),
                            "" if not failures else _("a grader bug: report it")))
    for name in available_assignments():
        try:
            spec = load_assignment(name)
        except SpecError as exc:
            out.append(MachineCheck("assignment", name, False, str(exc).splitlines()[0], f"grade spec check {name}"))
            continue
        default = get_backend(DEFAULT_BACKEND)
        path = thresholds_path(spec, default.name, default.default_device)
        out.append(MachineCheck("assignment", name, True, _("{cases} cases, {stages} stages, {points} points").format(
            cases=len(spec.cases), stages=len(spec.stages), points=f"{spec.max_score:g}")))
        out.append(MachineCheck("thresholds", f"{name} {default.name}-{default.default_device}", path.is_file(),
                           str(path.relative_to(path.parents[3])) if path.is_file() else _("not calibrated"),
                           "" if path.is_file() else f"grade calibrate --assignment {name}"))
    return out


def _sandboxes() -> list[MachineCheck]:
    out = []
    try:
        from grader.sandbox.bwrap_runner import bwrap_available
        from grader.sandbox.images import image_exists
        from grader.sandbox.select import docker_status
    except ImportError as exc:
        return [MachineCheck("sandbox", _("runners"), False, _("sandbox modules missing: {error}").format(error=exc))]
    client, why = docker_status()
    out.append(MachineCheck("sandbox", "docker", client is not None, _("daemon answers") if client else why,
                            "" if client else _("sudo ./grade setup   (installs and starts dockerd, builds the image)")))
    for name, cls in BACKENDS.items() if client is not None else ():
        backend = cls()
        if not backend.available()[0]:
            continue  # its image would not help here
        tag = backend.image_tag()
        built = image_exists(client, tag)
        out.append(MachineCheck("sandbox", _("{backend} image").format(backend=name), built,
                                tag if built else _("{tag} not built").format(tag=tag),
                                "" if built else _("./grade setup   (or: {command})").format(command=backend.image_fix())))
    bwrap = bwrap_available()
    out.append(MachineCheck("sandbox", "bwrap", bwrap, "bubblewrap + prlimit + setpriv" if bwrap else _("missing"),
                       "" if bwrap else "apt-get install -y bubblewrap util-linux"))
    out.append(MachineCheck("sandbox", "process", True, _("--sandbox none: unsandboxed, for your own code only")))
    return out
