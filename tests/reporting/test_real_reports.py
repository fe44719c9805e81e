"""Reports of real gradings: the bundled example and every known-bad fixture, graded by the real pipeline
(harness, emulator, runner). Each known-bad report must name that fixture's actual problem in its
"What to do next" card, and its expected.toml phrases must appear in the report."""

from __future__ import annotations

import importlib.util
import re
import tomllib
from functools import cache
from pathlib import Path

import pytest

from grader.orchestration.job import write_report
from grader.results import GradeResult, Verdict

from .browser import Chromium, missing

ROOT = Path(__file__).resolve().parents[2]
KNOWN_BAD = ROOT / "reference_kernels" / "known_bad"
SCREENSHOTS = ROOT / "out" / "screenshots"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("bang_emu.toolchain") is None,
        reason="the emulator toolchain (bang_emu.toolchain) is not built yet",
    ),
]

try:  # share the session's gradings (same arguments, same cache) with the end-to-end tests: builds are slow
    from tests.e2e.conftest import graded, submitted_example

    def example_report() -> tuple[GradeResult, Path | None]:
        """The example as `grade submit` graded it, and the report.html that command wrote."""
        _, result, _, out = submitted_example()
        return result, out / "report.html"

except ImportError:  # pragma: no cover -- the e2e suite is not there
    from grader.orchestration import GradeRequest, grade_submission

    @cache
    def graded(
        path: str, assignment: str | None = None, stages: tuple[str, ...] | None = None
    ) -> GradeResult:
        return grade_submission(ROOT / path, GradeRequest(assignment=assignment, stages=stages))

    def example_report() -> tuple[GradeResult, Path | None]:
        return graded("reference_kernels/example"), None


# fixture -> finding kinds that name its problem (the emulator's kind names, and the report's own)
EXPECTED_KINDS = {
    "compile_error": {"compile_error"},
    "half_running_sum": {"fp16_only"},
    "hangs": {"timeout", "barrier_timeout"},
    "kernel_never_launches": {"not_using_kernel"},
    "wrapper_calls_torch_matmul": {"not_using_kernel"},
    "wrapper_calls_torch_sigmoid": {"not_using_kernel"},
    "missing_sync_io": {"async_hazard"},
    "nram_overflow": {"nram_overflow", "onchip_out_of_bounds"},
    "out_of_bounds_write": {"gdram_out_of_bounds", "gdram_oob_write"},
    "output_partly_unwritten": {"unwritten_output", "tail_only"},
    "tail_dropped": {"unwritten_output", "tail_only"},
    "wrong_task_offset": {"wrong_values", "tail_only"},
}
FIXTURES = sorted(p.parent.name for p in KNOWN_BAD.glob("*/expected.toml"))


def visible_text(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html.split("<body>", 1)[1]))


def check_in_browser(report: Path, shot: str) -> None:
    """Screenshot (and keep a copy of the HTML, next to the screenshots) for people to look at."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    (SCREENSHOTS / shot).with_suffix(".html").write_text(report.read_text())
    if missing() is not None:
        return
    with Chromium() as browser:
        page = browser.open(report)
        try:
            page.screenshot(SCREENSHOTS / shot)
            assert page.report.problems == []
        finally:
            page.close()


def test_every_known_bad_fixture_has_an_expectation():
    assert FIXTURES and set(FIXTURES) <= set(EXPECTED_KINDS), set(FIXTURES) - set(EXPECTED_KINDS)


def test_report_of_the_bundled_example(tmp_path):
    # whether the example passes is the end-to-end suite's question; here: the report shows what was measured
    result, cli_report = example_report()
    html = write_report(result, tmp_path / "report.html").read_text()
    if cli_report is not None:  # `grade submit` wrote the same report
        assert cli_report.read_text() == html
    assert html.count('class="card stage"') == len(result.stages) >= 6
    traced = [s for s in result.stages if s.trace is not None]
    assert html.count("Where the time goes") == len(traced) > 0
    assert "Bytes moved per direction" in html
    timed = [s for s in result.stages if s.timing is not None]
    assert html.count('<svg class="chart"') == len(timed)
    assert ('class="chart roof"' in html) == bool(timed)
    assert 'id="next-step"' in html and f"modelled ({result.device_profile})" in html
    assert result.verdict != Verdict.INTERNAL_ERROR, result.message
    check_in_browser(tmp_path / "report.html", "real-example-desktop-light.png")


@pytest.mark.parametrize("fixture", FIXTURES)
def test_known_bad_report_names_its_problem(fixture, tmp_path):
    expected = tomllib.loads((KNOWN_BAD / fixture / "expected.toml").read_text())
    stage = expected.get("derived_from", "/").split("/")[-1] or None
    result = graded(
        f"reference_kernels/known_bad/{fixture}", expected["assignment"], (stage,) if stage else None
    )
    html = write_report(result, tmp_path / "report.html").read_text()
    rule = re.search(r'id="next-step" data-rule="([a-z0-9_]+)"', html)
    assert rule, "the report has no next step"
    kinds = {f"fix_{k}" for k in EXPECTED_KINDS[fixture]}
    assert rule.group(1) in kinds, (
        f"{fixture}: next step {rule.group(1)}, expected one of {kinds} ({result.message})"
    )
    text = visible_text(html).lower()
    for phrase in expected.get("message_contains", []):
        assert phrase.lower() in text, f"{fixture}: report does not say {phrase!r}"
    check_in_browser(tmp_path / "report.html", f"known-bad-{fixture}.png")
