"""Where grading runs: the backend (emu or mlu) and the sandbox runner, resolved from a GradeEnvironment, and
this machine made ready for them (`grade setup`, and `grade submit` on a machine not set up yet).

The backends (grader.backends) and runners (grader.sandbox) are their own modules; this is the one place that
chooses them (the pipeline's steps then use the chosen ones through their interfaces).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bang_harness.protocol import ENGINES, REPLAY_ENGINE_ENV, replay_engine
from bang_harness.toolchains import GXX_ONLY_ENV

from grader.backends import DEFAULT_BACKEND, TimingSource, get_backend
from grader.backends.base import Backend
from grader.i18n import _
from grader.orchestration.options import GradeEnvironment, SandboxName
from grader.sandbox.base import Phase, Runner
from grader.sandbox.select import SandboxRefused, select_runner

Log = Callable[[str], None]


class UnavailableError(Exception):
    """The requested backend, device or sandbox is not available here (the message says how to fix it)."""


@dataclass
class ResolvedBackend:
    """A backend picked for one grading run: its implementation with the device resolved."""

    name: str
    device: str
    impl: Backend
    engine: str = "wasm"  # the replay's engine (bang_harness.protocol.ENGINES; GradeEnvironment.replay_engine)

    @property
    def time_source(self) -> TimingSource:
        return self.impl.timing_source

    @property
    def env(self) -> dict[str, str]:
        env = dict(self.impl.run_env(self.device))
        # benchmarks: builds without the precompiled torch headers, or with g++'s alone
        for switch in ("BANG_GRADER_NO_PCH", GXX_ONLY_ENV):
            if os.environ.get(switch):
                env[switch] = "1"
        # the replay's engine (DESIGN.md "Confinement by construction"); part of the build's cache key through this
        # env (the build makes the wasm module)
        env[REPLAY_ENGINE_ENV] = self.engine
        return env

    def argv(self, phase: Phase) -> list[str]:
        return self.impl.harness_argv(phase)

    def toolchain(self) -> str:
        return self.impl.toolchain_version()


def resolve_backend(environment: GradeEnvironment) -> ResolvedBackend:
    try:
        impl = get_backend(environment.backend)
        ok, why = impl.available()
        if not ok:
            raise UnavailableError(f"backend {environment.backend!r} is not available here: {why} "
                                   "(see `grade doctor`)")
        device = impl.resolve_device(environment.device)
    except ValueError as exc:
        raise UnavailableError(str(exc)) from exc
    engine = environment.replay_engine or replay_engine(os.environ)
    if engine not in ENGINES:
        raise UnavailableError(f"no replay engine {engine!r} (one of {', '.join(ENGINES)})")
    return ResolvedBackend(name=environment.backend, device=device, impl=impl, engine=engine)


def resolve_environment(environment: GradeEnvironment) -> tuple[ResolvedBackend, Runner]:
    """The backend (device resolved) and the runner a grading runs on: the environment's own runner, else the
    one its sandbox choice selects. Raises UnavailableError (the machine's, never the submission's: a grading
    records it as Verdict.ENVIRONMENT_ERROR) when either is not available here."""
    backend = resolve_backend(environment)
    if environment.runner is not None:
        return backend, environment.runner
    try:
        return backend, select_runner(environment.sandbox, batch=environment.batch, backend=backend.impl,
                                      device=backend.device)
    except SandboxRefused as exc:
        raise UnavailableError(str(exc)) from exc


# --- setting the machine up -------------------------------------------------------------------------------
#
# `grade submit` on a machine with nothing set up does what `grade setup` (and ./run-tests) does before
# grading: scripts/setup-system.sh (as root: apt-get docker.io, debootstrap, bubblewrap ...; start dockerd),
# then the sandbox image (grader.sandbox.images). One script and one image builder for every caller.

REPO_ROOT = Path(__file__).resolve().parents[2]
SETUP_SCRIPT = REPO_ROOT / "scripts" / "setup-system.sh"
FIX_COMMAND = "sudo ./grade setup"


class EnvironmentProblem(UnavailableError):
    """This machine cannot grade with the requested sandbox and nothing here could fix that; `fix` is the
    one command that does."""

    def __init__(self, message: str, fix: str = FIX_COMMAND) -> None:
        super().__init__(_("{problem}\nfix: {command}").format(problem=message, command=fix) if fix else message)
        self.fix = fix


@dataclass
class Prepared:
    """What prepare_environment() found or made: the sandbox grading will use and what it did to get there."""

    sandbox: SandboxName  # docker | bwrap | none
    notes: list[str]


def _is_root() -> bool:
    return os.geteuid() == 0


def _say(log: Log, step: str) -> None:
    """One setup line, labelled as setup, in the active language."""
    log(_("setup: {step}").format(step=step))


def run_setup_script(log: Log, tests: bool = False) -> tuple[bool, str]:
    """Runs scripts/setup-system.sh (root only), its progress lines to `log`; returns (ok, last lines)."""
    argv = ["bash", str(SETUP_SCRIPT), *(["--tests"] if tests else [])]
    _say(log, f"$ {' '.join(argv[1:])}")
    started = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    tail: list[str] = []
    assert proc.stdout is not None
    for line in proc.stdout:
        line = line.rstrip()
        if not line:
            continue
        tail = [*tail[-19:], line]
        # apt's own chatter stays out of the way; the script's lines say what is happening
        if line.startswith("setup-system:"):
            _say(log, line)  # the script's own words, under its name
    code = proc.wait()
    seconds = f"{time.monotonic() - started:.0f}"
    _say(log, (_("scripts/setup-system.sh done in {seconds} s") if code == 0 else
               _("scripts/setup-system.sh failed ({code}) in {seconds} s")).format(code=code, seconds=seconds))
    return code == 0, "\n".join(tail[-8:])


def _docker_ready() -> tuple[bool, str]:
    from grader.sandbox.select import docker_status

    client, why = docker_status()
    return client is not None, why


def _image_state(backend: Backend) -> tuple[bool, bool, str]:
    """(the backend's image built, the heavy base built, tag) -- with a daemon that answers."""
    from grader.sandbox.images import base_image_tag, docker_client, image_exists

    client = docker_client(timeout=30)
    tag = backend.image_tag()
    return image_exists(client, tag), image_exists(client, base_image_tag()), tag


def bwrap_works() -> tuple[bool, str]:
    """Whether bubblewrap is installed and can make its namespaces here (not inside every container)."""
    from grader.sandbox.bwrap_runner import bwrap_available

    if not bwrap_available():
        return False, _("bubblewrap is not installed (bwrap, prlimit, setpriv)")
    probe = subprocess.run(["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-pid",
                            "--unshare-net", "true"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=30, check=False)
    if probe.returncode != 0:
        return False, _("bubblewrap cannot create its sandbox here: {output}").format(
            output=probe.stdout.strip()[-300:])
    return True, "ok"


def setup_docker_sandbox(log: Log, tests: bool = False, install: bool = True,
                         backend: Backend | None = None) -> tuple[bool, str]:
    """Makes the docker sandbox usable: system packages + dockerd (root), then the backend's image (default:
    grader.backends.DEFAULT_BACKEND's). (ok, why not)."""
    backend = backend or get_backend(DEFAULT_BACKEND)
    ready, why = _docker_ready()
    if not ready:
        if not install:
            return False, why
        if not _is_root():
            return False, _("{why}, and installing or starting Docker needs root").format(why=why)
        _say(log, _("{why}: installing and starting what the docker sandbox needs").format(why=why))
        ok, tail = run_setup_script(log, tests=tests)
        if not ok:
            return False, _("scripts/setup-system.sh failed:\n{output}").format(output=tail)
        ready, why = _docker_ready()
        if not ready:
            return False, _("dockerd was started, but: {why}").format(why=why)
    elif tests and _is_root():
        ok, tail = run_setup_script(log, tests=True)  # the test tools (chromium ...) beside a running daemon
        if not ok:
            return False, _("scripts/setup-system.sh failed:\n{output}").format(output=tail)
    built, base_built, tag = _image_state(backend)
    if built:
        return True, "ok"
    if not base_built and not _is_root():
        return False, _("the sandbox image {tag} is not built, and its base (debootstrap) needs root").format(tag=tag)
    if not base_built and not install:
        return False, _("the sandbox image {tag} is not built").format(tag=tag)
    _say(log, (_("building the sandbox image {tag} (a few minutes)") if base_built
               else _("building the sandbox image {tag} (5-15 minutes, once)")).format(tag=tag))
    started = time.monotonic()
    try:
        backend.ensure_image(log=lambda line: _image_progress(line, log))
    except Exception as exc:  # noqa: BLE001 -- any failure here is the machine's, reported as such
        return False, _("building the sandbox image failed: {error}").format(
            error=f"{type(exc).__name__}: {str(exc)[-2000:]}")
    _say(log, _("sandbox image ready in {seconds} s").format(seconds=f"{time.monotonic() - started:.0f}"))
    return True, "ok"


def _image_progress(line: str, log: Log) -> None:
    """The image builder's own lines, less docker's per-layer chatter."""
    text = line.strip()
    if text.startswith("images:") or text.startswith("Step ") or text.startswith("prebuild:") \
            or text.startswith("pch:"):
        _say(log, text.removeprefix("images: "))  # images.py words its own lines; docker's stay docker's


def prepare_environment(environment: GradeEnvironment, log: Log | None = None,
                        install: bool = True) -> Prepared:
    """Before grading: make the requested sandbox usable, setting the machine up where it can (see above),
    falling back to bubblewrap for a self-check (`--sandbox auto`, not batch) where it cannot. Raises
    EnvironmentProblem, naming the command that fixes it, when no allowed sandbox can work."""
    log = log or (lambda line: print(line, file=sys.stderr, flush=True))
    notes: list[str] = []
    if environment.sandbox == "none":
        return Prepared("none", notes)
    if environment.sandbox == "bwrap":
        ok, why = bwrap_works()
        if not ok:
            raise EnvironmentProblem(_("the bubblewrap sandbox is not usable: {why}").format(why=why),
                                     "sudo apt-get install -y bubblewrap util-linux")
        return Prepared("bwrap", notes)
    backend = get_backend(environment.backend)
    if backend.passes_device:
        ok, why = setup_docker_sandbox(log, install=False, backend=backend)  # its image is the instructor's to build
        if not _docker_ready()[0]:
            raise EnvironmentProblem(_("the {backend} backend needs the docker sandbox: {why}").format(
                backend=environment.backend, why=why),
                                     "sudo scripts/setup-system.sh")
        return Prepared("docker", notes)
    ok, why = setup_docker_sandbox(log, install=install, backend=backend)
    if ok:
        return Prepared("docker", notes)
    if environment.sandbox == "docker" or environment.batch:
        raise EnvironmentProblem(_("the docker sandbox is not available: {why}").format(why=why))
    bwrap_ok, bwrap_why = bwrap_works()
    if bwrap_ok:
        note = _("docker sandbox unavailable ({why}): self-check in the bubblewrap sandbox instead (`{fix}` sets "
                 "Docker up)").format(why=why.splitlines()[0], fix=FIX_COMMAND)
        _say(log, note)
        notes.append(note)
        return Prepared("bwrap", notes)
    raise EnvironmentProblem(_("no sandbox can run here: docker: {why}; bubblewrap: {bwrap_why}").format(
        why=why, bwrap_why=bwrap_why))
