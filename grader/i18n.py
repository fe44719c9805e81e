"""Languages of student-facing text: the message catalogues and the active language.

English is the source language: every msgid is the English text, and `en` is `gettext.NullTranslations`,
so English output is exactly the literal in the code. Chinese comes from two gettext catalogues kept as
text in git (`grader/locales/zh_CN/LC_MESSAGES/{grader,report}.po`: Python's messages, and the report
templates'), compiled in memory with Babel on first use -- no `.mo` files to forget to rebuild.

Why a context variable for the active language rather than a `lang` parameter: the texts are produced
deep in the grading (checks, judge, score_stages, advice, hints) by code that otherwise has no reason to
know about languages; threading a parameter through every call would touch every signature. A grading
runs `with use_language(lang):` once at its top (the CLI, the batch worker), and `_()`/`ngettext()`
read it. ContextVar (not a global) keeps concurrent gradings in threads or tasks apart; a thread starts in
the default context (English), so code that hands a callback or a target to a thread wraps it with
`carry_language()` -- the words are then formed when they are shown, in the grading's language. Texts defined at
import time (registries, tables) are marked with `N_()` for extraction and translated with `_()` where
they are shown.

Messages with values use named placeholders, `_("read {n} elements").format(n=n)`, so a translation can
reorder them. Update the catalogue after changing messages: `scripts/update-catalogue.sh`.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import gettext
import io
import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, ParamSpec, TypeVar

if TYPE_CHECKING:
    import jinja2

LANGUAGES = ("en", "zh")
DEFAULT_LANGUAGE = "en"
LOCALE_DIR = Path(__file__).parent / "locales"
DOMAINS = ("grader", "report")  # Python's messages; the report and dashboard templates' messages
_CATALOGUE_LOCALE = {"zh": "zh_CN"}  # our language code -> the catalogue folder
_HTML_LANG = {"en": "en", "zh": "zh-CN"}  # our language code -> the BCP 47 tag of `<html lang>` (fonts, hyphenation)

P = ParamSpec("P")
R = TypeVar("R")

_active: contextvars.ContextVar[str] = contextvars.ContextVar("bang_grader_lang", default=DEFAULT_LANGUAGE)


def check_language(lang: str) -> str:
    """`lang` if supported, else ValueError naming the choices."""
    if lang not in LANGUAGES:
        raise ValueError(f"unknown language {lang!r}: choose one of {', '.join(LANGUAGES)}")
    return lang


def resolve_language(cli: str | None, assignment: str | None,
                     environ: Mapping[str, str] = os.environ) -> str:
    """The language of a grading: the CLI flag, then assignment.toml `lang` (the instructor's choice),
    then the locale (LC_ALL, LC_MESSAGES, LANG: the first one set decides, as in POSIX), else English."""
    for choice in (cli, assignment):
        if choice:
            return check_language(choice)
    for var in ("LC_ALL", "LC_MESSAGES", "LANG"):
        value = environ.get(var, "")
        if value:
            return "zh" if value.lower().startswith("zh") else DEFAULT_LANGUAGE
    return DEFAULT_LANGUAGE


def _compile(po_path: Path) -> gettext.GNUTranslations:
    from babel.messages.mofile import write_mo
    from babel.messages.pofile import read_po

    with po_path.open("rb") as fh:
        catalog = read_po(fh)
    buffer = io.BytesIO()
    write_mo(buffer, catalog, use_fuzzy=False)  # a fuzzy entry is not a translation: fall back to English
    buffer.seek(0)
    return gettext.GNUTranslations(buffer)


@functools.cache
def translations(lang: str) -> gettext.NullTranslations:
    """Both domains' messages for `lang`, merged (compiled once per process)."""
    check_language(lang)
    if lang == DEFAULT_LANGUAGE:
        return gettext.NullTranslations()
    merged: gettext.NullTranslations | None = None
    folder = LOCALE_DIR / _CATALOGUE_LOCALE[lang] / "LC_MESSAGES"
    for domain in DOMAINS:
        po_path = folder / f"{domain}.po"
        if not po_path.is_file():
            continue
        compiled = _compile(po_path)
        if merged is None:
            merged = compiled
        else:
            merged.add_fallback(compiled)
    return merged or gettext.NullTranslations()


def current_language() -> str:
    """The active language of this context (English unless a grading set one)."""
    return _active.get()


@contextlib.contextmanager
def use_language(lang: str) -> Iterator[str]:
    """Make `lang` the active language inside the block (restored after it)."""
    token = _active.set(check_language(lang))
    try:
        yield lang
    finally:
        _active.reset(token)


def carry_language(fn: Callable[P, R]) -> Callable[P, R]:
    """`fn` running in this context's language wherever it is called: a new thread starts with the default
    context (English), so a callback or thread target that words messages is wrapped before it leaves."""
    lang = _active.get()

    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        with use_language(lang):
            return fn(*args, **kwargs)

    return run


def html_lang(lang: str) -> str:
    """The `<html lang=...>` value of a page in `lang`."""
    return _HTML_LANG[check_language(lang)]


def _(message: str) -> str:
    """`message` in the active language ("" stays "": gettext would return the catalogue's header)."""
    return translations(_active.get()).gettext(message) if message else message


def ngettext(singular: str, plural: str, n: int) -> str:
    """The singular or plural form for `n`, in the active language."""
    return translations(_active.get()).ngettext(singular, plural, n)


def N_(message: str) -> str:
    """Mark a message for extraction without translating it now (import-time tables); `_()` it when shown."""
    return message


def install_jinja(env: jinja2.Environment, lang: str) -> None:
    """Give a jinja2 environment (with `jinja2.ext.i18n`) the messages of `lang` and `html_lang` (its
    `<html lang>`); newstyle gettext (`{{ _("read %(n)s elements", n=n) }}`) escapes and formats in one place."""
    env.install_gettext_translations(translations(lang), newstyle=True)
    env.globals["html_lang"] = html_lang(lang)
