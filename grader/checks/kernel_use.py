"""MLU backend: whether a call ran a kernel of the student's extension, and its device time, judged on the host
from the records of the grader's timing driver (bang_harness.mlu_driver; DESIGN.md "Threat model").

The driver shares the student's process, so its records are claims: the file is read capped (protocol's
TRACE_MAX_* caps), each line parsed by the protocol's own KernelWindow (finite numbers, bounded names and
counts) and checked in order against the invocations the host planned. A call uses a kernel when CNPAPI
reported, during every invocation, at least one kernel whose name is a function of the extension the host
built (its symbols, read on the host by integrity.KernelSymbols, mangled or not). Device time of a timed
invocation: the notifier window, or the span of CNPAPI's kernels where that is longer (a kernel the bracket
missed still counts); never a Python clock.

Without CNPAPI in the sandbox (or without the extension's symbols on the host) kernel use cannot be verified.
That is never a silent pass: the grading carries a note, and the assignment's `[integrity]
unverified_kernel_use` decides: `review` (default: the points stand, the grading is flagged for an instructor,
since the gap is the machine's, not the student's) or `zero_stages` (each stage's timed call fails, so its
performance points are withheld; correctness points stand).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from bang_harness.protocol import TRACE_MAX_BYTES, KernelWindow, trace_lines

from grader.checks.integrity import KernelSymbols
from grader.sandbox.capped import UntrustedFileError, open_capped

UnverifiedAction = Literal["zero_stages", "review"]
SHOWN_KERNELS = 5
SHOWN_NAME_CHARS = 80
KEPT_NAMES = 64  # distinct kernel names summarised per call; the rest are counted under "..."


@dataclass
class KernelUse:
    """What the driver's records of one call show, as the host judged them."""

    windows: int = 0
    cnpapi: bool | None = None  # None: no record read
    findings: list[str] = field(default_factory=list)  # what did not add up: the call's integrity findings
    missing: str | None = None  # no kernel of the extension ran: the not_using_kernel message
    unverified: str | None = None  # why kernel use could not be verified here (a note for the grading)
    device_us: list[float] = field(default_factory=list)  # device time of each timed invocation
    # What CNPAPI reported over all the call's invocations: kernel name -> (launches, total device µs).
    kernels: dict[str, tuple[int, float]] = field(default_factory=dict)

    @property
    def kernel_count(self) -> int:
        return sum(n for n, _ in self.kernels.values())


def read_kernel_use(path: Path, root: Path | None, *, invocations: int, timed: int, symbols: KernelSymbols | None,
                    during: str, action: UnverifiedAction = "review", stage_call: bool = False) -> KernelUse:
    """Reads and judges the windows of one call that returned an output.

    `invocations`: how many the harness made (the host's plan); the last `timed` are the timed ones.
    `during`: the call as the student knows it, e.g. "sigmoid(x)". `stage_call`: the call times a stage."""
    use = KernelUse()
    windows = _read_windows(path, root, invocations, use)
    if use.findings or not windows and not invocations:
        return use
    if len(windows) != invocations:
        use.findings.append(f"the timing driver recorded {len(windows)} invocation(s) of {during}, the harness "
                            f"made {invocations}")
        return use
    if len({w.kernels is None for w in windows}) > 1:
        use.findings.append(f"CNPAPI was available for some invocations of {during} and not for others")
        return use
    use.cnpapi = windows[0].kernels is not None
    use.kernels = _summary(windows)
    use.device_us = [_device_us(w) for w in windows[invocations - timed:]] if timed else []
    if not use.cnpapi:
        use.unverified = ("kernel use could not be verified on this host: CNPAPI (libcnpapi) was not available in "
                          "the sandbox, so no call was checked for a kernel of your extension")
    elif symbols is None:
        use.unverified = ("kernel use could not be fully verified on this host: the built extension's symbols "
                          "could not be read (nm), so any kernel CNPAPI saw was accepted")
    if use.unverified is not None:
        use.unverified += ("; the stage points are withheld" if action == "zero_stages"
                           else "; flagged for review, points unchanged")
    if use.cnpapi:
        use.missing = _first_without_kernel(windows, symbols, during)
    if use.missing is None and use.unverified is not None and action == "zero_stages" and stage_call:
        use.missing = use.unverified
    return use


def _read_windows(path: Path, root: Path | None, invocations: int, use: KernelUse) -> list[KernelWindow]:
    windows: list[KernelWindow] = []
    try:
        stream = open_capped(path, TRACE_MAX_BYTES, root)
    except UntrustedFileError as exc:
        use.findings.append(f"the grader's timing driver left no readable record of the call ({exc})")
        return windows
    with stream:
        try:
            for number, line, problem in trace_lines(stream):
                if problem is None and number > invocations:
                    problem = f"more records than the {invocations} invocation(s) the harness made"
                elif problem is None and line is not None:
                    try:
                        window = KernelWindow.from_line(line)
                    except ValueError as exc:
                        problem = str(exc)
                    else:
                        if window.invocation != len(windows):
                            problem = (f"invocation {window.invocation}, expected {len(windows)} (a record is "
                                       "missing or out of order)")
                        windows.append(window)
                if problem is not None:
                    use.findings.append(f"timing driver record {number}: {problem}")
                    break
        except UntrustedFileError as exc:
            use.findings.append(f"the timing driver's records cannot be read: {exc}")
    use.windows = len(windows)
    return windows


def _summary(windows: list[KernelWindow]) -> dict[str, tuple[int, float]]:
    counts: Counter[str] = Counter()
    times: dict[str, float] = {}
    for window in windows:
        for kernel in window.kernels or ():
            name = kernel.name[:SHOWN_NAME_CHARS]
            if name not in counts and len(counts) >= KEPT_NAMES:
                name = "..."
            counts[name] += 1
            times[name] = times.get(name, 0.0) + kernel.duration_us
        if window.dropped:
            counts["..."] += window.dropped
            times.setdefault("...", 0.0)
    return {name: (n, times[name]) for name, n in counts.most_common()}


def _device_us(window: KernelWindow) -> float:
    if not window.kernels:
        return window.device_us
    span_ns = max(k.end_ns for k in window.kernels) - min(k.start_ns for k in window.kernels)
    return max(window.device_us, span_ns / 1000.0)


def _first_without_kernel(windows: list[KernelWindow], symbols: KernelSymbols | None, during: str) -> str | None:
    for window in windows:
        kernels = window.kernels or ()
        if any(symbols is None or symbols.has(k.name) for k in kernels):
            continue
        where = f" (invocation {window.invocation + 1} of {len(windows)})" if len(windows) > 1 else ""
        if not kernels:
            return (f"CNPAPI saw no kernel at all during {during}{where}: the result was computed without "
                    "launching a kernel")
        seen = Counter(k.name[:SHOWN_NAME_CHARS] for k in kernels)
        shown = ", ".join(name + (f" (x{n})" if n > 1 else "") for name, n in seen.most_common(SHOWN_KERNELS))
        more = len(seen) - SHOWN_KERNELS + (1 if window.dropped else 0)
        return (f"CNPAPI saw no kernel of your extension during {during}{where}; it saw: {shown}"
                + (" ..." if more > 0 else "") + " -- none of them is a function of the extension you built")
    return None
