"""Building the submission's extension in the sandbox (or taking it from the build cache), and the host's own
facts about what was built (device table entry, kernel symbols) for the integrity checks."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bang_harness.plan import BUILD_PLAN_FILE, OBJECT_DIR, PREBUILT_DIR, BuildPlan, cpp_object_name
from bang_harness.protocol import ErrorKind, ExitCode
from bang_harness.toolchains import COMPILER_CPU_ENV, CPU_LIMIT_SIGN, STALL_SIGN

from grader import __version__
from grader.atomic_file import atomic_write_text
from grader.checks.integrity import HostFacts, KernelSymbols, device_profile
from grader.i18n import _
from grader.orchestration import build_cache, object_cache
from grader.orchestration.environment import ResolvedBackend
from grader.orchestration.read_outputs import describe_outcome, output_tail, read_json, read_text
from grader.results import BuildInfo, Verdict
from grader.sandbox.base import Limits, Mounts, Phase, Runner, cores
from grader.sandbox.capped import UntrustedFileError, open_capped

COMPILER_OUTPUT_CHARS = 64_000
COMPILE_ERROR_FILE = "compile-error.json"  # beside build.json; written by the host only
# A compiler stopped by the machine (memory, a kill) says one of these: such a failure is not kept.
RESOURCE_FAILURE_SIGNS = ("Killed", "internal compiler error", "out of memory", "memory exhausted",
                          "Cannot allocate memory", CPU_LIMIT_SIGN)
# The wall limit of a build, as a multiple of its per-compiler CPU limit: a backstop for what CPU time does not
# count (a stuck I/O wait), loose enough that an honest build on a host loaded several times over finishes.
BUILD_WALL_FACTOR = 3
# The build's compiles run side by side (bang_harness/build.py: the sources, the kernels' two objects, the
# WebAssembly build, the two links): up to two cores, as a project's run has (project_run.RUN_CPUS). Each compiler
# process keeps its own CPU limit (COMPILER_CPU_ENV); one core made a changed kernel's build the sum of its steps.
BUILD_CPUS = 2.0


def _cached_info(cached: dict, build_dir: Path, *, ok: bool, compiler_output: str = "") -> BuildInfo:
    """A build taken from the cache, as its build.json recorded it."""
    return BuildInfo(ok=ok, toolchain=str(cached.get("toolchain", "")), cached=True, compiler_output=compiler_output,
                     duration_seconds=float(cached.get("seconds", 0.0) or 0.0), cache_key=build_dir.name)


def _compile_error_message() -> str:  # translated when it is said
    return _("the extension does not compile; the compiler output follows in the report (build.compiler_output)")


@dataclass
class Built:
    info: BuildInfo
    failure: tuple[Verdict, str] | None = None  # the verdict and message that end the grading here


@dataclass
class BuildStep:
    runner: Runner
    backend: ResolvedBackend
    root: Path
    plan: BuildPlan | None  # the sources the layout names (grader/project_layouts.py)
    extension: str
    timeout_seconds: float
    cache: Path | None
    progress: Callable[[str, float], None]
    image: str = ""  # the sandbox image's tag; "" for runners without one (process, bwrap)

    @property
    def recipe(self) -> str:
        """What besides the sources decides a build (and the engine made from it: wasm_engine.py)."""
        return self._recipe

    @functools.cached_property
    def _recipe(self) -> str:
        """Toolchain, image, backend and build environment: what besides the sources decides a build (asked
        once: the toolchain's version runs the compiler)."""
        # Without an image (process, bwrap runners) the harness and emulator run from these sources: their
        # hash (the tag an image of them would have) stands in for the image's.
        toolchain = f"{self.backend.toolchain()}|{self.image or self.backend.impl.image_tag()}|{__version__}"
        return build_cache.build_recipe(toolchain, self.backend.name, self.backend.env)

    def folder(self, work: Path) -> Path:
        if self.cache is None:
            path = work / "build"
            path.mkdir(parents=True, exist_ok=True)
            return path
        plan = self.plan.to_json() if self.plan is not None else self.extension
        key = build_cache.build_key(self.root, plan, self._recipe)
        return build_cache.entry(Path(self.cache), key)

    def build(self, build_dir: Path, work: Path) -> Built:
        if self.cache is None:
            return self._compile(build_dir, work)
        with build_cache.build_lock(build_dir):  # a parallel grading of the same sources builds it once
            cached = read_json(build_dir / "build.json")
            if cached and cached.get("ok") is True:
                return Built(_cached_info(cached, build_dir, ok=True))
            if cached and read_json(build_dir / COMPILE_ERROR_FILE):  # the host's own record, written after the build
                output = read_text(build_dir / "build.log", COMPILER_OUTPUT_CHARS) or ""
                return Built(_cached_info(cached, build_dir, ok=False, compiler_output=output),
                             (Verdict.COMPILE_ERROR, _compile_error_message()))
            return self._compile(build_dir, work)

    def _shares_objects(self) -> bool:
        # Only image sandboxes: the image fixes every file a compile reads outside the submission.
        return (self.cache is not None and self.plan is not None and bool(self.image)
                and not os.environ.get(object_cache.OFF_ENV))

    def _reuse_objects(self, io: Path, keys: list[tuple[int, str, str]]) -> tuple[tuple[str, str], ...]:
        """Binding objects an earlier build compiled from the same inputs, copied to /io/prebuilt."""
        assert self.cache is not None
        reused = []
        for index, source, key in keys:
            found = object_cache.find(Path(self.cache), key, self.root.resolve())
            if found is not None:
                (io / PREBUILT_DIR).mkdir(exist_ok=True)
                shutil.copyfile(found, io / PREBUILT_DIR / f"cpp_{index}.o")
                reused.append((source, f"cpp_{index}.o"))
        return tuple(reused)

    def _share_objects(self, build_dir: Path, plan: BuildPlan, keys: list[tuple[int, str, str]]) -> None:
        """Offers the binding objects this build compiled to later builds (object_cache.store decides)."""
        assert self.cache is not None
        reused = dict(plan.prebuilt)
        for index, source, key in keys:
            if source not in reused:
                obj = build_dir / OBJECT_DIR / cpp_object_name(index, source)
                object_cache.store(Path(self.cache), key, self.root.resolve(), obj, obj.with_suffix(".d"))

    def _object_keys(self) -> list[tuple[int, str, str]]:
        """(index, source, key) of each binding source that can be shared."""
        assert self.plan is not None
        keys = [(i, s, object_cache.object_key(self.plan, s, self.root.resolve(), self._recipe))
                for i, s in enumerate(self.plan.cpp_sources)]
        return [(i, s, k) for i, s, k in keys if k is not None]

    def _compile(self, build_dir: Path, work: Path) -> Built:
        self.progress(_("building the extension"), 0.05)
        io = work / "io-build"
        io.mkdir()
        plan = self.plan
        shares = self._shares_objects()
        keys = self._object_keys() if shares else []  # hashed once, before the build
        if plan is not None:
            if shares:
                plan = dataclasses.replace(plan, prebuilt=self._reuse_objects(io, keys))
            (io / BUILD_PLAN_FILE).write_text(plan.to_json(), encoding="utf-8")
        wall_seconds = self.timeout_seconds * BUILD_WALL_FACTOR
        outcome = self.runner.run(Phase.BUILD, self.backend.argv(Phase.BUILD),
                                  Mounts(submission=self.root.resolve(), build=build_dir, io=io),
                                  Limits(wall_seconds=wall_seconds, cpus=cores(BUILD_CPUS)),
                                  env={**self.backend.env, COMPILER_CPU_ENV: f"{self.timeout_seconds:g}"})
        info = read_json(build_dir / "build.json") or {}
        log = read_text(build_dir / "build.log", COMPILER_OUTPUT_CHARS) or str(info.get("log_tail", ""))
        ok = bool(info.get("ok")) and outcome.ok
        built = BuildInfo(ok=ok, toolchain=str(info.get("toolchain", self.backend.name)),
                          compiler_output=log[-COMPILER_OUTPUT_CHARS:] if log else output_tail(outcome),
                          duration_seconds=float(info.get("seconds", outcome.wall_seconds) or 0.0),
                          cache_key=build_dir.name if self.cache else None)
        if ok:
            if plan is not None and shares:
                self._share_objects(build_dir, plan, keys)
            return Built(built)
        if outcome.timed_out:
            return Built(built, (Verdict.TIMEOUT, _("the build took longer than {seconds:.0f} s").format(
                seconds=wall_seconds)))
        if STALL_SIGN in log:  # forging it gains nothing: a timeout scores what a compile error does
            return Built(built, (Verdict.TIMEOUT, _("a compiler made no progress (it was waiting, not compiling: an "
                                                    "#include of a pipe, a device or /proc/self/fd?) and was "
                                                    "stopped")))
        if CPU_LIMIT_SIGN in log:
            return Built(built, (Verdict.TIMEOUT, _("a compiler used more than {seconds:.0f} CPU-seconds on one "
                                                    "file").format(seconds=self.timeout_seconds)))
        if not info:
            # No build.json at all: the harness itself did not get to write it (killed, out of memory).
            return Built(built, (Verdict.COMPILE_ERROR, _("the build did not complete ({why})").format(
                why=describe_outcome(outcome))))
        # build.json is the harness's (no student code runs while building); its typed kind is believed only
        # when the runner saw the harness exit with its own "build failed" status.
        harness_fault = (info.get("error_kind") == ErrorKind.HARNESS_ERROR and outcome.exit_code == ExitCode.BUILD_FAILED
                         and not outcome.timed_out and not outcome.oom_killed and not outcome.signal)
        if harness_fault:
            return Built(built, (Verdict.INTERNAL_ERROR, _("the build harness failed (not your fault):") + "\n"
                                 + log[-4000:]))
        if self.cache is not None and not any(sign in log for sign in RESOURCE_FAILURE_SIGNS):
            # The compiler's own verdict on these sources, not the machine's: the next grading of the same
            # content (a warm batch, a resubmission) reports it without compiling again.
            atomic_write_text(build_dir / COMPILE_ERROR_FILE, json.dumps({"exit_code": outcome.exit_code}))
        return Built(built, (Verdict.COMPILE_ERROR, _compile_error_message()))


def host_facts(backend: ResolvedBackend, build_dir: Path, extension: str, cache: Path | None = None) -> HostFacts:
    """The host's own facts for integrity checks: its device table entry and the extension's symbols (kept in the
    build cache `cache` by the extension's content, kernel_symbols)."""
    facts = HostFacts(device=backend.device, profile=None, symbols=None)
    if not backend.impl.kernel_trace:
        facts.notes.append(f"the {backend.name} backend has no signed launch trace: the integrity checks "
                           "that need it (provenance, counted work, modelled time) were skipped")
        if backend.impl.kernel_windows:  # kernel names CNPAPI reports are checked against these (kernel_use)
            facts.symbols = kernel_symbols(build_dir / "ext" / f"{extension}.so", cache, build_dir)
        return facts
    facts.profile = device_profile(backend.device)
    if facts.profile is None:
        facts.notes.append(f"no entry for {backend.device} in the host's device table: profile "
                           "figures and modelled-time floors were not checked")
    facts.symbols = kernel_symbols(build_dir / "ext" / f"{extension}.so", cache, build_dir)
    if facts.symbols is None:
        facts.notes.append("the built extension's symbols could not be read on the host (nm): kernel "
                           "names were not checked")
    return facts


@functools.cache
def _symbols_recipe() -> bytes:
    """What a kept reading of symbols depends on besides the library: the code that reads them and the host's nm."""
    from grader.checks import integrity

    nm = shutil.which("nm")
    try:
        version = subprocess.run([nm, "--version"], capture_output=True, timeout=30, check=False).stdout if nm else b""
    except (OSError, subprocess.TimeoutExpired):
        version = b""
    return hashlib.sha256(Path(integrity.__file__).read_bytes() + b"\0" + os.fsencode(nm or "") + b"\0"
                          + version).digest()


def kernel_symbols(library: Path, cache: Path | None, root: Path) -> KernelSymbols | None:
    """KernelSymbols.from_library, kept in the build cache by what the host hashed itself (the library's bytes and
    _symbols_recipe) in a folder no sandbox is given: a warm grading of the same extension reads them back instead
    of running nm twice and parsing every name again (~0.15 CPU-s and 0.2 s before its first round, stop 52). The
    library is the build sandbox's file under `root`: hashed only as a regular file reached with no symlink, within
    the build's own file size limit (capped.open_capped). Anything else, an unreadable library or no nm is read
    (and said) as before, and never kept."""
    if cache is None:
        return KernelSymbols.from_library(library)
    try:
        with open_capped(library, Limits().file_size_bytes, root=root) as stream:
            digest = hashlib.file_digest(stream, "sha256").digest()
    except (OSError, UntrustedFileError):
        return KernelSymbols.from_library(library)
    digest = hashlib.sha256(_symbols_recipe() + digest).hexdigest()[:32]
    kept = cache / build_cache.SYMBOLS_DIR / digest / "symbols.json"
    try:
        found = json.loads(kept.read_text(encoding="utf-8"))
        os.utime(kept.parent)  # recently used: pruning keeps it
        return KernelSymbols(frozenset(found["names"]), frozenset(found["launch_names"]))
    except (OSError, ValueError, KeyError, TypeError):
        pass
    symbols = KernelSymbols.from_library(library)
    if symbols is not None:
        with contextlib.suppress(OSError):
            atomic_write_text(kept, json.dumps({"names": sorted(symbols.names),
                                                "launch_names": sorted(symbols.launch_names)}))
    return symbols
