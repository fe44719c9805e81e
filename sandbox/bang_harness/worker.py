"""The process that actually calls student code: loads the extension and module, then runs calls in order.

Started by the supervisor (run.py) with the index of the first call to run. It reports each call's start and
end on a control pipe, and writes each call's result before starting the next, so that when student code kills
the process the supervisor knows which call did it and nothing already finished is lost.

On the emulator backend the worker loads the emulator runtime first (before the device shim, the student's
extension or module): its constructor takes the trace key from BANG_EMU_KEY_FD and fixes the device profile.
Each call is opened with bang_emu_begin_call (the runtime signs that call's trace lines) and the checked
output is sealed with bang_emu_seal_output, so the host can tell which bytes kernels wrote (DESIGN.md,
"Threat model").
"""

from __future__ import annotations

import ctypes
import importlib
import os
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import torch
import torch.utils.deterministic

from .backends import get_harness_backend
from .control import FRESH_WORKER_EXIT, ControlChannel
from .device import DeviceSession, TraceWindow
from .job import Call, CallResult, Job, output_path, trace_path, write_result
from .paths import HarnessPaths
from .protocol import JOURNAL_SUFFIX, KEY_FD_ENV, ErrorKind

JOURNAL_MARK_INPUT = 2  # bang_emu_journal_mark: what = input (runtime/journal.h)
EMULATOR_MARK = "bang-emu"  # prefix of every emulator error message (DESIGN.md, "Emulator contracts")
HARNESS_DIR = str(Path(__file__).resolve().parent)


class EmulatorRuntime:
    """The emulator runtime's C entry points for the call protocol (DESIGN.md "Record fields and host rules")."""

    def __init__(self, library: ctypes.CDLL) -> None:
        self.library = library
        self._begin = getattr(library, "bang_emu_begin_call", None)
        self._seal = getattr(library, "bang_emu_seal_output", None)
        if self._begin is not None:
            self._begin.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
            self._begin.restype = ctypes.c_int
        if self._seal is not None:
            self._seal.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
            self._seal.restype = ctypes.c_int
        self._journal_open = getattr(library, "bang_emu_journal_open", None)
        self._journal_mark = getattr(library, "bang_emu_journal_mark", None)
        if self._journal_open is not None and self._journal_mark is not None:
            self._journal_open.argtypes = [ctypes.c_char_p]
            self._journal_open.restype = ctypes.c_int
            self._journal_mark.argtypes = [ctypes.c_int, ctypes.c_uint, ctypes.c_void_p, ctypes.c_size_t,
                                           ctypes.c_char_p]
            self._journal_mark.restype = ctypes.c_int

    def open_journal(self, path: Path) -> None:
        """From here on the runtime journals what this process does to the device, for the host's replay."""
        if self._journal_open is not None and self._journal_open(str(path).encode()) != 0:
            raise RuntimeError(f"cannot open the device journal {path}")

    def mark_input(self, index: int, tensor: torch.Tensor) -> None:
        """Input `index` of the call now lives in this tensor's device storage (the replay puts its own there)."""
        if self._journal_mark is not None:
            self._journal_mark(JOURNAL_MARK_INPUT, index, ctypes.c_void_p(tensor.data_ptr()),
                               tensor.numel() * tensor.element_size(), None)

    @property
    def signs(self) -> bool:
        return self._begin is not None

    def begin_call(self, call_id: str, trace: Path) -> None:
        if self._begin is None:  # a runtime without the protocol: unsigned trace (the host flags it)
            os.environ["BANG_EMU_TRACE"] = str(trace)
            return
        status = self._begin(call_id.encode(), str(trace).encode())
        if status != 0:
            raise RuntimeError(f"bang_emu_begin_call({call_id!r}) failed with status {status}")

    def seal_output(self, tensor: torch.Tensor) -> None:
        if self._seal is None:
            return
        storage = tensor.detach()
        if not storage.is_contiguous():
            storage = storage.contiguous()  # a device-side copy: the kernel-written marks travel with it
        # A failed seal writes no output record; the host reports that, nothing to do here.
        self._seal(ctypes.c_void_p(storage.data_ptr()), storage.numel() * storage.element_size())


def load_emulator_runtime() -> EmulatorRuntime:
    """Load libbang_emu.so globally before anything links against it, so its constructor runs now: it reads
    the key from BANG_EMU_KEY_FD (and closes it) and reads BANG_EMU_DEVICE once."""
    from bang_emu import toolchain

    library = ctypes.CDLL(str(toolchain.runtime_dir() / toolchain.LIB_NAME), mode=ctypes.RTLD_GLOBAL)
    runtime = EmulatorRuntime(library)
    fd = os.environ.pop(KEY_FD_ENV, None)  # os.environ is Python's copy; pop also unsets it in C
    if fd is not None and not runtime.signs:
        # A runtime without key intake left the pipe open: close it before student code can read it.
        try:
            os.close(int(fd))
        except (OSError, ValueError):
            pass
    return runtime


def enable_poisoning() -> None:
    """torch.empty and friends come back NaN-filled (ints: max value), so unwritten outputs show."""
    # The flag fill_uninitialized_memory depends on, set directly: torch.use_deterministic_algorithms also sets
    # an inductor option and so imports torch._dynamo, about a CPU-second in every worker of every round.
    set_flag = getattr(torch._C, "_set_deterministic_algorithms", None)
    if set_flag is not None:
        set_flag(True, warn_only=True)
    else:
        torch.use_deterministic_algorithms(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = True
    os.environ.setdefault("BANG_EMU_POISON", "nan")


def load_submission(paths: HarnessPaths, job: Job) -> ModuleType:
    library = paths.extension_library(job.extension)
    if not library.exists():
        raise FileNotFoundError(f"the extension {library} was not built")
    # Registers TORCH_LIBRARY ops; harmless for a PYBIND11-only library, which the import below initialises.
    torch.ops.load_library(str(library))
    # The submission is copied so its import never writes into the read-only mount (or the host's folder).
    copy = Path(tempfile.mkdtemp(prefix="submission-")) / "submission"
    shutil.copytree(paths.submission, copy, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    sys.dont_write_bytecode = True
    sys.path[:0] = [str(paths.extension_dir), str(copy)]
    return importlib.import_module(job.module)


def describe_exception(exc: BaseException) -> str:
    """The traceback from the student's side: the harness's own frames say nothing to a student."""
    summary = traceback.TracebackException.from_exception(exc)
    summary.stack = traceback.StackSummary.from_list(
        [frame for frame in summary.stack if not frame.filename.startswith(HARNESS_DIR)][-10:])
    return "".join(summary.format()).strip()


def classify_failure(exc: BaseException, window: TraceWindow) -> CallResult:
    emulator_errors = window.errors()
    text = f"{type(exc).__name__}: {exc}"
    if emulator_errors or EMULATOR_MARK in str(exc):
        return CallResult.failure(ErrorKind.EMULATOR_ERROR, "\n".join(emulator_errors) or text)
    return CallResult.failure(ErrorKind.PYTHON_EXCEPTION, describe_exception(exc))


def output_array(value: Any) -> np.ndarray:
    """The entry's result as numpy; only a plain tensor counts (a subclass could fake its own values)."""
    if type(value) is not torch.Tensor:
        raise TypeError(f"the entry returned {type(value).__module__}.{type(value).__qualname__}, "
                        "expected a torch.Tensor")
    cpu = value.detach().to("cpu")
    try:
        return cpu.contiguous().numpy()
    except TypeError as exc:  # e.g. bfloat16 has no numpy dtype
        raise TypeError(f"output dtype {value.dtype} cannot be saved: {exc}") from exc


def resolve_entry(module: ModuleType, entry: str) -> Any:
    """The entry named by a dotted attribute path from the module: 'sigmoid', 'mlu_functions.sigmoid', or
    'ops.<namespace>.<op>' from the module torch (grader/project_layouts.py picks these for the lab layouts)."""
    target: Any = module
    for part in entry.split("."):
        try:
            target = getattr(target, part)
        except Exception:  # noqa: BLE001 -- torch.ops raises RuntimeError for an unknown op, not AttributeError
            return None
    return target


class CallRunner:
    def __init__(self, paths: HarnessPaths, session: DeviceSession, module: ModuleType,
                 runtime: EmulatorRuntime | None = None) -> None:
        self.paths = paths
        self.session = session
        self.module = module
        self.runtime = runtime

    def run(self, call: Call) -> CallResult:
        outputs = self.paths.outputs
        trace = trace_path(outputs, call.id)
        try:
            inputs = [torch.from_numpy(np.load(self.paths.io / "inputs" / name, allow_pickle=False))
                      for name in call.inputs]
        except (OSError, ValueError) as exc:
            return CallResult.failure(ErrorKind.HARNESS_ERROR, f"cannot load the call's inputs: {exc}")
        entry = resolve_entry(self.module, call.entry)
        if not callable(entry):
            return CallResult.failure(ErrorKind.PYTHON_EXCEPTION,
                                      f"{self.module.__name__} has no function {call.entry!r}")

        previous: list[torch.Tensor] = []

        def invoke() -> tuple[Any, float, float | None, TraceWindow]:
            nonlocal previous
            args = [self.session.to_device(t) for t in inputs]
            if self.runtime is not None:
                for index, arg in enumerate(args):
                    self.runtime.mark_input(index, arg)
            started = time.perf_counter_ns()
            value, device_us, window = self.session.timed(lambda: entry(*args), trace)
            wall_us = (time.perf_counter_ns() - started) / 1000.0
            # The last call's inputs stay alive, so the allocator cannot hand out the same addresses again
            # and a result cache keyed on data_ptr() misses.
            previous = args
            return value, wall_us, device_us, window

        os.environ["BANG_EMU_POISON"] = call.poison
        if self.runtime is not None:
            try:
                self.runtime.begin_call(call.id, trace)
            except RuntimeError as exc:
                return CallResult.failure(ErrorKind.HARNESS_ERROR, str(exc))
        try:
            return self._checked_then_timed(call, invoke, trace)
        finally:
            os.environ.pop("BANG_EMU_TRACE", None)

    def _checked_then_timed(self, call: Call, invoke: Any, trace: Path) -> CallResult:
        try:
            value, wall_us, device_us, window = invoke()
        except Exception as exc:  # noqa: BLE001 -- anything the student raises is recorded, not fatal
            failure = classify_failure(exc, TraceWindow.read(trace, 0))
            failure.trace = trace.name if trace.exists() else None
            return failure
        trace_name = trace.name if trace.exists() else None
        if window.errors():
            return CallResult.failure(ErrorKind.EMULATOR_ERROR, "\n".join(window.errors()), trace=trace_name)
        try:
            if self.runtime is not None and type(value) is torch.Tensor:
                self.runtime.seal_output(value)  # before any host-side copy: the record digests the device bytes
            checked = output_array(value)
        except (TypeError, RuntimeError) as exc:
            return CallResult.failure(ErrorKind.BAD_OUTPUT, str(exc), trace=trace_name)
        np.save(output_path(self.paths.outputs, call.id), checked, allow_pickle=False)

        result = CallResult(ok=True, trace=trace_name)
        # Without warm-up the checked invocation is a sample like any other (fresh inputs, synchronised):
        # on the emulator, where a big kernel takes seconds to emulate, that halves a timed call's cost.
        samples = [(wall_us, device_us)] if call.warmup == 0 and call.timed_repeats > 0 else []
        repeats = call.warmup + call.timed_repeats - len(samples)
        consistent = True
        for repeat in range(repeats):
            try:
                value, wall_us, device_us, window = invoke()
                if window.errors():
                    raise RuntimeError(f"{EMULATOR_MARK}: " + "\n".join(window.errors()))
                consistent = consistent and np.array_equal(output_array(value), checked, equal_nan=True)
            except Exception as exc:  # noqa: BLE001
                failure = classify_failure(exc, window)
                failure.error = f"repeat {repeat + 1} after the checked call: {failure.error}"
                failure.trace = trace_name
                return failure
            if repeat >= call.warmup:
                samples.append((wall_us, device_us))
        result.wall_us = [round(w, 3) for w, _ in samples]
        result.device_us = [round(d, 3) for _, d in samples if d is not None]
        result.repeats_consistent = consistent if repeats else None
        return result


def run_worker(paths: HarnessPaths, first_call: int, control_fd: int | None, job: Job | None = None) -> int:
    """Runs the job's calls from `first_call` on; `job` is given when forked from the fork server (the keeper
    verified it), else read from /io/job.json."""
    job = job or Job.load(paths.io / "job.json")
    control = ControlChannel(control_fd)
    calls = job.calls[first_call:]
    paths.outputs.mkdir(parents=True, exist_ok=True)
    enable_poisoning()
    runtime = None
    try:
        backend = get_harness_backend(job.backend)
        if backend.loads_emulator_runtime:
            runtime = load_emulator_runtime()  # first: before the shim, the extension and the student's module
        # The timing driver binds here too, before any student code: stage time never comes from torch.mlu.Event.
        session = DeviceSession(job.backend, job.device, runtime.library if runtime is not None else None)
    except Exception as exc:  # noqa: BLE001
        return _fail_all(paths, calls, control, CallResult.failure(
            ErrorKind.HARNESS_ERROR, f"cannot activate the {job.backend} device: {describe_exception(exc)}",
            during="load"))
    for note in session.notes:
        print(f"bang_harness: {note}", file=sys.stderr)
    control.send("loading")
    try:
        if runtime is not None:  # before any student code: everything it does to the device is journaled
            runtime.open_journal(paths.outputs / f"{calls[0].id}{JOURNAL_SUFFIX}")
    except RuntimeError as exc:
        return _fail_all(paths, calls, control, CallResult.failure(ErrorKind.HARNESS_ERROR, str(exc), during="load"))
    try:
        module = load_submission(paths, job)
    except Exception as exc:  # noqa: BLE001 -- the student's import failing fails every call, with the reason
        return _fail_all(paths, calls, control, CallResult.failure(
            ErrorKind.LOAD_FAILURE, f"cannot import the submission: {describe_exception(exc)}", during="load"))
    runner = CallRunner(paths, session, module, runtime)
    for call in calls:
        control.send("start", call.id)
        result = runner.run(call)
        write_result(paths.outputs, call.id, result)
        control.send("done", call.id)
        if backend.leaves_device_faulted(result) and call is not calls[-1]:
            return FRESH_WORKER_EXIT
    return 0


def _fail_all(paths: HarnessPaths, calls: list[Call], control: ControlChannel, result: CallResult) -> int:
    for call in calls:
        write_result(paths.outputs, call.id, result)
        control.send("done", call.id)
    return 0
