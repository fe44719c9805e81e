"""What differs between the emulator and a real MLU, seen from the host: one Backend strategy per toolchain."""

from __future__ import annotations

import os
import subprocess
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, ClassVar

from grader.results import TimingSource
from grader.sandbox.base import Phase

Log = Callable[[str], None]

__all__ = ["Backend", "TimingSource", "first_output_line"]


class Backend(ABC):
    """One backend, whole: its harness side (harness_argv, sandbox/bang_harness/backends/<name>.py), its sandbox
    image (image_tag, ensure_image, ready_image: the tag is in every build's cache key), its devices and its
    `grade doctor` lines. It is a grader.sandbox.base.SandboxTarget: the sandbox asks it, never names it."""

    name: str  # the module name under grader/backends and bang_harness/backends, and --backend
    timing_source: TimingSource
    default_device: str
    # The runtime writes a signed launch trace: "no kernel launched", structural requirements and the
    # integrity checks are judged from it.
    kernel_trace: bool
    # The grader's timing driver writes one record per invocation (notifier time, CNPAPI's kernels): kernel
    # use and device time are judged from it on the host (grader.checks.kernel_use).
    kernel_windows: bool = False
    # Each stage's timed call: warm-up invocations, then timed ones.
    warmup: int
    timed_repeats: int
    # Times vary from run to run: more rounds of fresh inputs until the spread settles (scoring.timing).
    retimes: bool
    # The sandbox must pass a card's device nodes in (device_nodes): only the docker sandbox can.
    passes_device: bool = False
    # A device is a profile of the device table, so its type is its name and its speed thresholds are calibrated
    # per profile; otherwise a device is a card, whose type is read from the card and whose thresholds are its own.
    devices_are_profiles: bool = False
    # Kubernetes (grader.sandbox.pod_runner, grader.batch.distributed): the RuntimeClass of this backend's pods
    # (None: the cluster's default runtime) and the extended resources a phase pod requests.
    pod_runtime_class: str | None = None
    pod_resources: ClassVar[Mapping[str, str]] = MappingProxyType({})

    @abstractmethod
    def available(self) -> tuple[bool, str]:
        """Whether grading on this backend can work here, and if not, why (one sentence for `grade doctor`)."""

    @abstractmethod
    def devices(self) -> list[str]:
        """Device names `--device` accepts: emulated profiles, or card indices."""

    @abstractmethod
    def run_env(self, device: str | None) -> dict[str, str]:
        """Environment the run phase needs to target `device` (None: the default device)."""

    @abstractmethod
    def toolchain_version(self) -> str:
        """Toolchain name and version for the report's reproducibility section."""

    @abstractmethod
    def image_tag(self) -> str:
        """The tag this backend's sandbox image has for the current sources (cheap: hashes, builds nothing). It
        is part of every build's cache key, image sandbox or not (without one the harness runs these sources)."""

    @abstractmethod
    def ensure_image(self, rebuild: bool = False, log: Log | None = None) -> str:
        """Builds what is missing of this backend's image (`grade images build --backend NAME`); its tag."""

    def ready_image(self, client: Any) -> str | None:
        """The image's tag when it is on this Docker daemon (or was made so in seconds), else None."""
        from grader.sandbox.images import image_exists

        tag = self.image_tag()
        return tag if image_exists(client, tag) else None

    def image_fix(self) -> str:
        """The command that builds this backend's image (the sandbox says it when the image is missing)."""
        return f"grade images build --backend {self.name}"

    def unavailable_fix(self) -> str:
        """What makes this backend available on a machine where available() says no (`grade doctor`)."""
        return ""

    @property
    def time_is_modelled(self) -> bool:
        """Times are the cost model's, not a device clock's (results, labels, the class dashboard)."""
        return self.timing_source == "modelled"

    def device_nodes(self, device: str | None) -> list[str]:
        """Host device nodes the sandbox must pass in to reach `device` (none for an emulated one)."""
        return []

    def batch_devices(self, workers: int | None, device: str | None) -> list[str | None]:
        """The device of each `grade batch` worker slot: `workers` slots sharing `device` (default: one more
        than the cores: a grading waits on its sandbox part of the time, and on 2 cores three workers grade a
        warm class ~25% faster than two and a cold one ~10%). Raises ValueError when none can run."""
        return [device] * (workers or (os.cpu_count() or 1) + 1)

    def result_key_device(self, device: str | None) -> str:
        """The device part of a batch result's key: a result graded on another device is not reused."""
        return device or ""

    def resolve_device(self, device: str | None) -> str:
        chosen = device or self.default_device
        known = self.devices()
        if known and chosen not in known:
            raise ValueError(f"unknown {self.name} device {chosen!r}; expected one of {', '.join(known)}")
        return chosen

    def timing_label(self, device: str | None) -> str:
        """How every figure from this backend is labelled, e.g. "modelled (mlu370-x8)"."""
        return f"{self.timing_source} ({device or self.default_device})"

    def harness_argv(self, phase: Phase) -> list[str]:
        """The in-sandbox command for a phase (runners map `python3` to their interpreter)."""
        if phase is Phase.BUILD:
            return ["python3", "-m", "bang_harness", "build", "--backend", self.name]
        return ["python3", "-m", "bang_harness", "run"]

    def replay_argv(self) -> list[str]:
        """The trusted replay's command (a run-phase sandbox of its own; orchestration/replay.py)."""
        return ["python3", "-m", "bang_harness", "replay"]

    def engine_argv(self) -> list[str]:
        """The command that makes a build's WebAssembly engine, alone in a sandbox (orchestration/wasm_engine.py)."""
        return ["python3", "-m", "bang_harness", "make-engine"]


def first_output_line(command: list[str], timeout: float = 20.0) -> str | None:
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = (proc.stdout or proc.stderr).strip().splitlines()
    return lines[0].strip() if proc.returncode == 0 and lines else None
