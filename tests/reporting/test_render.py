"""The rendered HTML: self-contained, escaped, and showing what each kind of submission needs."""

from __future__ import annotations

import json
import re

import pytest

from grader.orchestration.job import write_report
from grader.reporting import render_report_html
from grader.results import GradeResult, Verdict

from . import samples


def text_of(html: str) -> str:
    """Visible text, roughly: tags dropped, entities left as they are."""
    body = html.split("<body>", 1)[1]
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", body))


@pytest.mark.parametrize("name", sorted(samples.ALL))
def test_every_sample_renders_self_contained(name):
    html = render_report_html(samples.ALL[name]())
    assert html.startswith("<!DOCTYPE html>")
    assert "Content-Security-Policy" in html and "default-src 'none'" in html
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", html), "no external resources"
    assert "<script" not in html and "<link" not in html
    for element in ('id="summary"', 'id="verdict"', 'id="score"', 'id="seeds"', 'id="date"', 'id="backend"'):
        assert element in html


def test_header_shows_who_what_score_and_provenance():
    result = samples.passing_matmul()
    text = text_of(render_report_html(result))
    for expected in (
        "Lin Wei",
        "s2412345",
        "MatMul: six optimisation stages",
        "100",
        "Passed",
        "BANG-on-CPU emulator",
        "modelled (mlu370-x8)",
        "course-2026-lab5",
        "3b7f0c9a12de",
        "bang-grader 0.1.0",
        "2026-12-02 10:30 UTC",
    ):
        assert expected in text, expected


def test_emulated_times_are_labelled_modelled_everywhere_they_appear():
    html = render_report_html(samples.passing_matmul())
    assert 'id="modelled-note"' in html
    # each stage card's time split names its figures as modelled
    assert len(re.findall(r"Where the time goes.{0,80}modelled", html)) == 6


def test_hardware_times_are_not_called_modelled():
    result = samples.passing_matmul()
    result.backend, result.time_source = "mlu", "hardware"
    html = render_report_html(result)
    assert "modelled-note" not in html
    assert "measured on hardware" in html



@pytest.mark.parametrize(("modelled", "label"), [(True, "modelled (mlu370-x8)"), (False, "measured on hardware")])
def test_a_results_file_from_before_time_source_still_renders(modelled, label):
    """Documents written before `time_source` carry only `time_is_modelled`; the source is read from it."""
    old = json.loads(samples.passing_matmul().to_json())
    del old["time_source"]
    old["time_is_modelled"] = modelled
    result = GradeResult.from_json(json.dumps(old))
    assert result.time_source == ("modelled" if modelled else "hardware")
    assert label in render_report_html(result)
    assert json.loads(result.to_json())["time_is_modelled"] is modelled

def test_secret_seed_is_withheld():
    result = samples.passing_matmul()
    result.seeds.mode, result.seeds.master = "secret", None
    text = text_of(render_report_html(result))
    assert "withheld" in text and "course-2026-lab5" not in text


def test_student_controlled_text_is_escaped():
    result = samples.compile_error()
    result.student.name = "<script>alert(1)</script>"
    result.build.compiler_output += "\nmlu/x.mlu:1:1: error: <img src=x onerror=alert(2)>\n"
    result.cases = samples.failing_matmul().cases
    result.cases[0].name = "<b>case</b>"
    html = render_report_html(result)
    assert "<script>alert(1)" not in html and "&lt;script&gt;alert(1)" in html
    assert "<img src=x" not in html
    assert "<b>case</b>" not in html


def test_failing_report_lists_groups_mismatches_and_hints():
    html = render_report_html(samples.failing_matmul())
    text = text_of(html)
    assert 'data-rule="fix_tail_only"' in html
    assert "Handle the remainder" in text
    assert 'data-kind="unwritten_output"' in html
    assert "[112, 0]" in text and "unwritten" in text and "61.7" in text
    assert "12% never written" in text
    assert "some outputs never written: check task offsets" in text
    assert text.count("DIFF1") >= 2  # one table per case group
    assert "Not timed: the stage must be correct first." in text


def test_compile_error_report_highlights_the_offending_line(tmp_path):
    html = render_report_html(samples.compile_error(tmp_path / "sub"))
    assert 'id="compiler-output"' in html
    assert '<span class="l error">/submission/mlu/matmul.mlu:12:5: error:' in html
    assert '<span class="l caret">' in html
    hit = re.search(r'<span class="l hit"><span class="n">(\d+)</span>([^<]*)</span>', html)
    assert hit and hit.group(1) == "12" and "__bang_matmull" in hit.group(2)


def test_compile_error_without_the_source_still_renders():
    html = render_report_html(samples.compile_error())  # submission path does not exist
    assert "l hit" not in html and "mlu/matmul.mlu:12" in html
    assert 'id="correctness"' not in html  # nothing ran: no empty score cards


def test_recorded_excerpts_are_used_for_diagnostics():
    html = render_report_html(samples.runtime_error())
    hit = re.search(r'<span class="l hit"><span class="n">(\d+)</span>([^<]*)</span>', html)
    assert hit and hit.group(1) == "27" and "NRAM2GDRAM" in hit.group(2)
    assert "Clamp the last chunk" in html


def test_excerpts_never_leave_the_submission_folder(tmp_path):
    secret = tmp_path / "grader-secret.txt"
    secret.write_text("TOP SECRET LINE\n" * 30)
    sub = tmp_path / "sub" / "mlu"
    sub.mkdir(parents=True)
    (sub / "evil.mlu").symlink_to(secret)
    result = samples.runtime_error()
    result.source_excerpts = []
    result.submission_path = str(tmp_path / "sub")
    for diag in [result.cases[1].diagnostics[0], result.stages[0].trace.diagnostics[0]]:
        diag.location.file = "/submission/mlu/evil.mlu"
        diag.location.line = 3
    assert "TOP SECRET" not in render_report_html(result)
    result.cases[1].diagnostics[0].location.file = "../grader-secret.txt"
    assert "TOP SECRET" not in render_report_html(result)


def test_performance_section_has_a_chart_and_trace_per_stage():
    html = render_report_html(samples.passing_matmul())
    assert html.count('class="card stage"') == 6
    assert html.count('<svg class="chart"') == 6  # stage bars
    assert 'class="chart roof"' in html
    for part in (
        "Bytes moved per direction",
        "On-chip memory, peak / capacity",
        "GDRAM2WRAM",
        "__bang_matmul ×2048",
    ):
        assert part in html


def test_too_slow_stage_shows_its_next_step():
    html = render_report_html(samples.slow_sigmoid())
    assert 'class="stage-next" data-rule="split_over_tasks"' in html
    assert 'id="next-step" data-rule="split_over_tasks"' in html


def test_internal_error_is_not_blamed_on_the_student():
    result = samples.timeout()
    result.verdict = Verdict.INTERNAL_ERROR
    text = text_of(render_report_html(result))
    assert "not your fault" in text and "Grader error" in text


def test_rendering_needs_only_the_json_document(tmp_path):
    result = samples.failing_matmul()
    again = GradeResult.from_json(result.to_json())
    assert render_report_html(again) == render_report_html(result)
    out = write_report(again, tmp_path / "deep" / "report.html")
    assert out.read_text(encoding="utf-8") == render_report_html(result)


def test_unsandboxed_absolute_paths_are_shown_relative_and_quoted_once(tmp_path):
    # under --sandbox none the emulator reports host paths inside the submission folder
    sub = tmp_path / "my_ops"
    (sub / "mlu").mkdir(parents=True)
    (sub / "mlu" / "sigmoid.mlu").write_text("".join(f"line {i}\n" for i in range(1, 40)))
    result = samples.runtime_error()
    result.source_excerpts, result.submission_path = [], str(sub)
    for diag in (result.cases[1].diagnostics[0], result.stages[0].trace.diagnostics[0]):
        diag.location.file = str(sub / "mlu" / "sigmoid.mlu")
    html = render_report_html(result)
    # before the first quote of the emulator's own output (which names the file as it saw it)
    assert str(tmp_path) not in text_of(html).split("Emulator's original output")[0]
    assert "mlu/sigmoid.mlu:27" in html
    assert html.count('<span class="l hit"><span class="n">27</span>line 27</span>') == 1


def test_degenerate_numbers_still_render():
    # a report must never take the grading run down with it: zero, negative, NaN and infinite figures
    result = samples.passing_matmul()
    s0, s1, s2 = result.stages[0], result.stages[1], result.stages[2]
    s0.timing.median_us = s0.timing.min_us = 0.0
    s1.timing.min_us, s1.threshold_us, s1.reference_us = -5.0, float("inf"), 0.0
    s2.timing.achieved_gbps, s2.timing.achieved_gflops = float("nan"), -1.0
    s2.trace.time_split_us = {"scalar": 0.0}
    s2.trace.onchip_capacity_bytes = {}
    result.cases[0].diff1, result.cases[0].diff3 = float("nan"), float("inf")
    result.max_score = 0.0
    html = render_report_html(result)
    assert html.count('class="card stage"') == 6


def test_chinese_report_is_marked_zh_and_worded_in_chinese(tmp_path):
    for make in (samples.failing_matmul, lambda: samples.compile_error(tmp_path / "sub")):
        english, chinese = make(), make()
        chinese.lang = "zh"
        en_html, zh_html = render_report_html(english), render_report_html(chinese)
        assert '<html lang="en">' in en_html and '<html lang="zh-CN">' in zh_html
        zh_text = text_of(zh_html)
        # the template's own words (headings, labels, notes) in Chinese, none left in English
        words = [w for w in ("feedback report", "Assignment", "Backend", "What to do next", "Correctness",
                             "Performance", "Try:", "No MLU was used", "Where the time goes",
                             "The errors at your own lines", "full marks ≤", "roofline floor")
                 if w in text_of(en_html)]
        assert len(words) >= 6
        assert not [w for w in words if w in zh_text]
        # technical names stay as they are
        assert "DIFF1" in zh_text or "BANG-on-CPU" in zh_text


def test_stage_cards_show_the_previous_stages_reference_and_the_floor():
    html = render_report_html(samples.passing_matmul())
    vector = html[html.index('id="stage-matmul_vector"') :]
    vector = vector[: vector.index("</section>")]
    assert "stage 2 reference 126 ms" in vector and "roofline floor" in vector
    assert "how fast the technique before this one gets" in vector
    first = html[html.index('id="stage-matmul_scalar_gdram"') :]
    assert "stage 0" not in first[: first.index("</section>")]


def test_the_report_renders_from_the_document_alone_and_older_documents_still_render():
    """The assignment's tolerances, [feedback] and operator travel in the document (assignment_facts): the report
    is the same where the assignment's spec is missing. A document written before they did still renders, with
    the generic advice and without what only the spec could tell (here: a builtin's documented error)."""
    result = samples.saturated_sigmoid()
    result.assignment = "not-on-this-machine"
    html = render_report_html(result)
    assert "documented error" in html
    data = json.loads(result.to_json())
    data.pop("assignment_facts")
    older = GradeResult.model_validate(data)
    assert older.assignment_facts is None
    html = render_report_html(older)
    assert "documented error" not in html and "Amira Haddad" in html


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_report_from_compiled_templates_kept_on_disk_is_the_one_compiled_afresh(tmp_path, monkeypatch, lang):
    """render._bytecode_cache: a second process loads the report template's code (no compile) and renders the
    same bytes as one that compiled it; the files are named by the code that configures the environment."""
    from grader.reporting import render

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    result = samples.passing_matmul()
    result.lang = lang
    fresh = render._environment.__wrapped__(lang)
    with render.use_language(lang):
        compiled = fresh.get_template("report.html.j2").render(**render.build_context(result, None))
    kept = list((tmp_path / "bang-grader" / "templates").glob("*-*.cache"))
    assert kept  # the report and what it imports
    again = render._environment.__wrapped__(lang)

    def no_compile(*args, **kwargs):
        raise AssertionError("compiled again: the kept code was not loaded")

    monkeypatch.setattr(again, "compile", no_compile)
    with render.use_language(lang):
        loaded = again.get_template("report.html.j2").render(**render.build_context(result, None))
    assert loaded == compiled and len(compiled) > 10000
