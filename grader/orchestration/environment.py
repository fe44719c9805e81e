"""Where grading runs: the backend (emu or mlu) and the sandbox runner, resolved from GradeOptions.

The backends (grader.backends) and runners (grader.sandbox) are their own modules; this adapter is the one
place the pipeline touches them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from grader.backends import get_backend
from grader.backends.base import Backend as BackendImpl
from grader.orchestration.options import GradeOptions
from grader.sandbox.base import Phase, Runner
from grader.sandbox.select import SandboxRefused, select_runner


class UnavailableError(Exception):
    """The requested backend, device or sandbox is not available here (the message says how to fix it)."""


@dataclass
class Backend:
    name: Literal["emu", "mlu"]
    device: str
    impl: BackendImpl

    @property
    def time_source(self) -> Literal["modelled", "hardware"]:
        return self.impl.timing_source

    @property
    def has_trace(self) -> bool:
        # Structural requirements and "no kernel launched" are judged from the emulator's launch trace.
        return self.name == "emu"

    @property
    def env(self) -> dict[str, str]:
        return self.impl.run_env(self.device)

    def argv(self, phase: Phase) -> list[str]:
        return self.impl.harness_argv(phase)

    def toolchain(self) -> str:
        return self.impl.toolchain_version()


def resolve_backend(options: GradeOptions) -> Backend:
    try:
        impl = get_backend(options.backend)
        ok, why = impl.available()
        if not ok:
            raise UnavailableError(f"backend {options.backend!r} is not available here: {why} (see `grade doctor`)")
        device = impl.resolve_device(options.device)
    except ValueError as exc:
        raise UnavailableError(str(exc)) from exc
    return Backend(name=options.backend, device=device, impl=impl)


def resolve_runner(options: GradeOptions, backend: Backend) -> Runner:
    card = int(backend.device) if backend.name == "mlu" and backend.device.isdigit() else None
    try:
        return select_runner(options.sandbox, batch=options.batch, backend=backend.name, mlu_card=card)
    except SandboxRefused as exc:
        raise UnavailableError(str(exc)) from exc
