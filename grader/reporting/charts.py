"""Geometry of the report's inline SVG charts; the templates only draw what these functions place.

Coordinates are in SVG user units of a fixed viewBox; the SVG scales to the page width, so a phone shows
the same chart smaller. Times spanning orders of magnitude (a scalar stage against its threshold) use a
log axis.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from grader.i18n import _
from grader.reporting.formatting import fmt_rate, fmt_time_us
from grader.results import CaseResult, DevicePeaks, StageResult, Timeline, TraceSummary
from grader.spec.references import REFERENCES, Work

# --- stage time against threshold and reference -------------------------------------------------------


@dataclass(frozen=True)
class Tick:
    x: float
    label: str


@dataclass(frozen=True)
class Marker:
    x: float
    us: float
    kind: str  # threshold (full marks) / reference (this stage's) / previous (the stage before's) / floor
    row: int  # label row: negative above the track (-1 nearest), positive below it (1 nearest)
    stage: int | None = None  # for `previous`: that stage's number


@dataclass(frozen=True)
class StageBarChart:
    width: int
    height: int
    track_y: float
    track_h: float
    x0: float
    x1: float
    bar_x: float  # end of the student's bar (None-free: charts are built only with a timing)
    whisker: tuple[float, float]
    you_us: float
    fast_enough: bool
    markers: list[Marker]
    ticks: list[Tick]
    log_scale: bool

    def label_y(self, m: Marker) -> float:
        """Baseline of a marker's label: one 16-unit row per marker, above the track or below the tick labels."""
        if m.row < 0:
            return self.track_y - 6 - 16 * (-m.row - 1) - 4
        return self.track_y + self.track_h + 20 + 16 * m.row + 2


def _positive(v: float | None) -> bool:
    return v is not None and math.isfinite(v) and v > 0


def _nice_ticks_linear(hi: float) -> list[float]:
    step = 10 ** math.floor(math.log10(hi / 4)) if hi > 0 else 1
    for mult in (1, 2, 2.5, 5, 10):
        if hi / (step * mult) <= 5:
            step *= mult
            break
    return [i * step for i in range(int(hi / step) + 1)]


# Where each marker's label goes: the targets above the track, the neighbours' times below the tick labels.
_ROWS = {"threshold": -1, "previous": -2, "reference": 1, "floor": 2}


def stage_bar_chart(stage: StageResult, previous: StageResult | None = None,
                    previous_number: int | None = None) -> StageBarChart | None:
    """Your time as a bar on one axis with the full-marks threshold, this stage's reference, the previous
    stage's reference (where the technique before this one gets) and the roofline floor (where no technique
    gets below): how far the next technique would take you."""
    if stage.timing is None or not _positive(stage.timing.median_us):
        return None
    you = stage.timing.median_us
    wanted = {
        "threshold": stage.threshold_us,
        "reference": stage.reference_us,
        "previous": previous.reference_us if previous is not None else None,
        "floor": stage.timing.floor_us,
    }
    wanted = {k: v for k, v in wanted.items() if _positive(v)}
    # the rows in use only, nearest the track first
    above = sorted((k for k in wanted if _ROWS[k] < 0), key=lambda k: -_ROWS[k])
    below = sorted((k for k in wanted if _ROWS[k] > 0), key=lambda k: _ROWS[k])
    row_of = {k: -(i + 1) for i, k in enumerate(above)} | {k: i + 1 for i, k in enumerate(below)}
    width, x0, x1 = 360, 8.0, 344.0
    track_y = 12.0 + 16 * max(len(above), 1)
    track_h = 18.0
    height = int(track_y + track_h + 26 + 16 * len(below) + 4)
    values = [v for v in (you, stage.timing.min_us, stage.timing.max_us, *wanted.values()) if _positive(v)]
    lo, hi = min(values), max(values)
    log_scale = hi / max(lo, 1e-12) > 20
    if log_scale:
        d_lo = 10 ** math.floor(math.log10(lo) - 0.05)
        d_hi = 10 ** math.ceil(math.log10(hi) + 0.05)

        def sx(v: float) -> float:
            return x0 + (math.log10(max(v, d_lo)) - math.log10(d_lo)) / (
                math.log10(d_hi) - math.log10(d_lo)
            ) * (x1 - x0)

        decades = range(round(math.log10(d_lo)), round(math.log10(d_hi)) + 1)
        tick_values = [10.0**d for d in decades]
        if len(tick_values) > 7:  # keep labels apart on a phone
            stride = math.ceil(len(tick_values) / 6)
            tick_values = tick_values[::stride]
    else:
        d_hi = hi * 1.15

        def sx(v: float) -> float:
            return x0 + v / d_hi * (x1 - x0)

        tick_values = [t for t in _nice_ticks_linear(d_hi) if t <= d_hi]
    markers = [
        Marker(sx(v), v, kind, row_of[kind], previous_number if kind == "previous" else None)
        for kind, v in wanted.items()
    ]
    fast = stage.threshold_us is None or you <= stage.threshold_us
    return StageBarChart(
        width=width,
        height=height,
        track_y=track_y,
        track_h=track_h,
        x0=x0,
        x1=x1,
        bar_x=sx(you),
        whisker=(
            sx(stage.timing.min_us if _positive(stage.timing.min_us) else you),
            sx(stage.timing.max_us if _positive(stage.timing.max_us) else you),
        ),
        you_us=you,
        fast_enough=fast,
        markers=markers,
        ticks=[Tick(sx(t), fmt_time_us(t) if t else "0") for t in tick_values],
        log_scale=log_scale,
    )


# --- roofline ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RooflinePoint:
    number: int
    title: str
    x: float
    y: float
    intensity: float  # FLOP per byte
    gflops: float
    gbps: float
    passed: bool
    of_roof: float  # achieved / attainable at this intensity


@dataclass(frozen=True)
class RoofLine:
    label: str  # the roof's figure; the template names it (GDRAM ..., tensor peak ...)
    points: str  # SVG polyline points
    label_x: float
    label_y: float
    kind: str  # memory / tensor / vector
    angle: float = 0.0  # degrees, so a label can follow its line


@dataclass(frozen=True)
class Roofline:
    width: int
    height: int
    plot: tuple[float, float, float, float]  # left, top, right, bottom
    roofs: list[RoofLine]
    points: list[RooflinePoint]
    x_ticks: list[Tick]
    y_ticks: list[tuple[float, str]]
    source: str
    notes: list[str] = field(default_factory=list)


_DTYPE_BYTES = {"float32": 4, "float": 4, "fp32": 4, "float16": 2, "half": 2, "fp16": 2, "bfloat16": 2}


@dataclass(frozen=True)
class Operator:
    """What the assignment computes, from its spec: its float64 reference (grader.spec.references) and its
    inputs' names in order (a perf shape is matched to them by position: lab programs name them their way)."""

    reference: str
    inputs: tuple[str, ...]


def stage_work(stage: StageResult, operator: Operator | None, dtype: str = "float32") -> Work | None:
    """The minimum work of one call on the stage's performance shape (no re-reads), as scoring computes it."""
    if operator is None or operator.reference not in REFERENCES or len(stage.perf_shape) != len(operator.inputs):
        return None
    shapes = {name: tuple(shape) for name, shape in zip(operator.inputs, stage.perf_shape.values(), strict=True)}
    try:
        return REFERENCES[operator.reference].work(shapes, _DTYPE_BYTES.get(dtype.lower(), 4))
    except (KeyError, ValueError, TypeError):  # a shape of the wrong rank for this operator
        return None


def stage_workload(stage: StageResult, operator: Operator | None, dtype: str = "float32") -> tuple[float, float] | None:
    """(flops, bytes) of one call on the stage's performance shape."""
    work = stage_work(stage, operator, dtype)
    return (float(work.flops), float(work.bytes_moved)) if work else None


def achieved_rates(stage: StageResult, cases: list[CaseResult], operator: Operator | None = None
                   ) -> tuple[float, float] | None:
    """(GFLOP/s, GB/s) achieved by a stage: the timing's own figures, else derived from the shape."""
    timing = stage.timing
    if timing is None or not _positive(timing.median_us):
        return None
    if _positive(timing.achieved_gflops) and _positive(timing.achieved_gbps):
        return timing.achieved_gflops, timing.achieved_gbps
    dtype = next((c.dtype for c in cases if c.entry == stage.entry), "float32")
    work = stage_workload(stage, operator, dtype)
    if work is None:
        return None
    flops, nbytes = work
    seconds = timing.median_us * 1e-6
    return flops / seconds / 1e9, nbytes / seconds / 1e9


def roofline(
    stages: list[StageResult], cases: list[CaseResult], peaks: DevicePeaks | None, operator: Operator | None = None
) -> Roofline | None:
    """Each timed stage as a point (arithmetic intensity, GFLOP/s) under the device's roofs: the roof of the unit
    the operator's work runs on (its reference says: matmul the tensor unit, sigmoid the vector unit), or both
    when the assignment's operator is not known."""
    placed = []
    for number, stage in enumerate(stages, start=1):
        rates = achieved_rates(stage, cases, operator)
        if rates and rates[0] > 0 and rates[1] > 0:
            placed.append((number, stage, rates[0], rates[1]))
    if not placed or peaks is None:
        return None
    width, height = 480, 310
    left, top, right, bottom = 60.0, 16.0, 468.0, 266.0
    intensities = [g / b for _, _, g, b in placed]
    units = {w.unit for _, stage, _, _ in placed if (w := stage_work(stage, operator))} or {"tensor", "vector"}
    uses_tensor, uses_vector = "tensor" in units, "vector" in units
    compute_roofs = [
        (value, name)
        for value, name, used in (
            (peaks.tensor_gflops, "tensor", uses_tensor),
            (peaks.vector_gflops, "vector", uses_vector),
        )
        if value and used
    ]
    compute_peaks = [value for value, _ in compute_roofs]
    ridges = [p / peaks.gdram_gbps for p in compute_peaks]
    # at least two decades either side so the slope and the flat roof both read as such
    x_lo = 10 ** math.floor(math.log10(min(intensities + ridges) / 5))
    x_hi = 10 ** math.ceil(math.log10(max(intensities + ridges) * 5))
    gflops_values = [g for _, _, g, _ in placed] + compute_peaks + [peaks.gdram_gbps * x_lo]
    y_lo = 10 ** math.floor(math.log10(min(gflops_values) / 2))
    y_hi = 10 ** math.ceil(math.log10(max(gflops_values) * 1.5))

    def sx(v: float) -> float:
        return left + (math.log10(v) - math.log10(x_lo)) / (math.log10(x_hi) - math.log10(x_lo)) * (
            right - left
        )

    def sy(v: float) -> float:
        return bottom - (math.log10(v) - math.log10(y_lo)) / (math.log10(y_hi) - math.log10(y_lo)) * (
            bottom - top
        )

    roofs = []
    top_peak = max(compute_peaks) if compute_peaks else None
    ridge = top_peak / peaks.gdram_gbps if top_peak else x_hi
    mem_end_x = min(ridge, x_hi)
    # the bandwidth roof starts where it enters the plot (it may start below y_lo)
    mem_start_x = max(x_lo, y_lo / peaks.gdram_gbps)
    roofs.append(
        RoofLine(
            label=f"{peaks.gdram_gbps:g} GB/s",
            points=f"{sx(mem_start_x):.1f},{sy(peaks.gdram_gbps * mem_start_x):.1f} "
            f"{sx(mem_end_x):.1f},{sy(peaks.gdram_gbps * mem_end_x):.1f}",
            label_x=sx(mem_start_x) + 6,
            label_y=sy(peaks.gdram_gbps * mem_start_x) - 8,
            kind="memory",
            angle=math.degrees(
                math.atan2(
                    sy(peaks.gdram_gbps * mem_start_x) - sy(peaks.gdram_gbps * mem_start_x * 10),
                    sx(mem_start_x * 10) - sx(mem_start_x),
                )
            ),
        )
    )
    for value, name in compute_roofs:
        start = value / peaks.gdram_gbps
        roofs.append(
            RoofLine(
                label=fmt_rate(value, "FLOP/s"),
                points=f"{sx(start):.1f},{sy(value):.1f} {sx(x_hi):.1f},{sy(value):.1f}",
                label_x=right - 4,
                label_y=sy(value) - 5,
                kind=name,
            )
        )
    points = [
        RooflinePoint(
            number=n,
            title=stage.title,
            x=sx(g / b),
            y=sy(g),
            intensity=g / b,
            gflops=g,
            gbps=b,
            passed=stage.correct
            and (
                stage.threshold_us is None
                or (stage.timing is not None and stage.timing.median_us <= stage.threshold_us)
            ),
            of_roof=g / _attainable(g / b, peaks.gdram_gbps, compute_peaks),
        )
        for n, stage, g, b in placed
    ]
    points = _spread_apart(points)
    x_ticks = [
        Tick(sx(10.0**e), _pow10(e)) for e in range(round(math.log10(x_lo)), round(math.log10(x_hi)) + 1)
    ]
    y_ticks = [(sy(10.0**e), _pow10(e)) for e in range(round(math.log10(y_lo)), round(math.log10(y_hi)) + 1)]
    if len(x_ticks) > 8:
        x_ticks = x_ticks[:: math.ceil(len(x_ticks) / 7)]
    if len(y_ticks) > 7:
        y_ticks = y_ticks[:: math.ceil(len(y_ticks) / 6)]
    return Roofline(
        width=width,
        height=height,
        plot=(left, top, right, bottom),
        roofs=roofs,
        points=points,
        x_ticks=x_ticks,
        y_ticks=y_ticks,
        source=peaks.source,
    )


def _attainable(intensity: float, gbps: float, compute_peaks: list[float]) -> float:
    return min([gbps * intensity, *compute_peaks])


def _spread_apart(points: list[RooflinePoint], radius: float = 19.0) -> list[RooflinePoint]:
    """Stages with the same shape share an intensity; nudge overlapping markers sideways so each number shows."""
    placed: list[RooflinePoint] = []
    for p in points:
        for shift in (0, 20, -20, 40, -40, 60, -60):
            if all(math.hypot(p.x + shift - q.x, p.y - q.y) >= radius for q in placed):
                break
        placed.append(replace(p, x=p.x + shift))
    return placed


def _pow10(e: int) -> str:
    if -2 <= e <= 4:
        value = 10.0**e
        return f"{value:g}"
    return f"1e{e}"


# --- trace panels ------------------------------------------------------------------------------------

SPLIT_ORDER = ("scalar", "vector", "tensor", "io", "wait", "torch_ops")


@dataclass(frozen=True)
class Segment:
    name: str
    us: float
    fraction: float
    x: float  # start, in percent of the bar
    w: float  # width, in percent


def time_split(trace: TraceSummary) -> list[Segment]:
    """The modelled time split as consecutive segments of a 100-unit bar, in a fixed component order."""
    names = [k for k in SPLIT_ORDER if k in trace.time_split_us] + sorted(
        k for k in trace.time_split_us if k not in SPLIT_ORDER
    )
    total = sum(max(trace.time_split_us[k], 0.0) for k in names)
    if total <= 0:
        return []
    segments, x = [], 0.0
    for name in names:
        us = max(trace.time_split_us[name], 0.0)
        w = us / total * 100
        segments.append(Segment(name, us, us / total, x, w))
        x += w
    return segments


@dataclass(frozen=True)
class MemoryUse:
    name: str
    peak: int
    capacity: int | None
    fraction: float | None


def memory_use(trace: TraceSummary) -> list[MemoryUse]:
    names = [
        n
        for n in ("nram", "wram", "sram")
        if n in trace.onchip_peak_bytes or n in trace.onchip_capacity_bytes
    ]
    out = []
    for name in names:
        peak = trace.onchip_peak_bytes.get(name, 0)
        cap = trace.onchip_capacity_bytes.get(name)
        out.append(MemoryUse(name, peak, cap, peak / cap if cap else None))
    return out


@dataclass(frozen=True)
class Transfer:
    direction: str
    nbytes: int
    fraction_of_max: float


def transfers(trace: TraceSummary) -> list[Transfer]:
    moved = {k: v for k, v in trace.bytes_moved.items() if v > 0}
    if not moved:
        return []
    biggest = max(moved.values())
    return [Transfer(k, v, v / biggest) for k, v in sorted(moved.items(), key=lambda kv: -kv[1])]


# --- per-core timeline (modelled, from the replay's trace) -----------------------------------------------

# Each core row has three tracks: DMA (IO and Move queues), compute (vector/tensor queue), scalar stream.
TIMELINE_TRACKS = ("dma", "compute", "issue")
_TRACK_OF_LANE = {"io": "dma", "move": "dma", "compute": "compute", "issue": "issue"}
TIMELINE_LEGEND = ("load", "store", "move", "vector", "tensor", "scalar", "wait")


def core_name(timeline: Timeline, core: int) -> str:
    """The core's name for people: "core 3" (BLOCK), "cluster 1 core 2" / "cluster 1 memory core" (UNIONn)."""
    cluster, index = timeline.core_label(core)
    if cluster is None:
        return _("core {n}").format(n=index)
    if index == 4:
        return _("cluster {cluster} memory core").format(cluster=cluster)
    return _("cluster {cluster} core {n}").format(cluster=cluster, n=index)


def core_range(timeline: Timeline, first: int, last: int) -> str:
    """A run of cores for a row label, short enough for it: "cores 1–15", "cluster 0 cores 2–3"."""
    (c1, k1), (c2, k2) = timeline.core_label(first), timeline.core_label(last)
    if c1 is None:
        return _("cores {first}–{last}").format(first=k1, last=k2)
    if c1 == c2 and k2 != 4:
        return _("cluster {cluster} cores {first}–{last}").format(cluster=c1, first=k1, last=k2)
    return _("{first} – {last}").format(first=core_name(timeline, first), last=core_name(timeline, last))


@dataclass(frozen=True)
class TimelineBox:
    x: float
    y: float
    w: float
    h: float
    kind: str  # load/store/move/vector/tensor/scalar/wait: the CSS class


@dataclass(frozen=True)
class TimelineRow:
    label: str
    y: float  # top of the row's first track
    idle: bool  # a row standing for one or more cores with no work
    same: str = ""  # the cores this row also stands for ("core 1 – core 15"), whose work is identical


@dataclass(frozen=True)
class TimelineChart:
    width: int
    height: int
    x0: float
    x1: float
    axis_y: float
    rows: list[TimelineRow]
    boxes: list[TimelineBox]
    ticks: list[Tick]
    busy_cores: int
    cores: int
    overlap: float  # share of the compute time during which the same core's DMA also ran
    merged_us: float  # the emulator merged same-kind neighbours closer than this (0: exact)
    kinds: list[str]  # the legend: the kinds drawn, in TIMELINE_LEGEND order


def _intervals_overlap(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> int:
    """Total length where a union of intervals `a` meets a union `b` (both sorted, non-overlapping)."""
    total, i, j = 0, 0, 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        total += max(0, hi - lo)
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def _union(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(intervals):
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def dma_compute_overlap(timeline: Timeline) -> float:
    """Share of the compute queue's busy time during which the same core's GDRAM DMA (loads, stores) also ran:
    0 for load-compute-store one after another, near 1 for a pipeline that hides its compute under its copies."""
    overlapped = computing = 0
    for core in {ev.core for ev in timeline.events}:
        compute = _union([(ev.start, ev.end) for ev in timeline.events if ev.core == core and ev.lane == "compute"])
        dma = _union([(ev.start, ev.end) for ev in timeline.events if ev.core == core and ev.lane == "io"])
        computing += sum(hi - lo for lo, hi in compute)
        overlapped += _intervals_overlap(compute, dma)
    return overlapped / computing if computing else 0.0


def _shown_cores(timeline: Timeline) -> list[int]:
    """BLOCK: every core of the card; UNIONn: every core of the clusters that did work."""
    if not timeline.union:
        return list(range(timeline.cores))
    clusters = sorted({ev.core // 5 for ev in timeline.events})
    return [c * 5 + k for c in clusters for k in range(5)]


def _box(span: list[float], y: float, h: float) -> TimelineBox:
    kind = TIMELINE_LEGEND[int(span[2])]
    if kind == "wait":  # waiting is the absence of work: a thin band, not a block
        return TimelineBox(span[0], y + h / 3, max(span[1] - span[0], 0.6), h / 3, kind)
    return TimelineBox(span[0], y, max(span[1] - span[0], 0.6), h, kind)


def timeline_chart(timeline: Timeline) -> TimelineChart | None:
    """Rows of cores, each with its DMA, compute and scalar tracks, on one modelled time axis; runs of idle
    cores fold into one row. Boxes closer than half a unit merge, so the SVG stays small whatever the kernel."""
    if not timeline.events or timeline.makespan_cycles <= 0:
        return None
    busy = {ev.core for ev in timeline.events}
    work: dict[int, list[tuple[str, str, int, int]]] = {}
    for ev in timeline.events:
        work.setdefault(ev.core, []).append((ev.lane, ev.kind, ev.start, ev.end))
    rows_of: list[tuple[str, list[int], bool]] = []  # label, cores, idle
    for core in _shown_cores(timeline):
        if core in busy:
            previous = rows_of[-1][1][0] if rows_of and not rows_of[-1][2] else None
            if previous is not None and sorted(work[previous]) == sorted(work[core]):
                rows_of[-1][1].append(core)  # the same work at the same times: drawn once
            else:
                rows_of.append((core_name(timeline, core), [core], False))
        elif rows_of and rows_of[-1][2]:
            rows_of[-1][1].append(core)
        else:
            rows_of.append(("", [core], True))
    width, x0, x1 = 760, 150.0 if timeline.union else 132.0, 748.0
    track_h, track_gap, row_gap = 6.0, 1.0, 6.0
    busy_h = len(TIMELINE_TRACKS) * track_h + (len(TIMELINE_TRACKS) - 1) * track_gap
    idle_h = 12.0
    span = timeline.makespan_cycles

    def sx(cycles: float) -> float:
        return x0 + cycles / span * (x1 - x0)

    rows: list[TimelineRow] = []
    boxes: list[TimelineBox] = []
    y = 6.0
    for label, cores, idle in rows_of:
        if idle:
            text = (_("{core}: idle").format(core=core_name(timeline, cores[0])) if len(cores) == 1
                    else _("{cores}: idle").format(cores=core_range(timeline, cores[0], cores[-1])))
            rows.append(TimelineRow(text, y, True))
            y += idle_h + row_gap
            continue
        same = "" if len(cores) == 1 else (core_name(timeline, cores[1]) if len(cores) == 2
                                           else core_range(timeline, cores[1], cores[-1]))
        rows.append(TimelineRow(label, y, False, same))
        for t, track in enumerate(TIMELINE_TRACKS):
            ty = y + t * (track_h + track_gap)
            mine = sorted((ev for ev in timeline.events if ev.core == cores[0] and _TRACK_OF_LANE[ev.lane] == track),
                          key=lambda ev: ev.start)
            last: list[float] | None = None  # x, end, kind index into the legend
            for ev in mine:
                kind = "wait" if ev.kind in ("sync", "barrier") else ev.kind
                bx, bend = sx(ev.start), sx(ev.end)
                if last is not None and TIMELINE_LEGEND[int(last[2])] == kind and bx - last[1] < 0.5:
                    last[1] = max(last[1], bend)
                    continue
                if last is not None:
                    boxes.append(_box(last, ty, track_h))
                last = [bx, bend, float(TIMELINE_LEGEND.index(kind))]
            if last is not None:
                boxes.append(_box(last, ty, track_h))
        y += busy_h + row_gap + (8 if same else 0)  # room for the label's second line
    axis_y = y + 2
    span_us = span / timeline.clock_mhz
    ticks = [Tick(sx(t * timeline.clock_mhz), fmt_time_us(t) if t else "0")
             for t in _nice_ticks_linear(span_us) if t <= span_us * 1.001]
    return TimelineChart(width=width, height=int(axis_y + 22), x0=x0, x1=x1, axis_y=axis_y, rows=rows, boxes=boxes,
                         ticks=ticks, busy_cores=len(busy), cores=len(_shown_cores(timeline)),
                         overlap=dma_compute_overlap(timeline),
                         merged_us=timeline.merged_within_cycles / timeline.clock_mhz,
                         kinds=[k for k in TIMELINE_LEGEND if any(b.kind == k for b in boxes)])
