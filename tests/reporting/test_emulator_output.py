"""The emulator's diagnostics in the student's language (issue 16): the emulator's C++ runtime words its errors in
English and stays so; the report and the terminal show each diagnostic's kind translated (the advice registry's
title, hint and advice) first, and the emulator's own line only labelled as its original output."""

from __future__ import annotations

import io
import re

from rich.console import Console

from grader.cli.summary import print_summary
from grader.i18n import use_language
from grader.reporting import render_report_html
from grader.reporting.advice import advice_for

from . import samples

_ORIGINAL = re.compile(r'<p class="emu-original small"><span class="emu-label">([^<]*)</span> <code lang="en">')


def _zh_runtime_error():
    result = samples.runtime_error()
    result.lang = "zh"
    return result


def test_each_emulator_line_in_a_chinese_report_is_labelled_and_follows_its_translated_kind():
    result = _zh_runtime_error()
    html = render_report_html(result)
    english = result.cases[1].diagnostics[0].message
    labels = _ORIGINAL.findall(html)
    assert labels and set(labels) == {"模拟器原始输出"}, labels
    # every occurrence of the emulator's sentence sits right after such a label, none stands on its own
    starts = [m.start() for m in re.finditer(re.escape(english), html)]
    assert starts
    for start in starts:
        opening = html.rfind('<p class="emu-original small">', 0, start)
        assert opening != -1 and "</p>" not in html[opening:start], html[max(0, start - 300):start]
    with use_language("zh"):
        title = advice_for("gdram_out_of_bounds").title
    assert title.startswith("GDRAM") and html.index(title) < starts[0]  # the translated kind comes first
    assert "bang-emu: error" not in html  # the case's message was the emulator's: shown once, labelled above


def test_the_terminal_labels_the_emulators_words_after_the_translated_hint():
    result = _zh_runtime_error()
    out = io.StringIO()
    with use_language("zh"):
        print_summary(result, Console(file=out, width=200, color_system=None))
        hint = advice_for("gdram_out_of_bounds").title
    lines = out.getvalue().splitlines()
    where = next(i for i, line in enumerate(lines) if "bang-emu: error: gdram-out-of-bounds" in line)
    assert lines[where].lstrip().startswith("模拟器原始输出：")
    assert hint in lines[where - 1]


def test_english_reports_label_them_too():
    html = render_report_html(samples.runtime_error())
    assert set(_ORIGINAL.findall(html)) == {"Emulator's original output"}
