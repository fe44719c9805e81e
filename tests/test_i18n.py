"""Languages (grader/i18n.py): the catalogues are complete, the language is resolved in the documented order,
and a real grading speaks the language it was asked for -- on the terminal and in results.json."""

from __future__ import annotations

import functools
import json
import re
import string
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from babel.messages.extract import DEFAULT_KEYWORDS, extract_from_dir
from babel.messages.pofile import read_po

from grader.i18n import (
    LANGUAGES,
    LOCALE_DIR,
    _,
    carry_language,
    html_lang,
    ngettext,
    resolve_language,
    translations,
    use_language,
)
from grader.results import Verdict, verdict_label
from grader.spec import SpecError, load_assignment

ROOT = Path(__file__).resolve().parents[1]
# Each domain's sources, as scripts/update-catalogue.sh extracts them; the mapping is pyproject's.
DOMAINS = {"grader": [ROOT / "grader", ROOT / "assignments"], "report": [ROOT / "reports" / "templates"]}
_HAN = re.compile(r"[\u4e00-\u9fff]")


def _mappings() -> tuple[list[tuple[str, str]], dict[str, dict[str, str]]]:
    table = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["babel"]["mappings"]
    method_map = [(m["pattern"], m["method"]) for m in table]
    options = {m["pattern"]: {k: v for k, v in m.items() if k not in ("pattern", "method")} for m in table}
    return method_map, options


def extracted(domain: str) -> list[tuple[str, int, str | tuple[str, ...]]]:
    """(file, line, msgid) of every message the sources of `domain` mark for translation."""
    return _extract(tuple(DOMAINS[domain]))


@functools.cache
def _extract(folders: tuple[Path, ...]) -> list[tuple[str, int, str | tuple[str, ...]]]:
    method_map, options = _mappings()
    found = []
    for folder in folders:
        for filename, lineno, message, _comments, _context in extract_from_dir(
                str(folder), method_map, options, keywords=DEFAULT_KEYWORDS):
            path = folder / filename
            where = (path.relative_to(ROOT) if path.is_relative_to(ROOT) else path).as_posix()
            found.append((where, lineno, message if isinstance(message, str) else tuple(message)))
    return found


def _placeholders(domain: str, text: str) -> set[str]:
    if domain == "report":  # jinja2's newstyle gettext formats with %(name)s
        return set(re.findall(r"%\((\w+)\)", text))
    return {field for _literal, field, _spec, _conv in string.Formatter().parse(text) if field is not None}


def catalogue_problems(domain: str) -> list[str]:
    """Every extracted msgid missing from the zh catalogue, untranslated, fuzzy, or with other placeholders."""
    po_path = LOCALE_DIR / "zh_CN" / "LC_MESSAGES" / f"{domain}.po"
    catalog = read_po(po_path.open("rb"))
    problems = []
    for where, line, msgid in extracted(domain):
        key = msgid if isinstance(msgid, str) else msgid[0]
        entry = catalog.get(key)
        shown = f"{where}:{line}: {key!r}"
        if entry is None:
            problems.append(f"{shown} is not in {po_path.name} (run scripts/update-catalogue.sh)")
            continue
        strings = [entry.string] if isinstance(entry.string, str) else list(entry.string)
        if entry.fuzzy or not all(strings):
            problems.append(f"{shown} has {'a fuzzy' if entry.fuzzy else 'no'} zh translation")
            continue
        sources = [msgid] if isinstance(msgid, str) else list(msgid)
        try:
            wanted = set().union(*(_placeholders(domain, s) for s in sources))
            for translated in strings:
                got = _placeholders(domain, translated)
                if got != wanted:
                    problems.append(f"{shown}: placeholders {sorted(got)} in the translation, {sorted(wanted)} "
                                    f"in the English")
        except ValueError as exc:  # an unbalanced brace: .format() would raise at run time
            problems.append(f"{shown}: {exc}")
    return problems


# -- (1) the catalogue -------------------------------------------------------------------------------------

@pytest.mark.parametrize("domain", sorted(DOMAINS))
def test_every_message_has_a_chinese_translation_with_the_same_placeholders(domain):
    problems = catalogue_problems(domain)
    assert not problems, f"{len(problems)} catalogue problem(s):\n" + "\n".join(problems[:40])


def test_the_check_catches_a_missing_or_broken_translation(tmp_path, monkeypatch):
    """The completeness check itself fails on a message nobody translated and on a dropped placeholder."""
    src = tmp_path / "grader"
    src.mkdir()
    (src / "m.py").write_text('from grader.i18n import _\n_("brand new {n}")\n_("kernels read {n} elements")\n')
    po = tmp_path / "locales" / "zh_CN" / "LC_MESSAGES"
    po.mkdir(parents=True)
    (po / "grader.po").write_text('msgid ""\nmsgstr ""\n"Content-Type: text/plain; charset=utf-8\\n"\n\n'
                                  'msgid "kernels read {n} elements"\nmsgstr "kernel 读取了若干元素"\n', "utf-8")
    monkeypatch.setitem(DOMAINS, "grader", [src])
    monkeypatch.setattr(sys.modules[__name__], "LOCALE_DIR", tmp_path / "locales")
    problems = catalogue_problems("grader")
    assert any("m.py:2: 'brand new {n}' is not in grader.po" in p for p in problems), problems
    assert any("m.py:3" in p and "placeholders [] in the translation, ['n']" in p for p in problems), problems


def test_the_catalogues_are_not_empty_and_compile():
    sizes = {domain: len(extracted(domain)) for domain in DOMAINS}
    assert sizes["grader"] > 250, sizes
    zh = translations("zh")
    assert zh.gettext("wrong answer") == "答案错误"
    assert translations("en").gettext("wrong answer") == "wrong answer"


def test_english_is_the_source_text_and_chinese_reads_as_chinese():
    assert verdict_label(Verdict.WRONG_ANSWER) == "wrong answer"
    assert ngettext("{n} case affected.", "{n} cases affected.", 2).format(n=2) == "2 cases affected."
    assert _("") == ""  # not the catalogue header
    with use_language("zh"):
        labels = [verdict_label(v) for v in Verdict]
        assert all(_HAN.search(label) for label in labels), labels
        assert len(set(labels)) == len(labels)
        assert ngettext("{n} case affected.", "{n} cases affected.", 2).format(n=2) == "共影响 2 个用例。"
        assert _("") == ""
    assert verdict_label(Verdict.PASSED) == "passed"  # the block restored English


def test_a_thread_speaks_the_language_it_was_started_in_only_when_carried():
    """A new thread starts in the default context (English): a callback or thread target that words messages
    is wrapped with carry_language where it is handed over."""
    import threading

    heard: dict[str, str] = {}

    def word(name: str) -> None:
        heard[name] = verdict_label(Verdict.WRONG_ANSWER)

    with use_language("zh"):
        for name, target in (("bare", word), ("carried", carry_language(word))):
            thread = threading.Thread(target=target, args=(name,))
            thread.start()
            thread.join()
    assert heard == {"bare": "wrong answer", "carried": "答案错误"}


def test_pages_declare_the_active_language(tmp_path):
    """`<html lang>` of the report and of the class dashboard follow the language they are written in."""
    from grader.batch.dashboard import class_stats, render_dashboard
    from tests.reporting import samples

    assert html_lang("zh") == "zh-CN" and html_lang("en") == "en"
    for lang, tag in (("en", "en"), ("zh", "zh-CN")):
        with use_language(lang):
            page = render_dashboard(class_stats([], assignment_title="sigmoid", backend="emu", seed_mode="public"))
        assert f'<html lang="{tag}">' in page
        result = samples.failing_matmul()
        result.lang = lang
        from grader.reporting import render_report_html

        assert f'<html lang="{tag}">' in render_report_html(result)


# -- (2) which language ---------------------------------------------------------------------------------------

@pytest.mark.parametrize(("cli", "assignment", "environ", "expected"), [
    ("en", "zh", {"LANG": "zh_CN.UTF-8"}, "en"),  # the flag wins
    (None, "zh", {"LANG": "en_US.UTF-8"}, "zh"),  # then the instructor's assignment.toml
    (None, "en", {"LANG": "zh_CN.UTF-8"}, "en"),
    (None, None, {"LANG": "zh_CN.UTF-8"}, "zh"),  # then the locale
    (None, None, {"LC_ALL": "en_US.UTF-8", "LANG": "zh_CN.UTF-8"}, "en"),  # LC_ALL before LANG
    (None, None, {"LC_MESSAGES": "zh_TW.UTF-8", "LANG": "C"}, "zh"),
    (None, None, {"LANG": "C.UTF-8"}, "en"),
    (None, None, {}, "en"),
])
def test_language_resolution_order(cli, assignment, environ, expected):
    assert resolve_language(cli, assignment, environ) == expected


def test_an_unknown_language_is_refused_where_it_is_given(tmp_path):
    with pytest.raises(ValueError, match="choose one of en, zh"):
        resolve_language("fr", None, {})
    spec = (ROOT / "assignments" / "sigmoid" / "assignment.toml").read_text()
    bad = tmp_path / "sigmoid"
    bad.mkdir()
    (bad / "assignment.toml").write_text('lang = "fr"\n' + spec)
    with pytest.raises(SpecError, match="lang"):
        load_assignment(str(bad))
    (bad / "assignment.toml").write_text('lang = "zh"\n' + spec)
    assert load_assignment(str(bad)).lang == "zh"
    assert set(LANGUAGES) == {"en", "zh"}
    proc = subprocess.run([sys.executable, "-m", "grader.cli", "submit", str(tmp_path), "--lang", "fr"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "--lang must be one of en, zh" in proc.stderr


# -- (3) a real grading in each language ---------------------------------------------------------------------

TAIL_DROPPED = ROOT / "reference_kernels" / "known_bad" / "tail_dropped"


def _submit(lang: str, out: Path) -> tuple[subprocess.CompletedProcess, dict]:
    from tests.e2e.conftest import BUILD_CACHE, e2e_sandbox

    proc = subprocess.run([sys.executable, "-m", "grader.cli", "submit", str(TAIL_DROPPED), "--lang", lang,
                           "--out", str(out), "--json", "--sandbox", e2e_sandbox(), "--build-cache", str(BUILD_CACHE),
                           "--stages", "vector", "--no-setup"],
                          capture_output=True, text=True, timeout=1500, cwd=ROOT,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(Path.home()), "LANG": "C.UTF-8"})
    assert proc.stdout.strip(), proc.stderr[-4000:]
    return proc, json.loads((out / "results.json").read_text())


@pytest.mark.slow
def test_a_failing_submission_graded_in_chinese_and_in_english(tmp_path):
    zh_proc, zh = _submit("zh", tmp_path / "zh")
    en_proc, en = _submit("en", tmp_path / "en")
    assert zh["verdict"] == en["verdict"] == "wrong_answer" and zh["score"] == en["score"]
    assert (zh["lang"], en["lang"]) == ("zh", "en")
    # results.json: the grading's own messages
    failing_zh = [c for c in zh["cases"] if not c["passed"]]
    failing_en = [c for c in en["cases"] if not c["passed"]]
    assert failing_zh and all("从未被写入" in c["message"] for c in failing_zh), failing_zh[0]["message"]
    assert all("never written" in c["message"] for c in failing_en)  # "1 of 1 ... was", "2 of 2 ... were"
    assert "个用例正确" in zh["message"] and "cases correct" in en["message"]
    vector_zh = next(s for s in zh["stages"] if s["name"] == "vector")
    assert "结果尚不正确" in vector_zh["message"]
    # the terminal summary
    assert "评测结果：" in zh_proc.stderr and "答案错误" in zh_proc.stderr and "得分：" in zh_proc.stderr
    assert "verdict:" not in zh_proc.stderr and "wrong answer" not in zh_proc.stderr
    assert "verdict:" in en_proc.stderr and "wrong answer" in en_proc.stderr and "score:" in en_proc.stderr
    assert not _HAN.search(en_proc.stderr) and not _HAN.search(en["message"])
    assert zh_proc.returncode == en_proc.returncode == 1
