"""MLU backend: whether a call ran a kernel of the student's extension, and its device time, judged on the host
from the records of the grader's timing driver (bang_harness.mlu_driver; DESIGN.md "Threat model").

The driver shares the student's process, so its records are claims: the file is read capped (protocol's
TRACE_MAX_* caps), each line parsed by the protocol's own KernelWindow (finite numbers, bounded names and
counts) and checked in order against the invocations the host planned. A call uses a kernel when CNPAPI
reported, during every invocation, at least one kernel whose name is a function of the extension the host
built (its symbols, read on the host by integrity.KernelSymbols, mangled or not). Device time of a timed
invocation: the notifier window, or the span of CNPAPI's kernels where that is longer (a kernel the bracket
missed still counts); never a Python clock.

Time conservation (the MLU's stand-in for the emulator's work conservation, which needs signed launch records):
in every invocation the extension's own kernels must have been busy at least as long as the call's work takes
at the roofline floor (grader.scoring.roofline, the one device table), less a tolerance for the clock. A decoy --
one trivial kernel of the extension beside cnnl/torch_mlu kernels that do the work -- fails it, and so does a
time below the floor with no other kernel (altered records or clock, or an invocation that skipped the work).
Physics gives a lower bound only: a kernel that spins as long as the floor passes this rule.

Without CNPAPI in the sandbox (or without the extension's symbols on the host) kernel use cannot be verified.
That is never a silent pass: the grading carries a note, and the assignment's `[integrity]
unverified_kernel_use` decides: `review` (default: the points stand, the grading is flagged for an instructor,
since the gap is the machine's, not the student's) or `zero_stages` (each stage's timed call fails, so its
performance points are withheld; correctness points stand).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from bang_emu import devices
from bang_harness.protocol import TRACE_MAX_BYTES, KernelRecord, KernelWindow, trace_lines

from grader.checks.integrity import KernelSymbols
from grader.i18n import _
from grader.sandbox.capped import UntrustedFileError, open_capped
from grader.scoring.roofline import floor_us
from grader.spec.references import Work

UnverifiedAction = Literal["zero_stages", "review"]
SHOWN_KERNELS = 5
SHOWN_NAME_CHARS = 80
KEPT_NAMES = 64  # distinct kernel names summarised per call; the rest are counted under "..."
# Time conservation. The floor already takes, figure by figure, the higher of the published and the modelled peak
# at the top clock; 0.9 more covers peaks rounded in the published figures and a clock boosted past them. 5 µs
# covers the timestamps: CNPAPI's start/end (ns fields, µs-grained device counter assumed) can each be a tick off,
# on a few merged intervals. Below 10 µs the floor is a few ticks of launch jitter and is not judged.
FLOOR_TOLERANCE = 0.9
CLOCK_SLACK_US = 5.0
MIN_JUDGED_FLOOR_US = 10.0


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


@dataclass(frozen=True)
class WorkFloor:
    """The least device time one invocation of the call can take (the roofline floor of its work)."""

    us: float
    shapes: str  # the case as the student knows it: "a 16384x256, b 256x128 (float32)"
    device: str  # the card the floor holds on, as shown

    @property
    def bound_us(self) -> float:
        """Own busy time below this is judged impossible."""
        return FLOOR_TOLERANCE * self.us - CLOCK_SLACK_US


def work_floor(work: Work, dtype: str, device: str, shapes: Mapping[str, Sequence[int]]) -> WorkFloor | None:
    """The floor on `device` when the device table has it; otherwise (an MLU card index: the host does not know the
    card's model) the lowest floor over the table's cards, so that no card of the table is judged unfairly."""
    if device in devices.names():
        floor, where = floor_us(work, dtype, device), device
    else:
        floors = {name: f for name in devices.names() if (f := floor_us(work, dtype, name)) is not None}
        if not floors:
            return None
        fastest = min(floors, key=floors.__getitem__)
        floor = floors[fastest]
        where = _("{device}, the fastest card of the device table for this work (the host does not know this "
                  "card's model)").format(device=fastest)
    if floor is None:
        return None
    text = ", ".join(f"{name} {'x'.join(str(d) for d in shape)}" for name, shape in shapes.items())
    return WorkFloor(floor, f"{text} ({dtype})", where)


def read_kernel_use(path: Path, root: Path | None, *, invocations: int, timed: int, symbols: KernelSymbols | None,
                    during: str, action: UnverifiedAction = "review", stage_call: bool = False,
                    floor: WorkFloor | None = None) -> KernelUse:
    """Reads and judges the windows of one call that returned an output.

    `invocations`: how many the harness made (the host's plan); the last `timed` are the timed ones.
    `during`: the call as the student knows it, e.g. "sigmoid(x)". `stage_call`: the call times a stage.
    `floor`: the call's work at the roofline (work_floor); None: time conservation is not judged."""
    use = KernelUse()
    windows = _read_windows(path, root, invocations, use)
    if use.findings or not windows and not invocations:
        return use
    if len(windows) != invocations:
        use.findings.append(_("the timing driver recorded {recorded} invocation(s) of {during}, the harness made "
                              "{made}").format(recorded=len(windows), during=during, made=invocations))
        return use
    if len({w.kernels is None for w in windows}) > 1:
        use.findings.append(_("CNPAPI was available for some invocations of {during} and not for others").format(
            during=during))
        return use
    use.cnpapi = windows[0].kernels is not None
    use.kernels = _summary(windows)
    use.device_us = [_device_us(w) for w in windows[invocations - timed:]] if timed else []
    if not use.cnpapi:
        use.unverified = _("kernel use could not be verified on this host: CNPAPI (libcnpapi) was not available in "
                           "the sandbox, so no call was checked for a kernel of your extension")
    elif symbols is None:
        use.unverified = _("kernel use could not be fully verified on this host: the built extension's symbols "
                           "could not be read (nm), so any kernel CNPAPI saw was accepted")
    if use.unverified is not None:
        use.unverified += (_("; the stage points are withheld") if action == "zero_stages"
                           else _("; flagged for review, points unchanged"))
    if use.cnpapi:
        use.missing = _first_without_kernel(windows, symbols, during)
    if use.cnpapi and use.missing is None and floor is not None:
        finding = _time_not_conserved(windows, symbols, floor, during)
        if finding is not None:
            use.findings.append(finding)
            use.device_us = []  # nothing of a call that does not add up is timed
    if use.missing is None and use.unverified is not None and action == "zero_stages" and stage_call:
        use.missing = use.unverified
    return use


def _read_windows(path: Path, root: Path | None, invocations: int, use: KernelUse) -> list[KernelWindow]:
    windows: list[KernelWindow] = []
    try:
        stream = open_capped(path, TRACE_MAX_BYTES, root)
    except UntrustedFileError as exc:
        use.findings.append(_("the grader's timing driver left no readable record of the call ({error})").format(
            error=exc))
        return windows
    with stream:
        try:
            for number, line, problem in trace_lines(stream):
                if problem is None and number > invocations:
                    problem = _("more records than the {made} invocation(s) the harness made").format(made=invocations)
                elif problem is None and line is not None:
                    try:
                        window = KernelWindow.from_line(line)
                    except ValueError as exc:
                        problem = str(exc)
                    else:
                        if window.invocation != len(windows):
                            problem = _("invocation {got}, expected {expected} (a record is missing or out of "
                                        "order)").format(got=window.invocation, expected=len(windows))
                        windows.append(window)
                if problem is not None:
                    use.findings.append(_("timing driver record {number}: {problem}").format(number=number, problem=problem))
                    break
        except UntrustedFileError as exc:
            use.findings.append(_("the timing driver's records cannot be read: {error}").format(error=exc))
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
        where = (_(" (invocation {i} of {n})").format(i=window.invocation + 1, n=len(windows))
                 if len(windows) > 1 else "")
        if not kernels:
            return _("CNPAPI saw no kernel at all during {during}{where}: the result was computed without "
                     "launching a kernel").format(during=during, where=where)
        return _("CNPAPI saw no kernel of your extension during {during}{where}; it saw: {kernels} -- none of "
                 "them is a function of the extension you built").format(during=during, where=where,
                                                                           kernels=_listing(kernels, window.dropped))
    return None


def _listing(kernels: Iterable[KernelRecord], dropped: int = 0, times: bool = False) -> str:
    """`cnnlMatMul (x2), k` -- the most frequent names first; with `times`, each name's summed device time."""
    seen: Counter[str] = Counter()
    busy: dict[str, float] = {}
    for kernel in kernels:
        name = kernel.name[:SHOWN_NAME_CHARS]
        seen[name] += 1
        busy[name] = busy.get(name, 0.0) + kernel.duration_us
    shown = []
    for name, n in seen.most_common(SHOWN_KERNELS):
        notes = ([f"x{n}"] if n > 1 else []) + ([f"{busy[name]:.1f} µs"] if times else [])
        shown.append(name + (f" ({', '.join(notes)})" if notes else ""))
    more = len(seen) - SHOWN_KERNELS + (1 if dropped else 0)
    return ", ".join(shown) + (" ..." if more > 0 else "")


def _busy_us(kernels: Iterable[KernelRecord]) -> float:
    """Time at least one of the kernels ran: the union of their [start, end] intervals (overlaps count once)."""
    total_ns, reach = 0, None
    for kernel in sorted(kernels, key=lambda k: k.start_ns):
        start = kernel.start_ns if reach is None else max(kernel.start_ns, reach)
        if kernel.end_ns > start:
            total_ns += kernel.end_ns - start
        reach = kernel.end_ns if reach is None else max(reach, kernel.end_ns)
    return total_ns / 1000.0


def _time_not_conserved(windows: list[KernelWindow], symbols: KernelSymbols | None, floor: WorkFloor,
                        during: str) -> str | None:
    """The first invocation whose own kernels were busy for less than the work takes at the roofline."""
    if floor.us < MIN_JUDGED_FLOOR_US:
        return None
    mine: dict[str, bool] = {}  # by name: the same few names recur in every invocation
    for window in windows:
        if window.dropped or not window.kernels:
            continue  # kernels beyond the listed ones may be the student's: their time is unknown, not judged
        own: list[KernelRecord] = []
        foreign: list[KernelRecord] = []
        for kernel in window.kernels:
            if kernel.name not in mine:
                mine[kernel.name] = symbols is None or symbols.has(kernel.name)
            (own if mine[kernel.name] else foreign).append(kernel)
        busy = _busy_us(own)
        if busy >= floor.bound_us:
            continue
        facts = {"busy": busy, "during": during, "i": window.invocation + 1, "n": len(windows), "shapes": floor.shapes,
                 "floor": floor.us, "device": floor.device, "bound": floor.bound_us}
        if foreign:
            return _("your kernels ran {busy:.1f} µs during {during} (invocation {i} of {n}); with {shapes} that work "
                     "cannot take less than {floor:.1f} µs on {device} (the roofline floor; judged below {bound:.1f} "
                     "µs); in the same invocation CNPAPI saw {kernels}: the work was done by kernels that are not "
                     "your extension's").format(**facts, kernels=_listing(foreign, times=True))
        return _("your kernels ran {busy:.1f} µs during {during} (invocation {i} of {n}); with {shapes} that work "
                 "cannot take less than {floor:.1f} µs on {device} (the roofline floor; judged below {bound:.1f} "
                 "µs), and no other kernel ran: that time is impossible (the device's records or clock were "
                 "altered, or your kernels skipped the work in this invocation)").format(**facts)
    return None
