"""The WebAssembly engine of a build's kernels, made once per module and staged into each replay (issue 41).

The engine is native code that wasm2c and gcc make from the checked, counted module (bang_emu/wasm/engine.py):
deterministic, and one to three CPU seconds for a small module (gcc -O1; two to five at -O2) -- most of what a
replay sandbox spent when each replay made it again. It is made on the trusted side: never in the build sandbox (which runs the student's
compiler invocations: an engine made there could be anything) nor taken from a replay sandbox (whose native
replays, a fallback or a second opinion, run the student's device code beside it), but by `bang_harness
make-engine` in a sandbox of its own in which nothing but wasm2c and gcc run over the module's bytes, as the
replay would have run them. The host keeps the result under the build cache by the hash of what it was made from
(the module, its site names, the sandbox image that holds the compilers and the glue) and copies it into each
replay's /io (protocol.WASM_ENGINE), which only the host writes before the replay starts.

Its making starts as soon as the build is done, beside the run's first round, and the first replay waits for it. A
module that has no engine (none was built, or the maker failed) stages nothing: the replay makes it or says why
it replays natively, as before.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import threading
from pathlib import Path

from bang_harness.protocol import WASM_ENGINE, WASM_MODULE, WASM_SITES

from grader.orchestration import build_cache
from grader.orchestration.environment import ResolvedBackend
from grader.sandbox.base import Limits, Mounts, Phase, Runner
from grader.sandbox.capped import UntrustedFileError, read_bytes_capped

MODULE_MAX_BYTES = 256 << 20  # the build's module, read to hash it (the build sandbox wrote it)
ENGINE_MAX_BYTES = 512 << 20  # what the maker left, read back
MAKER_SECONDS = 900.0  # wasm2c (300 s) and gcc (600 s) have their own limits in engine.py


def engine_key(build_dir: Path, recipe: str) -> str | None:
    """The hash an engine is kept by: the module, its site names and `recipe` (the image: the compilers and the
    glue), None when the build has no module (or an unreadable one: the replay says why)."""
    try:
        module = read_bytes_capped(build_dir / WASM_MODULE, MODULE_MAX_BYTES, root=build_dir)
        sites = read_bytes_capped(build_dir / WASM_SITES, MODULE_MAX_BYTES, root=build_dir)
    except (UntrustedFileError, OSError):
        return None
    digest = hashlib.sha256(recipe.encode() + b"\0")
    for part in (module, sites):
        digest.update(hashlib.sha256(part).digest())
    return digest.hexdigest()[:32]


class EngineMaker:
    """Makes (or finds) one build's engine in the background; `engine()` waits for it: the folder holding
    `device.wasm.so`, or None (nothing to stage: the replay does as it did)."""

    def __init__(self, runner: Runner, backend: ResolvedBackend, build_dir: Path, cache: Path | None, work: Path,
                 recipe: str) -> None:
        self.runner, self.backend, self.build_dir = runner, backend, build_dir
        self.cache, self.work, self.recipe = cache, work, recipe
        self._result: Path | None = None
        self.made = False  # this grading ran the maker (False: found kept, or none)
        self._thread: threading.Thread | None = None
        if backend.impl.kernel_trace and backend.engine == "wasm":
            self._thread = threading.Thread(target=self._make, name="wasm-engine", daemon=True)
            self._thread.start()

    def engine(self) -> Path | None:
        """Waits for the maker (from any thread: a replay may run beside the next round's)."""
        thread = self._thread
        if thread is not None:
            thread.join()
        return self._result

    def _make(self) -> None:
        try:
            key = engine_key(self.build_dir, self.recipe)
            if key is None:
                return
            if self.cache is None:
                self._result = self._run_maker(self.work / "engine")
                return
            folder = Path(self.cache) / build_cache.ENGINES_DIR / key
            library = folder / Path(WASM_ENGINE).name
            folder.parent.mkdir(parents=True, exist_ok=True)
            with build_cache.build_lock(folder):  # parallel workers grading the same module make it once
                if not library.is_file():
                    made = self._run_maker(self.work / "engine")
                    if made is None:
                        return
                    folder.mkdir(exist_ok=True)
                    tmp = folder / f".{library.name}.{os.getpid()}.tmp"
                    shutil.copyfile(made / library.name, tmp)
                    os.replace(tmp, library)
                os.utime(folder)
            self._result = folder
        except Exception:  # noqa: BLE001 -- the replay makes the engine itself then, as it did before
            self._result = None

    def _run_maker(self, into: Path) -> Path | None:
        """`bang_harness make-engine` in a sandbox of its own; the folder holding its engine, None if it failed."""
        io, empty = self.work / "io-engine", self.work / "engine-submission"
        for folder in (io, empty):
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True)
        outcome = self.runner.run(Phase.RUN, self.backend.impl.engine_argv(),
                                  Mounts(submission=empty, build=self.build_dir, io=io),
                                  Limits(wall_seconds=MAKER_SECONDS), env=dict(self.backend.env))
        if not outcome.ok:
            return None
        try:
            data = read_bytes_capped(io / WASM_ENGINE, ENGINE_MAX_BYTES, root=io)
        except (UntrustedFileError, OSError):
            return None
        into.mkdir(parents=True, exist_ok=True)
        (into / Path(WASM_ENGINE).name).write_bytes(data)
        self.made = True
        with contextlib.suppress(OSError):
            shutil.rmtree(io)
        return into


def stage_engine(engine: Path | None, io: Path) -> None:
    """The kept engine into a replay's /io (before the replay starts; host-owned, read-only to the sandbox)."""
    if engine is None:
        return
    target = io / WASM_ENGINE
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(engine / target.name, target)
    os.chmod(target, 0o444)
