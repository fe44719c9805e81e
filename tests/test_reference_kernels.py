"""reference_kernels/: the instructor submissions, the bundled example and the known-bad fixtures.

- Layout: every submission follows DESIGN.md's layout, copies are in step, each fixture is one small edit of
  the reference it names.
- Kernels on the emulator (no torch): every reference stage runs every case of the groups its stage claims
  (the assignments' own case lists, inputs and tolerances, checked by the grader's compare()); the modelled
  times keep the stage order on each stage's perf shape; each runtime fixture shows its defect, and only on the
  shapes it claims. The .mlu files are compiled with cncc-emu and driven by a small CNRT host program.
- Bindings (slow): the references with distinct binding styles go through the real build harness and torch,
  on aligned and tail shapes.
"""

from __future__ import annotations

import difflib
import json
import os
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from bang_harness.protocol import split_line

from grader.checks.compare import compare
from grader.results import Verdict
from grader.spec.cases import ConcreteCase, correctness_cases, perf_case
from grader.spec.loader import load_assignment
from grader.spec.models import AssignmentSpec
from grader.spec.references import REFERENCES as HOST_REFERENCES
from grader.spec.seeds import SeedPlan


def read_trace(path: Path) -> list[dict]:
    """The launch records of a trace (each line `<mac> <json>`; these tests do not check the signatures)."""
    records = []
    for line in path.read_bytes().splitlines():
        parts = split_line(line)
        if parts is not None:
            records.append(json.loads(parts[1]))
    return [r for r in records if r.get("record", "launch") == "launch"]

ROOT = Path(__file__).resolve().parents[1]
KERNELS = ROOT / "reference_kernels"
STAGES = {
    "sigmoid": ("vector", "multicore", "pipeline"),
    "matmul": ("scalar_gdram", "scalar_nram", "vector", "multicore", "pipeline", "sram_union"),
}
SEEDS = SeedPlan.create("public")
RUN_TIMEOUT_SECONDS = 300.0
# The references build __bang_matmul's right operand as N rows of K in the weight-line order __bang_reshape_filter
# writes (matmul_tiling.h, MATMUL_RHS_N_ROWS=1), the emulator's default layout (BANG_EMU_MATMUL_RHS=filter). Runs
# say so explicitly, so a layout exported in the caller's shell cannot leak in;
# test_emulator_default_rhs_layout_is_the_references_one checks the default.
RHS_LAYOUT_ENV = {"BANG_EMU_MATMUL_RHS": "filter"}


def reference_folders() -> list[Path]:
    return [KERNELS / op / stage for op, stages in STAGES.items() for stage in stages]


def fixture_folders() -> list[Path]:
    return sorted(p.parent for p in (KERNELS / "known_bad").glob("*/expected.toml"))


def read_toml(path: Path) -> dict[str, Any]:
    return tomllib.loads(path.read_text(encoding="utf-8"))


def assignment(name: str) -> AssignmentSpec:
    return load_assignment(name)


# ---------------------------------------------------------------------------------------------------------
# Layout


@pytest.mark.parametrize("folder", [*reference_folders(), KERNELS / "example", *fixture_folders()],
                         ids=lambda p: str(p.relative_to(KERNELS)))
def test_submission_follows_the_layout(folder: Path) -> None:
    grade = read_toml(folder / "grade.toml")
    assert grade["assignment"] in STAGES
    assert grade["student"]["id"]
    module = grade.get("module", "ops")
    assert (folder / f"{module}.py").is_file()
    assert list((folder / "mlu").glob("*.mlu")), "no kernels"
    assert list((folder / "cpp").glob("*.cpp")), "no binding"
    for source in (folder / "mlu").glob("*.mlu"):
        text = source.read_text(encoding="utf-8")
        assert "<<<" in text and "cnrtQueue_t queue" in text, f"{source.name}: host entry must launch with <<<>>>"
    bindings = "".join(p.read_text(encoding="utf-8") for p in (folder / "cpp").glob("*.cpp"))
    assert "PYBIND11_MODULE(TORCH_EXTENSION_NAME" in bindings or "TORCH_LIBRARY(" in bindings


def test_both_binding_styles_and_the_catch_headers_are_used() -> None:
    bindings = {folder: "".join(p.read_text() for p in (folder / "cpp").glob("*.cpp")) for folder in reference_folders()}
    assert sum("TORCH_LIBRARY_IMPL(" in text and "PrivateUse1" in text for text in bindings.values()) >= 2
    assert sum("PYBIND11_MODULE(" in text for text in bindings.values()) >= 2
    assert any("aten/operators/bang/bang_kernel.h" in text and "getCurQueue()" in text for text in bindings.values())


def test_stage_folders_name_their_assignment() -> None:
    for op, stages in STAGES.items():
        for stage in stages:
            assert read_toml(KERNELS / op / stage / "grade.toml")["assignment"] == op


def test_example_maps_every_matmul_stage_and_has_sigmoid() -> None:
    grade = read_toml(KERNELS / "example" / "grade.toml")
    assert grade["assignment"] == "matmul" and grade["student"]["id"] == "example"
    assert set(grade["entries"]) == set(STAGES["matmul"])
    ops = (KERNELS / "example" / "ops.py").read_text(encoding="utf-8")
    for function in [*grade["entries"].values(), "matmul", "sigmoid"]:
        assert f"def {function}(" in ops


def test_copies_are_in_step() -> None:
    result = subprocess.run([sys.executable, str(KERNELS / "sync_copies.py"), "--check"],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("corpus", ["known_bad", "adversarial"])
def test_fixture_generator_reproduces_the_fixtures(corpus: str, tmp_path: Path) -> None:
    # The committed fixtures are exactly what <corpus>/make_fixtures.py makes from today's references.
    subprocess.run([sys.executable, str(KERNELS / corpus / "make_fixtures.py"), "--out", str(tmp_path)],
                   check=True, capture_output=True)

    def files(root: Path) -> dict[Path, bytes]:
        return {p.relative_to(root): p.read_bytes() for p in root.rglob("*")
                if p.is_file() and p.parent != root and "__pycache__" not in p.parts}

    committed, made = files(KERNELS / corpus), files(tmp_path)
    assert made, f"{corpus}/make_fixtures.py wrote nothing under --out"
    assert sorted(committed.keys() ^ made.keys()) == [], "fixture files only on one side"
    assert [p for p in committed if committed[p] != made[p]] == [], "fixtures differ from what the generator makes"


@pytest.mark.parametrize("folder", fixture_folders(), ids=lambda p: p.name)
def test_fixture_is_one_small_edit_of_its_reference(folder: Path) -> None:
    expected = read_toml(folder / "expected.toml")
    assert Verdict(expected["verdict"]) != Verdict.PASSED
    assert expected["assignment"] in STAGES and expected["message_contains"]
    assert (folder / "expected.toml").read_text(encoding="utf-8").startswith("# "), "a comment says what is wrong"
    origin = KERNELS / expected["derived_from"]
    assert read_toml(origin / "grade.toml")["assignment"] == expected["assignment"]
    changed = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        relative = path.relative_to(folder)
        if relative.name in {"grade.toml", "expected.toml"} or "__pycache__" in relative.parts:
            continue
        ours = path.read_text(encoding="utf-8").splitlines()
        theirs = (origin / relative).read_text(encoding="utf-8").splitlines()
        delta = [line for line in difflib.unified_diff(theirs, ours, lineterm="", n=0)
                 if line[:1] in "+-" and not line.startswith(("+++", "---"))]
        if delta:
            changed.append((relative, len(delta)))
    assert len(changed) == 1, f"one file must carry the defect, changed: {changed}"
    assert changed[0][1] <= 16, f"the defect should be a small edit: {changed}"


# ---------------------------------------------------------------------------------------------------------
# Kernels on the emulator, driven by a CNRT host program (no torch)

DRIVER_SOURCE = r"""
#include <cnrt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

%(declarations)s

typedef void (*SigmoidEntry)(cnrtQueue_t, const void*, void*, int64_t, bool);
typedef void (*MatmulEntry)(cnrtQueue_t, const void*, const void*, void*, float*, int, int, int, bool);
struct Named { const char* name; void* fn; };
static const Named kEntries[] = {%(table)s {0, 0}};

static void* find(const char* name) {
  for (const Named* e = kEntries; e->name; ++e) if (!strcmp(e->name, name)) return e->fn;
  fprintf(stderr, "driver: no entry %%s\n", name);
  exit(2);
}

static void* device_copy_of(const char* path, size_t bytes) {
  void* host = malloc(bytes ? bytes : 1);
  FILE* f = fopen(path, "rb");
  if (!f || fread(host, 1, bytes, f) != bytes) { fprintf(stderr, "driver: cannot read %%s\n", path); exit(2); }
  fclose(f);
  void* dev = 0;
  if (cnrtMalloc(&dev, bytes) != cnrtSuccess) exit(2);
  cnrtMemcpy(dev, host, bytes, cnrtMemcpyHostToDev);
  free(host);
  return dev;
}

// sigmoid ENTRY f32|f16 COUNT IN OUT  |  matmul ENTRY f32|f16 M K N A B OUT
int main(int argc, char** argv) {
  cnrtQueue_t queue;
  cnrtQueueCreate(&queue);
  const bool sigmoid = !strcmp(argv[1], "sigmoid");
  size_t out_bytes = 0;
  void* out = 0;
  const char* out_path = 0;
  if (sigmoid) {
    const bool is_half = !strcmp(argv[3], "f16");
    const int64_t count = atoll(argv[4]);
    out_bytes = count * (is_half ? 2 : 4);
    void* x = device_copy_of(argv[5], out_bytes);
    cnrtMalloc(&out, out_bytes);
    out_path = argv[6];
    ((SigmoidEntry)find(argv[2]))(queue, x, out, count, is_half);
  } else {
    const bool is_half = !strcmp(argv[3], "f16");
    const size_t elem = is_half ? 2 : 4;
    const int M = atoi(argv[4]), K = atoi(argv[5]), N = atoi(argv[6]);
    void* a = device_copy_of(argv[7], (size_t)M * K * elem);
    void* b = device_copy_of(argv[8], (size_t)K * N * elem);
    out_bytes = (size_t)M * N * elem;
    cnrtMalloc(&out, out_bytes);
    void* workspace = 0;  // fp16's partial sums, as the bindings allocate it
    if (is_half) cnrtMalloc(&workspace, (size_t)M * N * 4);
    out_path = argv[9];
    ((MatmulEntry)find(argv[2]))(queue, a, b, out, (float*)workspace, M, K, N, is_half);
  }
  const cnrtRet_t status = cnrtQueueSync(queue);
  if (status != cnrtSuccess) {
    fprintf(stderr, "driver: cnrtQueueSync: %%s\n", cnrtGetErrorStr(status));
    return 3;
  }
  void* host = malloc(out_bytes);
  cnrtMemcpy(host, out, out_bytes, cnrtMemcpyDevToHost);
  FILE* f = fopen(out_path, "wb");
  fwrite(host, 1, out_bytes, f);
  fclose(f);
  return 0;
}
"""

SIGMOID_DECL = "void {0}(cnrtQueue_t, const void*, void*, int64_t, bool);"
MATMUL_DECL = "void {0}(cnrtQueue_t, const void*, const void*, void*, float*, int, int, int, bool);"


def entry_names(folder: Path) -> dict[str, str]:
    """Host entry functions defined in the folder's .mlu files: name -> op."""
    names = {}
    for source in (folder / "mlu").glob("*.mlu"):
        for op in STAGES:
            for line in source.read_text(encoding="utf-8").splitlines():
                if line.startswith(f"void {op}_") and "_entry(" in line:
                    names[line.split()[1].split("(")[0]] = op
    return names


@dataclass
class KernelRun:
    output: np.ndarray | None
    returncode: int | None  # None: killed after the timeout
    stderr: str
    launches: list[dict[str, Any]] = field(default_factory=list)

    @property
    def modelled_us(self) -> float:
        return sum(float(launch["modelled_time_us"]) for launch in self.launches)


class KernelDriver:
    """Builds one CNRT host program per submission folder (its .mlu files + the driver) and runs cases."""

    def __init__(self, work: Path) -> None:
        from bang_emu import toolchain

        self.toolchain = toolchain
        self.work = work
        self.executables: dict[Path, Path] = {}

    def compile_mlu(self, source: Path, obj: Path, defines: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
        return self.toolchain.compile_mlu(source, obj, ["-c", "-O2", "-I", str(source.parent), *defines])

    def build(self, folder: Path, defines: tuple[str, ...] = ()) -> Path:
        key = (folder, defines)
        if key in self.executables:
            return self.executables[key]
        out = self.work / (folder.relative_to(KERNELS).as_posix().replace("/", "__") + "".join(defines))
        out.mkdir(parents=True, exist_ok=True)
        objects = []
        for source in sorted((folder / "mlu").glob("*.mlu")):
            obj = out / f"{source.stem}.o"
            result = self.compile_mlu(source, obj, defines)
            assert result.returncode == 0, f"{source}:\n{result.stdout}\n{result.stderr}"
            objects.append(obj)
        names = entry_names(folder)
        declarations = "\n".join((SIGMOID_DECL if op == "sigmoid" else MATMUL_DECL).format(name)
                                 for name, op in names.items())
        table = " ".join(f'{{"{name}", (void*){name}}},' for name in names)
        driver = out / "driver.cpp"
        driver.write_text(DRIVER_SOURCE % {"declarations": declarations, "table": table}, encoding="utf-8")
        includes = [arg for d in self.toolchain.include_dirs() for arg in ("-I", str(d))]
        exe = out / "driver"
        subprocess.run(["g++", "-std=c++17", "-O1", *includes, str(driver), *map(str, objects), "-o", str(exe),
                        *self.toolchain.runtime_link_args()], check=True, capture_output=True, text=True)
        self.executables[key] = exe
        return exe

    def run(self, folder: Path, entry: str, case: ConcreteCase, inputs: dict[str, np.ndarray] | None = None,
            timeout: float = RUN_TIMEOUT_SECONDS, defines: tuple[str, ...] = (),
            env: dict[str, str] | None = None) -> KernelRun:
        """Runs one case; env: the emulator settings (default RHS_LAYOUT_ENV; {} for the emulator's defaults)."""
        exe = self.build(folder, defines)
        inputs = inputs if inputs is not None else case.make_inputs()
        tag = f"{entry}_{case.name}_{case.dtype}"
        paths = []
        for name, array in inputs.items():
            path = exe.parent / f"{tag}_{name}.bin"
            np.ascontiguousarray(array).tofile(path)
            paths.append(str(path))
        out_path = exe.parent / f"{tag}_out.bin"
        trace = exe.parent / f"{tag}.trace.jsonl"
        trace.unlink(missing_ok=True)
        dtype = "f16" if case.dtype == "float16" else "f32"
        if case.shapes.keys() == {"x"}:
            argv = [str(exe), "sigmoid", entry, dtype, str(inputs["x"].size), *paths, str(out_path)]
        else:
            (m, k), (_, n) = case.shapes["a"], case.shapes["b"]
            argv = [str(exe), "matmul", entry, dtype, str(m), str(k), str(n), *paths, str(out_path)]
        inherited = {k: v for k, v in os.environ.items() if k not in RHS_LAYOUT_ENV}
        env = {**inherited, **(RHS_LAYOUT_ENV if env is None else env), "BANG_EMU_TRACE": str(trace),
               "BANG_EMU_POISON": "nan"}
        try:
            proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired as exc:
            stderr = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else (exc.stderr or "")
            return KernelRun(None, None, stderr)
        launches = read_trace(trace) if trace.exists() else []
        output = None
        if proc.returncode == 0:
            output = np.fromfile(out_path, dtype=case.dtype).reshape(case.output_shape)
        return KernelRun(output, proc.returncode, proc.stderr, launches)


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KernelDriver]:
    yield KernelDriver(tmp_path_factory.mktemp("reference_kernels"))


def expected_output(spec: AssignmentSpec, case: ConcreteCase, inputs: dict[str, np.ndarray]) -> np.ndarray:
    return HOST_REFERENCES[spec.reference].compute(*case.reference_inputs(inputs))


def check(spec: AssignmentSpec, case: ConcreteCase, inputs: dict[str, np.ndarray], run: KernelRun) -> str:
    """'' when the run passes the grader's checks for this case, else why not."""
    if run.returncode != 0 or run.output is None:
        return f"exit {run.returncode}: {run.stderr[-2000:]}"
    errors = [d for launch in run.launches for d in launch.get("diagnostics", []) if d.get("severity") == "error"]
    if errors:
        return f"emulator diagnostics: {errors}"
    outcome = compare(run.output, expected_output(spec, case, inputs), case.dtype, spec.tolerances[case.dtype],
                      spec.checks)
    return "" if outcome.passed else outcome.message


@pytest.mark.parametrize(("op", "stage"), [(op, s) for op, stages in STAGES.items() for s in stages])
def test_reference_stage_passes_every_case_it_claims(driver: KernelDriver, op: str, stage: str) -> None:
    spec = assignment(op)
    folder = KERNELS / op / stage
    entry = f"{op}_{stage}_entry"
    cases = correctness_cases(spec, SEEDS, groups=set(spec.stage(stage).groups))
    assert cases
    driver.build(folder)

    def run_case(case: ConcreteCase) -> str:
        inputs = case.make_inputs()
        problem = check(spec, case, inputs, driver.run(folder, entry, case, inputs))
        return f"{case.name} [{case.dtype}]: {problem}" if problem else ""

    with ThreadPoolExecutor(max_workers=2) as pool:
        failures = [p for p in pool.map(run_case, cases) if p]
    assert not failures, "\n".join(failures)


def modelled_us(driver: KernelDriver, op: str, stage: str, case: ConcreteCase) -> float:
    spec = assignment(op)
    inputs = case.make_inputs()
    run = driver.run(KERNELS / op / stage, f"{op}_{stage}_entry", case, inputs)
    assert not check(spec, case, inputs, run), check(spec, case, inputs, run)
    assert run.launches, "no kernel launch in the trace"
    return run.modelled_us


# The lab's MLU370-X8 measurements: every stage beats the one before, except that the SRAM/UNION1 stage
# (4.073 ms) is slower than the plain pipeline (3.824 ms); it still beats the multicore stage (4.563 ms).
STAGE_ORDER = [
    ("sigmoid", "vector", "multicore"),
    ("sigmoid", "multicore", "pipeline"),
    ("matmul", "scalar_gdram", "scalar_nram"),
    ("matmul", "scalar_nram", "vector"),
    ("matmul", "vector", "multicore"),
    ("matmul", "multicore", "pipeline"),
    ("matmul", "multicore", "sram_union"),
]


@pytest.mark.parametrize(("op", "slower", "faster"), STAGE_ORDER, ids=lambda v: str(v))
def test_modelled_time_keeps_the_stage_order(driver: KernelDriver, op: str, slower: str, faster: str) -> None:
    # Both stages on the faster stage's perf shape, the shape its threshold is set on.
    case = perf_case(assignment(op), faster, SEEDS)
    slow_us = modelled_us(driver, op, slower, case)
    fast_us = modelled_us(driver, op, faster, case)
    print(f"{op} {case.shapes}: {slower} {slow_us:.1f} us, {faster} {fast_us:.1f} us (modelled)")
    assert fast_us < slow_us, f"{faster} ({fast_us:.1f} us) is not faster than {slower} ({slow_us:.1f} us)"


@pytest.mark.parametrize(("slower", "faster"), [s[1:] for s in STAGE_ORDER if s[0] == "matmul"], ids=str)
def test_fp16_matmul_keeps_the_stage_order_and_beats_fp32_on_the_tensor_unit(driver: KernelDriver, slower: str,
                                                                             faster: str) -> None:
    # No stage is timed on fp16, but the references claim fp16, so its modelled times must tell the stages
    # apart too; and from __bang_matmul on, fp16 (half the bytes, 4x the tensor peak) is faster than fp32.
    spec = assignment("matmul")
    dims = dict(spec.stage(faster).perf.dims)
    half = single_case("matmul", dims, "float16")
    slow_us, fast_us = (modelled_us(driver, "matmul", stage, half) for stage in (slower, faster))
    print(f"matmul fp16 {dims}: {slower} {slow_us:.1f} us, {faster} {fast_us:.1f} us (modelled)")
    assert fast_us < slow_us
    if faster not in ("scalar_gdram", "scalar_nram"):
        assert fast_us < modelled_us(driver, "matmul", faster, single_case("matmul", dims))


@pytest.mark.parametrize(("defines", "layout"), [((), "filter"), (("-DMATMUL_RHS_N_ROWS=0",), "kn")],
                         ids=["n_rows_of_k_in_filter_lines", "k_rows_of_n"])
@pytest.mark.parametrize("stage", ["vector", "sram_union"])
def test_both_rhs_layouts_compute_correctly(driver: KernelDriver, stage: str, defines: tuple[str, ...],
                                            layout: str) -> None:
    # The layout switch of matmul_tiling.h, each side run with the emulator set to that layout.
    spec = assignment("matmul")
    for case in correctness_cases(spec, SEEDS, groups={"tail"}):
        inputs = case.make_inputs()
        run = driver.run(KERNELS / "matmul" / stage, f"matmul_{stage}_entry", case, inputs, defines=defines,
                         env={"BANG_EMU_MATMUL_RHS": layout})
        assert not check(spec, case, inputs, run), f"{case.name}: {check(spec, case, inputs, run)}"


def test_emulator_default_rhs_layout_is_the_references_one(driver: KernelDriver) -> None:
    # What the grader runs: the emulator's default environment. A failure here means the emulator and
    # the references disagree on __bang_matmul's WRAM layout (the contract: N rows of K in weight-line order,
    # which only shows for N > 64: 200 columns pad to 4 slots of 64 lines).
    spec = assignment("matmul")
    case = single_case("matmul", {"M": 5, "K": 7, "N": 200})
    inputs = case.make_inputs()
    run = driver.run(KERNELS / "matmul" / "vector", "matmul_vector_entry", case, inputs, env={})
    assert not check(spec, case, inputs, run), (
        "with the emulator's default BANG_EMU_MATMUL_RHS the references compute wrong products: "
        + check(spec, case, inputs, run))


def single_case(op: str, dims: dict[str, int], dtype: str = "float32") -> ConcreteCase:
    spec = assignment(op)
    shapes = {inp.name: tuple(dims[d] for d in inp.dims) for inp in spec.inputs}
    return ConcreteCase(name="_".join(str(v) for v in dims.values()), group="fixture", dtype=dtype,
                        shapes=shapes, output_shape=tuple(dims[d] for d in spec.output_dims),
                        seed=SEEDS.derive(op, "fixture", str(dims)),
                        distributions={inp.name: inp.distribution for inp in spec.inputs})


@dataclass(frozen=True)
class FixtureDefect:
    """A runtime fixture, a shape it must fail on in its particular way and one where it still passes (None:
    its defect shows on every shape)."""

    name: str
    op: str
    failing: dict[str, int]
    passing: dict[str, int] | None
    dtype: str = "float32"


RUNTIME_FIXTURES = [
    FixtureDefect("tail_dropped", "sigmoid", {"N": 1009}, {"N": 4096}),
    FixtureDefect("wrong_task_offset", "sigmoid", {"N": 100003}, {"N": 65536}),
    FixtureDefect("missing_sync_io", "sigmoid", {"N": 65536}, None),
    FixtureDefect("nram_overflow", "sigmoid", {"N": 1048579}, {"N": 100003}),
    FixtureDefect("out_of_bounds_write", "matmul", {"M": 63, "K": 65, "N": 65}, {"M": 63, "K": 65, "N": 64}),
    FixtureDefect("output_partly_unwritten", "matmul", {"M": 97, "K": 89, "N": 101}, {"M": 96, "K": 89, "N": 101}),
    FixtureDefect("hangs", "sigmoid", {"N": 63}, {"N": 4096}),
    FixtureDefect("half_running_sum", "matmul", {"M": 65, "K": 2048, "N": 67}, {"M": 97, "K": 89, "N": 101},
                  dtype="float16"),
]


@pytest.mark.parametrize("defect", RUNTIME_FIXTURES, ids=lambda d: d.name)
def test_runtime_fixture_shows_its_defect_only_where_claimed(driver: KernelDriver, defect: FixtureDefect) -> None:
    folder = KERNELS / "known_bad" / defect.name
    expected = read_toml(folder / "expected.toml")
    spec = assignment(defect.op)
    (entry,) = entry_names(folder)

    if defect.passing is not None:
        ok_case = single_case(defect.op, defect.passing, defect.dtype)
        ok_inputs = ok_case.make_inputs()
        assert not check(spec, ok_case, ok_inputs, driver.run(folder, entry, ok_case, ok_inputs))

    case = single_case(defect.op, defect.failing, defect.dtype)
    inputs = case.make_inputs()
    verdict = Verdict(expected["verdict"])
    run = driver.run(folder, entry, case, inputs, timeout=10.0 if verdict == Verdict.TIMEOUT else RUN_TIMEOUT_SECONDS)
    if verdict == Verdict.TIMEOUT:
        assert run.returncode is None, "the kernel finished"
        return
    if verdict == Verdict.RUNTIME_ERROR:
        assert run.returncode != 0 and "bang-emu: error:" in run.stderr, run.stderr[-2000:]
        assert all(word in run.stderr for word in expected["message_contains"]), run.stderr[-2000:]
        return
    assert verdict == Verdict.WRONG_ANSWER
    problem = check(spec, case, inputs, run)
    assert run.returncode == 0 and problem, "the fixture passed"
    assert any(word in problem for word in expected["message_contains"]), problem


def test_compile_error_fixture_does_not_compile(driver: KernelDriver, tmp_path: Path) -> None:
    folder = KERNELS / "known_bad" / "compile_error"
    expected = read_toml(folder / "expected.toml")
    (source,) = (folder / "mlu").glob("*.mlu")
    result = driver.compile_mlu(source, tmp_path / "x.o")
    assert result.returncode != 0
    assert all(word in result.stdout + result.stderr for word in expected["message_contains"])


# ---------------------------------------------------------------------------------------------------------
# Bindings: the real build harness and torch (slow: one g++ of torch headers per submission)


def harness(command: str, submission: Path, work: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "BANG_GRADER_SUBMISSION": str(submission), "BANG_GRADER_BUILD": str(work / "build"),
           "BANG_GRADER_IO": str(work / "io")}
    argv = [sys.executable, "-m", "bang_harness", command] + (["--backend", "emu"] if command == "build" else [])
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout, check=False)


@dataclass(frozen=True)
class BindingCheck:
    folder: str
    entries: tuple[str, ...]


# One build per binding style (a g++ of the torch headers each): the example covers the torch_mlu 2.x headers
# with PYBIND11_MODULE and every kernel; the other stage folders share its kernels (test_copies_are_in_step)
# and one of these binding styles.
BINDINGS = [
    BindingCheck("example", ("matmul_scalar_gdram", "matmul_scalar_nram", "matmul_vector", "matmul_multicore",
                             "matmul_pipeline", "matmul_sram_union", "matmul", "sigmoid")),
    BindingCheck("sigmoid/vector", ("sigmoid",)),  # CATCH-era headers, TORCH_BANGC_KERNEL_LAUNCH_CHECK
    BindingCheck("sigmoid/multicore", ("sigmoid",)),  # TORCH_LIBRARY + TORCH_LIBRARY_IMPL(PrivateUse1)
]
BINDING_SHAPES = {
    "sigmoid": [({"N": 4096}, "float32"), ({"N": 1009}, "float32"), ({"N": 129}, "float16")],
    "matmul": [({"M": 64, "K": 64, "N": 64}, "float32"), ({"M": 97, "K": 89, "N": 101}, "float32"),
               ({"M": 65, "K": 2048, "N": 67}, "float16")],  # fp16 K-tiled: the binding's fp32 workspace
}


@pytest.mark.slow
@pytest.mark.parametrize("binding", BINDINGS, ids=lambda b: b.folder)
def test_binding_builds_and_computes_through_the_harness(binding: BindingCheck, tmp_path: Path) -> None:
    submission = KERNELS / binding.folder
    build = harness("build", submission, tmp_path, timeout=600)
    assert build.returncode == 0, build.stdout[-4000:] + build.stderr[-4000:]
    grade = read_toml(submission / "grade.toml")
    (tmp_path / "io" / "inputs").mkdir(parents=True)
    calls, expectations = [], {}
    for entry in binding.entries:
        op = "sigmoid" if entry.startswith("sigmoid") else "matmul"
        spec = assignment(op)
        for dims, dtype in BINDING_SHAPES[op]:
            case = single_case(op, dims, dtype)
            inputs = case.make_inputs()
            call_id = f"{entry}_{case.name}_{dtype}"
            names = []
            for name, array in inputs.items():
                np.save(tmp_path / "io" / "inputs" / f"{call_id}_{name}.npy", array)
                names.append(f"{call_id}_{name}.npy")
            calls.append({"id": call_id, "entry": entry, "inputs": names, "dtype": dtype, "poison": "nan"})
            expectations[call_id] = (spec, case, inputs)
    job = {"backend": "emu", "device": None, "module": grade.get("module", "ops"),
           "extension": grade.get("extension", "my_ops_ext"), "calls": calls}
    (tmp_path / "io" / "job.json").write_text(json.dumps(job), encoding="utf-8")
    run = harness("run", submission, tmp_path, timeout=900)
    assert run.returncode == 0, run.stderr[-4000:]
    outputs = tmp_path / "io" / "outputs"
    for call_id, (spec, case, inputs) in expectations.items():
        result = json.loads((outputs / f"{call_id}.json").read_text())
        assert result["ok"], f"{call_id}: {result}"
        trace = outputs / f"{call_id}.trace.jsonl"
        launches = read_trace(trace) if trace.exists() else []
        assert launches, f"{call_id}: no kernel launch traced"
        actual = np.load(outputs / f"{call_id}.npy", allow_pickle=False)
        kernel_run = KernelRun(actual, 0, "", launches)
        assert not check(spec, case, inputs, kernel_run), f"{call_id}: {check(spec, case, inputs, kernel_run)}"
