"""`python -m bang_harness build`: compile the submission into one extension library with the grader's recipe.

The student's setup.py is never run. The host's build plan (plan.py; /io/build_plan.json, from the layout it
found) names the sources: every .mlu goes through the backend's toolchain, every .cpp through clang++-19 or g++
against torch (toolchains.BINDING_COMPILERS; + CNRT / torch_mlu headers), with the grader's flags, and the objects
are linked into /build/ext/<extension>.so.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import shutil
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from .paths import HarnessPaths
from .plan import OBJECT_DIR, PREBUILT_DIR, BuildPlan, PlanError, cpp_object_name, load_plan
from .protocol import DEVICE_MODULE, WASM_MODULE, WASM_NOTE, WASM_SITES, ErrorKind, ExitCode, replay_engine
from .submission import SubmissionConfig, SubmissionError
from .toolchains import (
    CPU_LIMIT_SIGN,
    GXX,
    PCH_CODEGEN_FLAGS,
    PCH_HEADERS,
    STALL_SIGN,
    BindingCompiler,
    StepOutcome,
    Toolchain,
    get_toolchain,
    run_step,
    torch_build,
)

LOG_CAP_BYTES = 2 << 20  # a template error cascade can produce megabytes; the head holds the first error
TAIL_CHARS = 16_000
STEP_OUTPUT_CAP = 256_000
BUILD_JSON = "build.json"
BUILD_LOG = "build.log"
T = TypeVar("T")


class BuildLog:
    """The build's log, kept in memory up to a cap and written once at the end."""

    def __init__(self, cap: int = LOG_CAP_BYTES) -> None:
        self._parts: list[str] = []
        self._size = 0
        self._dropped = 0
        self._cap = cap

    def add(self, text: str) -> None:
        if not text.endswith("\n"):
            text += "\n"
        room = self._cap - self._size
        if room <= 0:
            self._dropped += len(text)
            return
        self._parts.append(text[:room])
        self._size += min(len(text), room)
        self._dropped += max(0, len(text) - room)

    def add_step(self, step: StepOutcome) -> None:
        output = step.output
        if len(output) > STEP_OUTPUT_CAP:
            output = output[:STEP_OUTPUT_CAP] + f"\n[... {len(step.output) - STEP_OUTPUT_CAP} characters cut]\n"
        status = "" if step.returncode == 0 else f"  [exit {step.returncode}]"
        took = "" if step.seconds is None else f"  ({step.seconds:.1f} s)"
        self.add(f"$ {' '.join(step.command)}{status}{took}\n{output}")

    def text(self) -> str:
        text = "".join(self._parts)
        if self._dropped:
            text += f"[... build log capped at {self._cap} bytes; {self._dropped} more dropped]\n"
        return text


def torch_compile_flags(extension: str) -> tuple[list[Path], list[str]]:
    """Include dirs and macros an extension needs to match the installed torch (pybind11 and C++ ABI): the
    precompiled header's (toolchains.torch_build) plus the extension's name, so the two cannot drift."""
    torch = torch_build()
    return [Path(d) for d in torch.includes], [f"-DTORCH_EXTENSION_NAME={extension}", *torch.defines]


def torch_link_args() -> list[str]:
    args = [arg for lib_dir in torch_build().library_dirs for arg in (f"-L{lib_dir}", f"-Wl,-rpath,{lib_dir}")]
    return args + ["-lc10", "-ltorch", "-ltorch_cpu", "-ltorch_python"]


# lld, where the machine has it, links the extension: g++'s own linker (bfd) reads the torch libraries' symbol
# tables slowly (0.45 CPU-s a link against lld's 0.09). g++ finds `ld.lld` on PATH, or in LLVM's own bin folder
# (Debian's lld-19 puts only ld.lld-19 on PATH), which -B adds to its program search for this link alone (a link
# runs no assembler or compiler from there). LLD_OFF_ENV set: the system linker only.
LLD_DIRS = (Path("/usr/lib/llvm-19/bin"),)
LLD_OFF_ENV = "BANG_GRADER_NO_LLD"
LLD_REFUSED = "(lld refused this link; the system linker made it)"


@functools.cache
def lld_link_flags() -> tuple[str, ...]:
    """g++'s flags that make lld its linker, () where there is none (or LLD_OFF_ENV says not to)."""
    if os.environ.get(LLD_OFF_ENV):
        return ()
    if shutil.which("ld.lld"):
        return ("-fuse-ld=lld",)
    for folder in LLD_DIRS:
        if os.access(folder / "ld.lld", os.X_OK):
            return ("-fuse-ld=lld", f"-B{folder}/")
    return ()


def link_shared(command: list[str]) -> StepOutcome:
    """`command` (a `g++ -shared` link) run with lld where there is one; a link lld refuses is run again by the
    system linker, whose outcome stands: lld is stricter than bfd in corners, and a build must never fail for it."""
    fast = lld_link_flags()
    if fast:
        outcome = run_step([*command, *fast])
        if outcome.returncode == 0:
            return outcome
    outcome = run_step(command)
    if fast:
        outcome.output = f"{LLD_REFUSED}\n{outcome.output}"
    return outcome


def parallel_jobs() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)


class ExtensionBuilder:
    def __init__(self, paths: HarnessPaths, toolchain: Toolchain, plan: BuildPlan) -> None:
        self.paths = paths
        self.toolchain = toolchain
        self.plan = plan
        self.log = BuildLog()
        self.obj_dir = paths.build / OBJECT_DIR
        self.compiling = False  # set once the compiler first sees the student's sources

    def _build_wasm(self, mlu_sources: list[Path], includes: list[Path]) -> str:
        """The kernels for the WebAssembly replay (the default engine): WASM_MODULE and WASM_SITES, or WASM_NOTE
        saying why not -- never a failed build: the native device module stands for them then, and the replay and
        the report say so. Returns the build log's note."""
        for made in (WASM_MODULE, WASM_SITES, WASM_NOTE):  # beside the device module, linked meanwhile
            (self.paths.build / made).parent.mkdir(parents=True, exist_ok=True)
        return build_wasm(mlu_sources, includes, self.paths.build / WASM_MODULE, self.paths.build / WASM_SITES,
                          note=self.paths.build / WASM_NOTE)

    def build(self) -> bool:
        mlu_sources, cpp_sources, local_includes = self.plan.resolve(self.paths.submission)
        if not cpp_sources:
            self.log.add(f"error: no .cpp binding found in the submission: the PyTorch binding is missing "
                         f"(found {len(mlu_sources)} .mlu)")
            return False
        for folder in (self.obj_dir, self.paths.extension_dir):
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True)

        torch_includes, defines = torch_compile_flags(self.plan.extension)
        cxx_std = torch_build().std
        cpp_includes = [*local_includes, *self.toolchain.cpp_include_dirs(), *torch_includes]

        # the device module: the same kernels for trusted replay (DESIGN.md "Threat model"), each compiled by the
        # step that compiles its source for the run
        device_objects = [self.obj_dir / f"device_{index}_{src.stem}.o" for index, src in enumerate(mlu_sources)] \
            if replays(self.toolchain) else []

        def compile_mlu(src: Path) -> tuple[Path, StepOutcome]:
            index = mlu_sources.index(src)
            obj = self.obj_dir / f"mlu_{index}_{src.stem}.o"  # stems may repeat across folders
            if device_objects:
                return obj, self.toolchain.compile_mlu_and_device_object(src, obj, device_objects[index],
                                                                         local_includes)
            return obj, self.toolchain.compile_mlu(src, obj, local_includes)

        prebuilt = dict(self.plan.prebuilt)
        precompiled = self.toolchain.precompiled_headers()
        gxx_pch = next((folder for compiler, folder in precompiled if compiler == GXX), None)

        def cpp_command(compiler: BindingCompiler, src: Path, obj: Path, pch: Path | None,
                        forced: bool) -> list[str]:
            # A PCH folder goes first on the include path: a compiler looks for `<header>.gch` / `.pch` in each
            # include folder just before the header itself.
            includes = [arg for d in [*([pch] if pch else []), *cpp_includes] for arg in ("-I", str(d))]
            force = [arg for header in PCH_HEADERS for arg in ("-include", str(pch / header))] if pch and forced \
                else []
            # The depfile names every file the compiler read: the host shares the object only by those files.
            return [compiler.command, *force, cxx_std, *PCH_CODEGEN_FLAGS, *compiler.flags, compiler.error_limit,
                    *defines, *includes, "-MD", "-MF", str(obj.with_suffix(".d")), "-c", str(src), "-o", str(obj)]

        def compile_cpp(src: Path) -> tuple[Path, StepOutcome]:
            index = cpp_sources.index(src)
            obj = self.obj_dir / cpp_object_name(index, self.plan.cpp_sources[index])
            reuse = prebuilt.get(self.plan.cpp_sources[index])
            if reuse and (self.paths.io / PREBUILT_DIR / reuse).is_file():
                shutil.copyfile(self.paths.io / PREBUILT_DIR / reuse, obj)
                return obj, StepOutcome(["reuse", f"{PREBUILT_DIR}/{reuse}", "(compiled from the same inputs "
                                         "by an earlier build)"], 0, "")
            # Each precompiled header first, as CMake's precompile_headers does (a lab binding includes its own
            # headers before torch's): clang's, then g++'s (28 -> 10 CPU-s). Where none of those compiles, the
            # binding is compiled by g++ as written, and only that outcome is kept.
            passed_over: list[str] = []
            for compiler, folder in precompiled:
                step = run_step(cpp_command(compiler, src, obj, folder, forced=True))
                if step.returncode == 0 or CPU_LIMIT_SIGN in step.output or STALL_SIGN in step.output:
                    return obj, _noting(step, passed_over)
                passed_over.append(compiler.command if compiler != GXX else "g++ with its PCH first")
            return obj, _noting(run_step(cpp_command(GXX, src, obj, gxx_pch, forced=False)), passed_over)

        # Objects are independent: compile them all at once (the torch headers make each C++ file slow). The
        # kernels' WebAssembly build reads only the sources: it is queued behind the compiles, so it takes the
        # first free worker and is done by the time they are (its note is said only for a build that compiled),
        # and the two links run side by side -- a changed kernel's build is no longer the sum of its steps.
        self.compiling = True
        library = self.paths.extension_library(self.plan.extension)
        pool = ThreadPoolExecutor(max_workers=parallel_jobs())
        try:
            # the binding first: the longest single step, begun while the .mlu steps share the other workers
            cpp_futures = [pool.submit(_timed, compile_cpp, s) for s in cpp_sources]
            futures = [pool.submit(_timed, compile_mlu, s) for s in mlu_sources] + cpp_futures
            wasm = pool.submit(self._build_wasm, mlu_sources, local_includes) \
                if device_objects and replay_engine(os.environ) == "wasm" else None
            results = [f.result() for f in futures]
            failed = [step for _, step in results if step.returncode != 0]
            # Successful steps first, so the failures sit at the end of the log, in its tail.
            for _, step in sorted(results, key=lambda r: r[1].returncode != 0):
                self.log.add_step(step)
            if failed:
                self.log.add(f"error: {len(failed)} of {len(results)} source files failed to compile")
                return False
            linking = pool.submit(link_shared, ["g++", "-shared", "-o", str(library),
                                                *[str(obj) for obj, _ in results], *self.toolchain.link_args(),
                                                *torch_link_args()])
            if device_objects:
                step = self.toolchain.link_device_module(device_objects, self.paths.build / DEVICE_MODULE)
                self.log.add_step(step)
                if step.returncode != 0:
                    self.log.add("error: the kernels could not be made a device module the grader can replay")
                    return False
            if wasm is not None:
                _wasm_note(self.log, wasm.result())
            link = linking.result()
        finally:
            # a failed build does not wait for the WebAssembly build it will not use, when that has not begun
            pool.shutdown(wait=True, cancel_futures=True)
        self.log.add_step(link)
        if link.returncode != 0:
            self.log.add("error: linking the extension failed")
            return False
        self.log.add(f"built {library.name} from {len(mlu_sources)} .mlu and {len(cpp_sources)} .cpp files")
        return True


def build_wasm(sources: list[Path], includes: list[Path], module: Path, sites: Path,
               archs: list[str] | None = None, note: Path | None = None) -> str:
    """`sources`' kernels built for the WebAssembly replay (bang_emu/wasm/build.py) into `module`, their launch
    sites' names into `sites`; the build log's note saying so, or why they are replayed natively (then neither file
    is written, and `note`, where given, says why: a wasm build that fails never fails the build)."""
    from bang_emu.wasm import build as wasm_build

    started = time.monotonic()
    try:
        built = wasm_build.build(list(sources), includes=list(includes), archs=archs)
    except Exception as exc:  # the wasm build's own errors, each naming why
        why = f"they do not build for the WebAssembly engine ({type(exc).__name__}: {str(exc)[:1500]})"
        if note is not None:
            note.write_text(why, encoding="utf-8")
        return f"the kernels are replayed natively: {why}"
    module.write_bytes(built.wasm)
    sites.write_text(json.dumps(sorted(built.sites)))
    return (f"built the kernels for the WebAssembly replay ({len(built.wasm)} bytes, {len(built.sites)} launch sites, "
            f"{time.monotonic() - started:.1f} s)")


def _wasm_note(log: BuildLog, message: str) -> None:
    log.add(f"note: {message}")


def replays(toolchain: Toolchain) -> bool:
    """Whether the toolchain builds a device module for trusted replay (DESIGN.md "Threat model"): one that has
    compile_mlu_and_device_object and link_device_module (the emulator's)."""
    return callable(getattr(toolchain, "compile_mlu_and_device_object", None))


def _noting(step: StepOutcome, passed_over: list[str]) -> StepOutcome:
    """step, its output headed by the faster attempts that did not compile the file (their output is dropped)."""
    if not passed_over:
        return step
    note = f"[not compiled by {', '.join(passed_over)}: the outcome below is kept]\n"
    return dataclasses.replace(step, output=note + step.output)


def _timed(compile_one: Callable[[T], tuple[Path, StepOutcome]], source: T) -> tuple[Path, StepOutcome]:
    """A source's whole compile, a retry included, for its step in the log."""
    started = time.monotonic()
    obj, step = compile_one(source)
    return obj, dataclasses.replace(step, seconds=time.monotonic() - started)


def run_build(backend: str, paths: HarnessPaths | None = None) -> int:
    """Build and write build.log / build.json; returns the process exit code (0 only when the library exists).

    build.json's `error_kind` is typed (protocol.ErrorKind): `harness_error` only for a fault of the harness
    before the compiler saw any student source, so compiler output (`#error ...`) can never claim it.
    """
    paths = paths or HarnessPaths.from_env()
    started = time.monotonic()
    log = BuildLog()
    toolchain_name = backend
    ok = False
    kind: ErrorKind | None = ErrorKind.COMPILE_ERROR
    builder: ExtensionBuilder | None = None
    try:
        toolchain = get_toolchain(backend)
        toolchain_name = toolchain.describe()
        plan = load_plan(paths.io, paths.submission, SubmissionConfig.load(paths.submission).extension)
        builder = ExtensionBuilder(paths, toolchain, plan)
        log = builder.log
        log.add(f"toolchain: {toolchain_name}")
        ok = builder.build()
    except (SubmissionError, PlanError) as exc:
        log.add(f"error: {exc}")
    except Exception as exc:  # noqa: BLE001 -- a harness fault must still leave a build.json behind
        log.add(f"internal error in the build harness: {type(exc).__name__}: {exc}")
        if builder is None or not builder.compiling:
            kind = ErrorKind.HARNESS_ERROR
    text = log.text()
    paths.build.mkdir(parents=True, exist_ok=True)
    (paths.build / BUILD_LOG).write_text(text, encoding="utf-8")
    summary = {"ok": ok, "toolchain": toolchain_name, "seconds": round(time.monotonic() - started, 3),
               "error_kind": None if ok else kind, "log_tail": text[-TAIL_CHARS:]}
    (paths.build / BUILD_JSON).write_text(json.dumps(summary, indent=1), encoding="utf-8")
    print(text[-TAIL_CHARS:], file=sys.stderr if not ok else sys.stdout)
    return ExitCode.OK if ok else ExitCode.BUILD_FAILED
