"""The adversarial corpus, graded end to end with the docker runner: each fixture gets its expected verdict,
its message says why, the attacked entry keeps no points, the static screening reports what it should, and
nothing of it is left behind (no container of this grader, no leftover files outside the output folder).

Two groups of fixtures (reference_kernels/adversarial/README.md has the table): attacks on the sandbox itself
(fork bomb, disk fill, network, ...) and attacks on what the host believes (issue 11: forged trace, decoy
kernel, host-side compute, uninstrumented kernel code, device switch, forged harness_error, `#error` text,
npy header bomb, Infinity and flood in the trace, a formula as the student's name, fallocate fill). Fixtures
with `backend = "mlu"` (the decoy beside cnnlMatMul) are graded on a card only and skipped visibly elsewhere.
No attack may ever end in `internal_error` or `passed`."""

from __future__ import annotations

import csv
import io
import os
import resource
import shutil
import sys
import time
import tomllib
import uuid
from pathlib import Path

import docker
import pytest

from grader.checks.screening import screen_submission
from grader.orchestration.options import GradeEnvironment, GradeObserver, GradeRequest
from grader.sandbox.docker_runner import container_summaries, summary_name
from grader.sandbox.docker_settings import OWNER_LABEL, PHASE_LABEL, RUN_LABEL, TAG_ENV, TAG_LABEL

CORPUS = Path(__file__).resolve().parents[2] / "reference_kernels" / "adversarial"
FIXTURES = sorted(p for p in CORPUS.iterdir() if (p / "expected.toml").is_file())
NEVER = {"internal_error", "passed"}
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")  # spreadsheets skip blanks first: cells are checked lstripped
FLOOD_RSS_GROWTH_MB = 200  # three million '{}' lines per call used to cost ~25x the file in host memory

pytestmark = pytest.mark.docker


def _expected(fixture: Path) -> dict:
    return tomllib.loads((fixture / "expected.toml").read_text())


def _mlu_missing() -> str | None:
    """Why an mlu-only fixture cannot be graded here (None: it can)."""
    import glob
    import importlib.util

    if not glob.glob("/dev/cambricon_dev*") or importlib.util.find_spec("torch_mlu") is None:
        return "mlu-only fixture: needs an MLU card (/dev/cambricon_dev*) and torch_mlu"
    from bang_harness.mlu_driver import neuware_library

    if neuware_library("cnpapi") is None:
        return "mlu-only fixture: needs CNPAPI (libcnpapi) for the kernel records the host judges"
    return None


def _param(fixture: Path):
    expected = _expected(fixture)
    marks = [pytest.mark.slow] if expected.get("slow") else []
    if expected.get("backend", "emu") == "mlu":
        marks += [pytest.mark.mlu, pytest.mark.skipif(_mlu_missing() is not None, reason=str(_mlu_missing()))]
    return pytest.param(fixture, expected, id=fixture.name, marks=marks)


def _grade(submission: Path, out: Path, backend: str = "emu"):
    from grader.orchestration.build_cache import default_build_cache
    from grader.orchestration.job import run_job

    # The session's build cache (tests/conftest.py): most fixtures share one stub's or the vector reference's
    # mlu/ and cpp/ (the attack is in ops.py), so they share its build; a failed build is never reused.
    return run_job(submission, GradeRequest(seed="corpus", seed_mode="public"),
                   GradeEnvironment(backend=backend, sandbox="docker", batch=True,
                                    build_cache=default_build_cache()),
                   GradeObserver(out_dir=out)).result


def _our_containers() -> list[str]:
    from grader.sandbox.slot_runner import close_slots

    close_slots()  # with BANG_GRADER_SLOTS=1 this process keeps its slot containers for the next grading
    client = docker.from_env(timeout=30)
    return [summary_name(s) for s in container_summaries(client, f"{OWNER_LABEL}={os.getpid()}")
            if RUN_LABEL in (s.get("Labels") or {})]


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


SANDBOX_ATTACKS = {"fork_bomb", "disk_fill", "tmpfs_fill", "endless_output", "sleep_forever", "busy_loop",
                   "network_access", "read_proc", "host_files", "include_host_path", "forged_results", "kill_parent",
                   "symlink_copy_out", "timer_patching"}
TRUST_ATTACKS = {"forged_trace", "decoy_kernel", "host_compute_binding", "no_sanitize_kernel", "kernel_code_in_cpp",
                 "device_profile_env", "forged_harness_error", "error_directive", "npy_header_bomb",
                 "trace_infinity", "trace_flood", "csv_formula_name", "fallocate_fill", "mlu_decoy_matmul"}
REPLAY_ATTACKS = {"key_from_frames", "key_from_memory", "decoy_resign", "output_file_swap", "warmup_detection",
                  "cached_clone", "got_patching", "preload_interposition", "ptrace_siblings", "fd_overwrite",
                  "torch_files_overwrite", "key_from_descriptors", "program_host_answer"}  # issue 26: secrets and counters where student code runs
# Issue 37: stores the instrumentation did not see, aimed at the replay's own clock.
ESCAPES = {"libm_modf_clock", "movnti_clock", "alloca_stack_lift", "va_start_clock", "intrinsic_stream_clock",
           "memcpy_size_overflow", "vector_negative_count", "stack_clash_array", "frame_probe_clock"}
# Issue 28: bytes from one student never stop the class or blame the grader.
ODD_BYTES = {"fifo_binding", "nonutf8_file_name", "line_directive_blame", "include_own_stdout"}


def test_corpus_is_complete():
    names = {p.name for p in FIXTURES}
    assert SANDBOX_ATTACKS | TRUST_ATTACKS | REPLAY_ATTACKS | ESCAPES | ODD_BYTES <= names
    readme = (CORPUS / "README.md").read_text()
    assert all(f"`{name}`" in readme for name in names), "reference_kernels/adversarial/README.md lists every fixture"


@pytest.mark.parametrize("fixture", FIXTURES, ids=lambda p: p.name)
def test_screening_flags_what_the_fixture_declares(fixture):
    """Host-only and fast: the static screening's rules for each fixture, without building anything."""
    expected = _expected(fixture)
    rules = {f.rule for f in screen_submission(fixture)}
    assert set(expected.get("screening", [])) <= rules, rules


def _check_verdict(result, expected: dict, problems: list[str]) -> None:
    verdict = str(result.verdict)
    if "verdict" in expected and verdict != expected["verdict"]:
        problems.append(f"verdict {verdict}, expected {expected['verdict']}: {result.message[:600]}")
    if "verdict_one_of" in expected and verdict not in expected["verdict_one_of"]:
        problems.append(f"verdict {verdict}, expected one of {expected['verdict_one_of']}: {result.message[:600]}")
    if verdict in NEVER and "verdict_of_reference" not in expected:
        problems.append(f"an attack ended in {verdict}")


def _check_points(result, expected: dict, problems: list[str]) -> None:
    if "max_points" in expected and result.score > expected["max_points"]:
        problems.append(f"score {result.score}, the attacked entry may keep at most {expected['max_points']}")
    if "stage_points" in expected:
        stage_points = sum(s.points for s in result.stages)
        if stage_points != expected["stage_points"]:
            problems.append(f"stage points {stage_points}, expected {expected['stage_points']} (screening action)")
    if expected.get("screening"):
        found = {f.rule for f in result.screening}
        missing = set(expected["screening"]) - found
        if missing:
            problems.append(f"the result's screening lacks {sorted(missing)} (found {sorted(found)})")


def _gradable(fixture: Path, dest: Path) -> Path:
    """The fixture as graded: itself, or a copy with what git cannot hold made in it (expected.toml `special`)."""
    if not _expected(fixture).get("special"):
        return fixture
    return _materialise(fixture, dest)


def _materialise(fixture: Path, dest: Path) -> Path:
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_fixtures", CORPUS / "make_fixtures.py")
    assert spec is not None and spec.loader is not None
    module = sys.modules.setdefault(spec.name, importlib.util.module_from_spec(spec))  # its dataclasses need it
    spec.loader.exec_module(module)
    return module.materialise(fixture, dest)


def _check_blame(result, problems: list[str]) -> None:
    """A compile error of an attack is never "not your mistake" (the grader's limitation)."""
    from grader.reporting.compiler_output import student_errors

    if result.build is not None and str(result.verdict) == "compile_error":
        blamed = [e for e in student_errors(result.build.compiler_output, result.submission_path) if e.limitation]
        if blamed:
            problems.append(f"the grader is blamed for {blamed}")


def _check_messages(result, expected: dict, problems: list[str]) -> None:
    text = result.to_json().lower()
    for word in expected.get("message_contains", []):
        if word.lower() not in text:
            problems.append(f"{word!r} not in the result")
    if expected.get("message_any") and not any(w.lower() in text for w in expected["message_any"]):
        problems.append(f"none of {expected['message_any']} in the result")
    for word in expected.get("message_excludes", []):
        if word.lower() in text:
            problems.append(f"{word!r} in the result")


@pytest.mark.parametrize(("fixture", "expected"), [_param(f) for f in FIXTURES if not _expected(f).get("batch")])
def test_fixture_gets_its_verdict(fixture, expected, emu_image, tmp_path):
    started = time.monotonic()
    rss_before = _peak_rss_mb()
    result = _grade(_gradable(fixture, tmp_path / "submission"), tmp_path / "out", expected.get("backend", "emu"))
    problems: list[str] = []
    if "verdict_of_reference" in expected:
        reference = _grade(CORPUS.parent / expected["verdict_of_reference"], tmp_path / "reference")
        if result.verdict != reference.verdict:
            problems.append(f"verdict {result.verdict}, the reference's is {reference.verdict}: {result.message}")
        for mine, theirs in zip(result.stages, reference.stages, strict=True):
            if mine.timing and theirs.timing and mine.timing.median_us != pytest.approx(theirs.timing.median_us,
                                                                                      rel=0.05):
                problems.append(f"stage {mine.name}: {mine.timing.median_us:.1f} us, the reference "
                                f"{theirs.timing.median_us:.1f} us (the attack changed the model)")
            if mine.trace and theirs.trace and mine.trace.device_profile != theirs.trace.device_profile:
                problems.append(f"stage {mine.name}: modelled on {mine.trace.device_profile}, the host chose "
                                f"{theirs.trace.device_profile}")
    _check_verdict(result, expected, problems)
    _check_points(result, expected, problems)
    _check_messages(result, expected, problems)
    _check_blame(result, problems)
    if fixture.name == "trace_flood" and _peak_rss_mb() - rss_before > FLOOD_RSS_GROWTH_MB:
        problems.append(f"the host's peak memory grew by {_peak_rss_mb() - rss_before:.0f} MB reading the flood")
    if _our_containers():
        problems.append(f"containers left behind: {_our_containers()}")
    # the host stayed responsive and the runner's limits, not the suite's timeout, ended the attack
    if time.monotonic() - started > 600:
        problems.append(f"took {time.monotonic() - started:.0f} s")
    assert not problems, f"{fixture.name}:\n  " + "\n  ".join(problems)


@pytest.mark.parametrize(("fixture", "expected"), [_param(f) for f in FIXTURES if _expected(f).get("batch")])
def test_batch_exports_neutralise_the_fixture(fixture, expected, emu_image, tmp_path):
    """Graded through `grade batch` (folder intake, real docker grading, exports): no cell of gradebook.csv or
    canvas.csv starts like a formula, and the name comes from the folder, not grade.toml alone."""
    from grader.drivers.batch import run_batch

    submissions = tmp_path / "class"
    shutil.copytree(fixture, submissions / "eve")
    out = tmp_path / "out"
    summary = run_batch(submissions, "sigmoid", out, workers=1, sandbox="docker", progress=False, seed="corpus")
    problems: list[str] = []
    verdicts = set(summary.verdicts)
    if not verdicts <= set(expected.get("verdict_one_of", verdicts)) or verdicts & NEVER:
        problems.append(f"verdicts {summary.verdicts}, expected one of {expected.get('verdict_one_of')}")
    for export in ("gradebook.csv", "canvas.csv"):
        rows = list(csv.reader(io.StringIO((out / export).read_text())))
        for row in rows[1:]:
            for cell in row:
                if cell.lstrip().startswith(FORMULA_STARTS) or cell.startswith(FORMULA_STARTS):
                    problems.append(f"{export}: cell {cell!r} starts like a formula")
                if "HYPERLINK" in cell and not cell.startswith("'"):
                    problems.append(f"{export}: the name from grade.toml reached a cell as is: {cell!r}")
    if _our_containers():
        problems.append(f"containers left behind: {_our_containers()}")
    assert not problems, f"{fixture.name}:\n  " + "\n  ".join(problems)


ODD_NAMES = ("\n=1+2", " =HYPERLINK(\"evil.example\",\"x\")")  # class folder names that look like formulas


@pytest.mark.slow
def test_a_class_of_honest_students_is_graded_beside_every_odd_one(emu_image, tmp_path, monkeypatch):
    """Issue 28, one batch: honest students (the vector reference), a tar whose member's name is not UTF-8, a
    FIFO binding, a `#line` forgery, a compile blocked on its own output, folders named like formulas, a .rar,
    a .7z and a stray file. The honest ones are graded as the reference is; each odd one gets its own verdict
    or is listed as not graded with its reason; the CSV cells stay text; no container of the batch is left (its own:
    they carry a tag of their own), a dead worker's given the moment its reaper takes."""
    import tarfile

    from grader.drivers.batch import run_batch

    honest = CORPUS.parent / "sigmoid" / "vector"
    class_dir = tmp_path / "class"
    class_dir.mkdir()
    for name in ("alice", "bob", *ODD_NAMES):
        shutil.copytree(honest, class_dir / name)
    odd_bytes = _materialise(CORPUS / "nonutf8_file_name", tmp_path / "nonutf8")
    with tarfile.open(class_dir / "hank.tar.gz", "w:gz") as tar:  # the name as a student's tar holds it
        tar.add(odd_bytes, arcname="my_ops")
    for name in ("fifo_binding", "line_directive_blame", "include_own_stdout"):
        _materialise(CORPUS / name, class_dir / name)
    (class_dir / "dave.rar").write_bytes(b"Rar!\x1a\x07\x00")
    (class_dir / "erin.7z").write_bytes(b"7z\xbc\xaf\x27\x1c")
    (class_dir / "notes.txt").write_text("grading notes")
    out = tmp_path / "out"
    tag = uuid.uuid4().hex
    monkeypatch.setenv(TAG_ENV, tag)
    summary = run_batch(class_dir, "sigmoid", out, workers=1, sandbox="docker", progress=False, seed="corpus")

    book = {row["student_id"].removeprefix("'"): row  # the formula-like names come back quoted
            for row in csv.DictReader(io.StringIO((out / "gradebook.csv").read_text()))}
    problems: list[str] = []
    reference = book["alice"]["verdict"]
    if reference in NEVER - {"passed"} or book["alice"]["total"] in ("", "0"):
        problems.append(f"the honest student was not graded: {book['alice']}")
    for honest_too in ("bob", "hank", *ODD_NAMES):
        if (book[honest_too]["verdict"], book[honest_too]["total"]) != (reference, book["alice"]["total"]):
            problems.append(f"{honest_too!r} graded {book[honest_too]['verdict']} {book[honest_too]['total']}, "
                            f"the honest alice {reference} {book['alice']['total']}")
    for student, verdict, words in (("fifo_binding", "ungradable_layout", "not a regular file"),
                                    ("line_directive_blame", "compile_error", ""),
                                    ("include_own_stdout", "timeout", "made no progress")):
        if book[student]["verdict"] != verdict or words not in book[student]["message"]:
            problems.append(f"{student}: {book[student]['verdict']} {book[student]['message']!r}, expected "
                            f"{verdict} {words!r}")
    for entry, why in (("dave.rar", "a .rar archive"), ("erin.7z", "a .7z archive"),
                       ("notes.txt", "not a folder or a .zip/.tar archive")):
        if why not in summary.not_graded.get(entry, ""):
            problems.append(f"{entry} not listed as not graded: {summary.not_graded}")
    if summary.complete or "not graded: 3 entries" not in "\n".join(summary.lines()):
        problems.append(f"the summary does not say 3 entries were not graded: {summary.lines()}")
    if "Not graded" not in (out / "dashboard.html").read_text() or "erin.7z" not in (out / "dashboard.html").read_text():
        problems.append("the dashboard does not list the entries not graded")
    for export in ("gradebook.csv", "canvas.csv"):
        for row in list(csv.reader(io.StringIO((out / export).read_text())))[1:]:
            for cell in row:
                if cell.lstrip().startswith(FORMULA_STARTS) or cell.startswith(FORMULA_STARTS):
                    problems.append(f"{export}: cell {cell!r} starts like a formula")
    # A dead grader's containers are its reaper's (grader.sandbox.reaper) once it is gone: given a moment, none is left.
    deadline, left = time.monotonic() + 30, []
    while True:
        left = [(c.name, c.labels.get(PHASE_LABEL), c.labels.get(OWNER_LABEL), c.attrs.get("Created"))
                for c in docker.from_env(timeout=60).containers.list(all=True, filters={"label": f"{TAG_LABEL}={tag}"})
                if not os.path.exists(f"/proc/{c.labels.get(OWNER_LABEL, '0')}")]
        if not left or time.monotonic() > deadline:
            break
        time.sleep(1)
    if left:
        problems.append(f"containers of dead graders left 30 s after the batch: {left}")
    assert not problems, "\n  ".join(problems)
