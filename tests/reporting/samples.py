"""Realistic GradeResult documents for report tests: what the grader core produces for typical submissions.

Times follow the published MLU370-X8 matmul lab (calibration.md), so the charts look like real runs.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from factories import grade_result

from grader.results import (
    BuildInfo,
    CaseResult,
    EmuDiagnostic,
    GradeResult,
    GroupScore,
    Mismatch,
    RequirementResult,
    Seeds,
    SourceLocation,
    StageResult,
    Student,
    Timeline,
    TimelineEvent,
    Timing,
    TraceSummary,
    Verdict,
    Versions,
)
from grader.scoring.roofline import floor_us
from grader.spec import load_assignment
from grader.spec.references import REFERENCES

CAP = {"nram": 786432, "wram": 1048576, "sram": 4194304}
SMALL = {"left": [128, 256], "right": [256, 128]}
LARGE = {"left": [524288, 256], "right": [256, 128]}


def _timing(median_us: float, spread: float = 0.0, shape: dict[str, list[int]] | None = None) -> Timing:
    return Timing(
        source="modelled",
        median_us=median_us,
        min_us=median_us * (1 - spread),
        max_us=median_us * (1 + spread),
        spread=spread,
        repeats=5,
        floor_us=_floor_us(shape) if shape else None,
    )


def _floor_us(shape: dict[str, list[int]]) -> float | None:
    """The roofline floor the pipeline records (grader.scoring.timing), for a matmul (two inputs) or sigmoid."""
    reference, names = ("matmul", ("a", "b")) if len(shape) == 2 else ("sigmoid", ("x",))
    work = REFERENCES[reference].work({n: tuple(v) for n, v in zip(names, shape.values(), strict=True)}, 4)
    return floor_us(work, "float32", "mlu370-x8")


def _trace(kernel: str, us: float, split: dict[str, float], **kw: object) -> TraceSummary:
    return TraceSummary(
        kernel=kernel,
        device_profile="mlu370-x8",
        modelled_time_us=us,
        time_split_us=split,
        onchip_capacity_bytes=CAP,
        **kw,  # type: ignore[arg-type]
    )


def matmul_stages(multicore_ok: bool = True) -> list[StageResult]:
    f = 4  # bytes per float
    big_io = 524288 * 256 * f
    specs = [
        (
            "matmul_scalar_gdram",
            "Scalar on GDRAM",
            "matmul_scalar",
            SMALL,
            2716140.0,
            3000000.0,
            2716140.0,
            _trace("matmul_scalar_gdram_kernel", 2716140.0, {"scalar": 2716140.0}, builtin_counts={}),
        ),
        (
            "matmul_scalar_nram",
            "Scalar on NRAM",
            "matmul_nram",
            SMALL,
            126067.0,
            140000.0,
            126067.0,
            _trace(
                "matmul_nram_kernel",
                126067.0,
                {"scalar": 125900.0, "io": 167.0},
                bytes_moved={"GDRAM2NRAM": 262144, "NRAM2GDRAM": 65536},
                onchip_peak_bytes={"nram": 327680},
                builtin_counts={"__memcpy": 3},
            ),
        ),
        (
            "matmul_vector",
            "__bang_matmul, one core",
            "matmul_vector",
            SMALL,
            50.0,
            60.0,
            50.0,
            _trace(
                "matmul_vector_kernel",
                50.0,
                {"scalar": 1.0, "tensor": 29.0, "io": 18.0, "wait": 2.0},
                bytes_moved={"GDRAM2NRAM": 131072, "GDRAM2WRAM": 131072, "NRAM2GDRAM": 65536},
                onchip_peak_bytes={"nram": 196608, "wram": 131072},
                builtin_counts={"__bang_matmul": 1, "__memcpy": 3},
            ),
        ),
        (
            "matmul_multicore",
            "Many tasks",
            "matmul_multicore",
            LARGE,
            4563.0,
            5000.0,
            4563.0,
            _trace(
                "matmul_multicore_kernel",
                4563.0,
                {"scalar": 13.0, "tensor": 1100.0, "io": 3300.0, "wait": 150.0},
                dim=(128, 1, 1),
                cores_used=16,
                bytes_moved={
                    "GDRAM2NRAM": big_io,
                    "GDRAM2WRAM": 128 * 131072,
                    "NRAM2GDRAM": 524288 * 128 * f,
                },
                onchip_peak_bytes={"nram": 393216, "wram": 131072},
                builtin_counts={"__bang_matmul": 2048, "__memcpy": 4224},
            ),
        ),
        (
            "matmul_pipeline",
            "Async double buffering",
            "matmul_pipeline",
            LARGE,
            3824.0,
            4200.0,
            3824.0,
            _trace(
                "matmul_pipeline_kernel",
                3824.0,
                {"scalar": 12.0, "tensor": 1100.0, "io": 2600.0, "wait": 112.0},
                dim=(128, 1, 1),
                cores_used=16,
                bytes_moved={
                    "GDRAM2NRAM": big_io,
                    "GDRAM2WRAM": 128 * 131072,
                    "NRAM2GDRAM": 524288 * 128 * f,
                },
                onchip_peak_bytes={"nram": 589824, "wram": 131072},
                builtin_counts={
                    "__bang_matmul": 2048,
                    "__memcpy_async": 4224,
                    "__sync_io": 2176,
                    "__memcpy": 128,
                },
            ),
        ),
        (
            "matmul_sram_union",
            "SRAM staging, UNION1",
            "matmul_sram",
            LARGE,
            3158.0,
            4100.0,
            4073.0,
            _trace(
                "matmul_union_kernel",
                3158.0,
                {"scalar": 10.0, "tensor": 1100.0, "io": 1950.0, "wait": 98.0},
                dim=(4, 32, 1),
                func_type="UNION1",
                cores_used=16,
                bytes_moved={
                    "GDRAM2NRAM": big_io,
                    "GDRAM2SRAM": 4 * 131072,
                    "SRAM2WRAM": 128 * 131072,
                    "NRAM2GDRAM": 524288 * 128 * f,
                },
                onchip_peak_bytes={"nram": 589824, "wram": 131072, "sram": 131072},
                builtin_counts={
                    "__bang_matmul": 2048,
                    "__memcpy_async": 4224,
                    "__sync_cluster": 64,
                    "__sync_io": 2176,
                },
            ),
        ),
    ]
    stages = []
    for i, (name, title, entry, shape, us, threshold, reference, trace) in enumerate(specs):
        broken = not multicore_ok and i >= 3
        stages.append(
            StageResult(
                name=name,
                title=title,
                entry=entry,
                points=0.0 if broken else 10.0,
                points_possible=10.0,
                correct=not broken,
                verdict=Verdict.WRONG_ANSWER if broken else Verdict.PASSED,
                message="fails the tail cases" if broken else "",
                perf_shape=shape,
                timing=None if broken else _timing(us, 0.01, shape),
                threshold_us=threshold,
                reference_us=reference,
                requirements=[
                    RequirementResult(name="launch", description="launches a BANG kernel", passed=True),
                ],
                trace=None if broken else trace,
            )
        )
    return stages


def _case(name: str, group: str, entry: str, shape: dict[str, list[int]], **kw: object) -> CaseResult:
    defaults: dict[str, object] = dict(
        dtype="float32",
        verdict=Verdict.PASSED,
        passed=True,
        diff1=2.1e-7,
        diff2=3.4e-7,
        diff3=1.9e-6,
        max_abs_error=4.1e-6,
        mismatch_count=0,
    )
    defaults.update(kw)
    return CaseResult(name=name, group=group, entry=entry, shapes=shape, **defaults)  # type: ignore[arg-type]


def _matmul_cases(tail_broken: bool) -> list[CaseResult]:
    aligned = [(128, 256, 128), (256, 64, 128), (1024, 256, 64)]
    tails = [(127, 256, 128), (129, 33, 65), (1, 7, 3)]
    cases = []
    for entry in ("matmul_scalar", "matmul_multicore"):
        for m, n, k in aligned:
            cases.append(_case(f"{entry}/{m}x{n}x{k}", "aligned", entry, {"left": [m, n], "right": [n, k]}))
        for m, n, k in tails:
            name = f"{entry}/{m}x{n}x{k}"
            shape = {"left": [m, n], "right": [n, k]}
            if tail_broken and entry == "matmul_multicore" and m > 1:
                total = m * k
                unwritten = (m % 16) * k / total if m % 16 else 0.0
                cases.append(
                    _case(
                        name,
                        "tail",
                        entry,
                        shape,
                        verdict=Verdict.WRONG_ANSWER,
                        passed=False,
                        diff1=0.0612,
                        diff2=0.0874,
                        diff3=1.0,
                        max_abs_error=None,
                        unwritten_fraction=unwritten,
                        mismatch_count=(m % 16) * k,
                        element_count=total,
                        mismatches=[
                            Mismatch(index=[m - (m % 16) + i, j], expected=61.7 + i + j / 10, actual=None)
                            for i in range(min(2, m % 16))
                            for j in range(2)
                        ],
                        message=f"{(m % 16) * k} of {total} outputs still hold the poison value",
                    )
                )
            else:
                cases.append(_case(name, "tail", entry, shape))
    return cases


def _base(**kw: object) -> dict[str, object]:
    base: dict[str, object] = dict(
        student=Student(id="s2412345", name="Lin Wei"),
        assignment="matmul",
        assignment_title="MatMul: six optimisation stages",
        assignment_facts=load_assignment("matmul").facts(),  # as the pipeline writes it
        submission_path="/nonexistent/submission",
        submission_hash="9f2c4e1ab37d5e08c1f4a2b6d7e8f90112233445566778899aabbccddeeff00",
        backend="emu",
        device_profile="mlu370-x8",
        time_source="modelled",
        sandbox="docker",
        build=BuildInfo(ok=True, toolchain="cncc-emu 0.1 (g++ 12.2)", duration_seconds=14.2),
        seeds=Seeds(mode="public", master="course-2026-lab5", master_digest="3b7f0c9a12de45f6"),
        versions=Versions(
            grader="0.1.0",
            toolchain="cncc-emu 0.1 (g++ 12.2)",
            image="bang-grader-emu:0.1",
            torch="2.13.0",
            python="3.11.2",
        ),
        started_at=datetime(2026, 12, 2, 10, 30, tzinfo=UTC),
        finished_at=datetime(2026, 12, 2, 10, 33, 12, tzinfo=UTC),
    )
    base.update(kw)
    return base


def passing_matmul() -> GradeResult:
    cases = _matmul_cases(tail_broken=False)
    return grade_result(
        **_base(
            verdict=Verdict.PASSED,
            message="All 12 cases pass and all six stages reach full marks.",
            score=100.0,
            max_score=100.0,
            groups=[
                GroupScore(
                    name="aligned",
                    description="sizes multiples of 64",
                    points=20,
                    points_possible=20,
                    passed_cases=6,
                    total_cases=6,
                ),
                GroupScore(
                    name="tail",
                    description="remainders, 1-row and odd sizes",
                    points=20,
                    points_possible=20,
                    passed_cases=6,
                    total_cases=6,
                ),
            ],
            cases=cases,
            stages=matmul_stages(),
        )
    )


def failing_matmul() -> GradeResult:
    cases = _matmul_cases(tail_broken=True)
    return grade_result(
        **_base(
            verdict=Verdict.WRONG_ANSWER,
            message="2 tail cases of matmul_multicore are wrong.",
            score=50.0,
            max_score=100.0,
            groups=[
                GroupScore(name="aligned", points=20, points_possible=20, passed_cases=6, total_cases=6),
                GroupScore(name="tail", points=0, points_possible=20, passed_cases=4, total_cases=6),
            ],
            cases=cases,
            stages=matmul_stages(multicore_ok=False),
        )
    )


COMPILE_LOG = """\
/submission/mlu/matmul.mlu: In function 'void matmul_vector_kernel(float*, float*, float*, int, int, int)':
/submission/mlu/matmul.mlu:12:5: error: '__bang_matmull' was not declared in this scope; did you mean '__bang_matmul'?
   12 |     __bang_matmull(out_nram, left_nram, right_wram, M, N, K);
      |     ^~~~~~~~~~~~~~
      |     __bang_matmul
/submission/mlu/matmul.mlu:15:21: warning: unused variable 'tail' [-Wunused-variable]
   15 |     int tail = M % taskDim;
      |         ^~~~
cncc-emu: error: compilation of mlu/matmul.mlu failed (1 error)
"""

MATMUL_SOURCE = """\
#include <bang.h>

#define MAX_N 256
__nram__ float left_nram[128 * MAX_N];
__nram__ float out_nram[128 * 128];
__wram__ float right_wram[MAX_N * 128];

__mlu_global__ void matmul_vector_kernel(float *out, float *left, float *right, int M, int N, int K) {
    __memcpy(left_nram, left, M * N * sizeof(float), GDRAM2NRAM);
    __memcpy(right_wram, right, N * K * sizeof(float), GDRAM2WRAM);
    // the tensor unit does the whole tile
    __bang_matmull(out_nram, left_nram, right_wram, M, N, K);
    __memcpy(out, out_nram, M * K * sizeof(float), NRAM2GDRAM);

    int tail = M % taskDim;
}
"""


def compile_error(submission_dir: Path | None = None) -> GradeResult:
    """A build failure; with submission_dir, the source is written there so the report can quote it."""
    if submission_dir is not None:
        (submission_dir / "mlu").mkdir(parents=True, exist_ok=True)
        (submission_dir / "mlu" / "matmul.mlu").write_text(MATMUL_SOURCE)
    return grade_result(
        **_base(
            verdict=Verdict.COMPILE_ERROR,
            message="The submission did not compile.",
            score=0.0,
            max_score=100.0,
            submission_path=str(submission_dir) if submission_dir else "/nonexistent/submission",
            build=BuildInfo(
                ok=False,
                toolchain="cncc-emu 0.1 (g++ 12.2)",
                compiler_output=COMPILE_LOG,
                duration_seconds=2.3,
            ),
        )
    )


def _sigmoid_base(**kw: object) -> dict[str, object]:
    return _base(
        assignment="sigmoid",
        assignment_title="Sigmoid on the MLU",
        assignment_facts=load_assignment("sigmoid").facts(),
        student=Student(id="s2400777", name="Amira Haddad"),
        **kw,
    )


def _oob() -> EmuDiagnostic:
    return EmuDiagnostic(
        severity="error",
        kind="gdram-out-of-bounds",  # as the emulator spells it
        message="__memcpy NRAM2GDRAM writes 4096 bytes at offset 1048576 of a 1044484-byte buffer (y)",
        kernel="sigmoid_kernel",
        location=SourceLocation(file="/submission/mlu/sigmoid.mlu", line=27),
    )


def runtime_error() -> GradeResult:
    cases = [
        _case(
            "sigmoid/aligned_262144",
            "aligned",
            "sigmoid",
            {"x": [262144]},
            diff1=1.2e-4,
            diff2=1.5e-4,
            diff3=8.1e-4,
        ),
        _case(
            "sigmoid/tail_261121",
            "tail",
            "sigmoid",
            {"x": [261121]},
            verdict=Verdict.RUNTIME_ERROR,
            passed=False,
            diff1=None,
            diff2=None,
            diff3=None,
            message="bang-emu: error: gdram-out-of-bounds (kernel sigmoid_kernel, mlu/sigmoid.mlu:27)",
            diagnostics=[_oob()],
        ),
    ]
    return grade_result(
        **_sigmoid_base(
            verdict=Verdict.RUNTIME_ERROR,
            message="The emulator stopped a kernel that wrote out of bounds.",
            score=20.0,
            max_score=60.0,
            source_excerpts=[
                {
                    "file": "mlu/sigmoid.mlu",
                    "first_line": 22,
                    "lines": [
                        "    for (int i = 0; i < repeat; ++i) {",
                        "        int start = taskId * per_task + i * CHUNK;",
                        "        __memcpy(x_nram, x + start, CHUNK * sizeof(float), GDRAM2NRAM);",
                        "        __bang_active_sigmoid(x_nram, x_nram, CHUNK);",
                        "        // always a full chunk, even for the last one",
                        "        __memcpy(y + start, x_nram, CHUNK * sizeof(float), NRAM2GDRAM);",
                        "    }",
                    ],
                }
            ],
            groups=[
                GroupScore(name="aligned", points=20, points_possible=20, passed_cases=1, total_cases=1),
                GroupScore(name="tail", points=0, points_possible=20, passed_cases=0, total_cases=1),
            ],
            cases=cases,
            stages=[
                StageResult(
                    name="sigmoid_vector",
                    title="__bang_active_sigmoid",
                    entry="sigmoid",
                    points=0,
                    points_possible=20,
                    correct=False,
                    verdict=Verdict.RUNTIME_ERROR,
                    perf_shape={"x": [16777216]},
                    trace=_trace(
                        "sigmoid_kernel",
                        0.0,
                        {},
                        diagnostics=[_oob()],
                        bytes_moved={"GDRAM2NRAM": 1044484, "NRAM2GDRAM": 1048576},
                        onchip_peak_bytes={"nram": 65536},
                        builtin_counts={"__bang_active_sigmoid": 64, "__memcpy": 128},
                    ),
                )
            ],
        )
    )


def timeout() -> GradeResult:
    return grade_result(
        **_sigmoid_base(
            verdict=Verdict.TIMEOUT,
            message="The run phase exceeded its 120 s limit and was stopped.",
            score=0.0,
            max_score=60.0,
            cases=[
                _case(
                    "sigmoid/aligned_262144",
                    "aligned",
                    "sigmoid",
                    {"x": [262144]},
                    verdict=Verdict.TIMEOUT,
                    passed=False,
                    diff1=None,
                    diff2=None,
                    diff3=None,
                    max_abs_error=None,
                    mismatch_count=None,
                    message="stopped after 120 s",
                ),
            ],
        )
    )


def _serial_timeline(tiles: int = 8, load: int = 160_000, compute: int = 80_000) -> Timeline:
    """One core loading, computing and storing each tile in turn with blocking copies (the vector stage's shape)."""
    events, t = [], 0
    for _ in range(tiles):
        events += [TimelineEvent(0, "io", "load", t, t + load),
                   TimelineEvent(0, "compute", "vector", t + load, t + load + compute),
                   TimelineEvent(0, "io", "store", t + load + compute, t + 2 * load + compute),
                   TimelineEvent(0, "issue", "sync", t, t + 2 * load + compute)]
        t += 2 * load + compute
    return Timeline(kernel="sigmoid_kernel", clock_mhz=1000.0, makespan_cycles=t, cores=16, events=events)


def slow_sigmoid() -> GradeResult:
    """Correct, but one task on one core: the next step is to split over taskDim."""
    stage = StageResult(
        name="sigmoid_vector",
        title="__bang_active_sigmoid",
        entry="sigmoid",
        points=6,
        points_possible=20,
        correct=True,
        verdict=Verdict.TOO_SLOW,
        perf_shape={"x": [16777216]},
        timing=_timing(2150.0, 0.02, {"x": [16777216]}),
        threshold_us=400.0,
        reference_us=260.0,
        trace=_trace(
            "sigmoid_kernel",
            2150.0,
            {"scalar": 20.0, "vector": 650.0, "io": 1480.0},
            bytes_moved={"GDRAM2NRAM": 67108864, "NRAM2GDRAM": 67108864},
            onchip_peak_bytes={"nram": 262144},
            builtin_counts={"__bang_active_sigmoid": 256, "__memcpy": 512},
            timeline=_serial_timeline(),
        ),
    )
    cases = [
        _case(
            "sigmoid/aligned_262144",
            "aligned",
            "sigmoid",
            {"x": [262144]},
            diff1=1.2e-4,
            diff2=1.5e-4,
            diff3=8.1e-4,
        ),
        _case(
            "sigmoid/tail_261121",
            "tail",
            "sigmoid",
            {"x": [261121]},
            diff1=1.2e-4,
            diff2=1.5e-4,
            diff3=8.3e-4,
        ),
    ]
    return grade_result(
        **_sigmoid_base(
            verdict=Verdict.TOO_SLOW,
            message="Correct on every case; the vector stage is slower than its threshold.",
            score=46.0,
            max_score=60.0,
            groups=[
                GroupScore(name="aligned", points=20, points_possible=20, passed_cases=1, total_cases=1),
                GroupScore(name="tail", points=20, points_possible=20, passed_cases=1, total_cases=1),
            ],
            cases=cases,
            stages=[stage],
        )
    )


ALL = {
    "passing": passing_matmul,
    "failing": failing_matmul,
    "compile_error": compile_error,
    "runtime_error": runtime_error,
    "timeout": timeout,
    "too_slow": slow_sigmoid,
}


def saturated_sigmoid(expected: float = 2.06115e-09) -> GradeResult:
    """Issue 27 as graded before its fix (seed "seed1"): the reference kernel's n1 saturated to 0 at x = -20, which
    __bang_active_sigmoid is documented to do, and a relative DIFF1 over one element failed it; the rest passed."""
    cases = [
        _case("n1", "tiny", "sigmoid", {"x": [1]}, verdict=Verdict.WRONG_ANSWER, passed=False, diff1=0.673,
              diff2=0.673, diff3=2.06e-9, max_abs_error=expected, message="DIFF1 0.673 > 0.01",
              mismatches=[Mismatch(index=[0], expected=expected, actual=0.0)]),
        _case("n64", "aligned", "sigmoid", {"x": [64]}),
        _case("n65", "tail", "sigmoid", {"x": [65]}),
    ]
    return grade_result(**_sigmoid_base(verdict=Verdict.WRONG_ANSWER, score=66.67, max_score=100, cases=cases,
                                        stages=[]))
