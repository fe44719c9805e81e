"""What every route shares: the app's database and queue (create_app puts them on app.state), who is asking (a
bearer token for the API, a signed session cookie for the pages), the CSRF check of a form, and a page
rendered in its language. No `from __future__ import annotations` in the routes: FastAPI reads their
annotations."""

import hmac
import secrets
from functools import cache
from pathlib import Path
from typing import Annotated

import jinja2
from fastapi import Depends, HTTPException, Request
from fastapi.responses import HTMLResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from grader.i18n import LANGUAGES, N_, _, install_jinja, use_language
from grader.results import Verdict, verdict_label
from grader.server.accounts import authenticate, session_account
from grader.server.course_time import course_clock, course_time
from grader.server.db import PHASES, Database, Student
from grader.server.intake import Enqueue

TEMPLATES = Path(__file__).resolve().parents[3] / "reports" / "templates" / "server"
# A submission's status and mode as the pages word them (db.Submission.status, db.MODES).
STATUS_WORDS = {"queued": N_("queued"), "running": N_("running"), "done": N_("done"), "cancelled": N_("cancelled"),
                "held": N_("held for review")}  # held: the dashboard's filter (views.STATUSES)
MODE_WORDS = {"test": N_("test"), "benchmark": N_("benchmark"), "final": N_("final")}


def database(request: Request) -> Database:
    return request.app.state.db


def enqueuer(request: Request) -> Enqueue:
    """Hands a submission id to the queue (grader.server.queue.enqueue; create_app's `enqueue`)."""
    return request.app.state.enqueue


Db = Annotated[Database, Depends(database)]
Queue = Annotated[Enqueue, Depends(enqueuer)]


def api_user(request: Request, db: Db) -> Student:
    scheme, _sep, token = request.headers.get("authorization", "").partition(" ")
    user = authenticate(db, token.strip()) if scheme.lower() == "bearer" else None
    if user is None:
        raise HTTPException(401, _("missing or wrong token"), headers={"WWW-Authenticate": "Bearer"})
    return user


ApiUser = Annotated[Student, Depends(api_user)]


def instructor(user: ApiUser) -> Student:
    if user.role != "instructor":
        raise HTTPException(403, _("instructors only"))
    return user


Instructor = Annotated[Student, Depends(instructor)]


def page_user(request: Request, db: Db) -> Student:
    """The account of the page's session; else 401 (the pages answer it with a redirect to the login form)."""
    user = session_account(db, request.session.get("token_hash"))
    if user is None:
        raise HTTPException(401)
    return user


PageUser = Annotated[Student, Depends(page_user)]


def need_instructor(user: Student) -> None:
    """403 unless `user` is an instructor (a page's check, after its form's CSRF check where it has one)."""
    if user.role != "instructor":
        raise HTTPException(403, _("instructors only"))


def check_csrf(request: Request, csrf: str) -> None:
    expected = request.session.get("csrf", "")
    if not expected or not hmac.compare_digest(expected, csrf):
        raise HTTPException(403, _("the form expired or did not come from this site; reload the page"))


@cache
def _templates(lang: str) -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True,
                             undefined=jinja2.StrictUndefined, extensions=["jinja2.ext.i18n"])
    install_jinja(env, lang)
    env.globals["phases"] = PHASES
    env.filters["verdict"] = lambda v: verdict_label(Verdict(v)) if v else ""  # in the page's language
    env.filters["clock"] = lambda t: "" if t is None else course_clock(t)  # the course's time zone, its offset
    env.filters["date"] = lambda t: "" if t is None else course_time(t)
    env.filters["duration"] = duration
    env.filters["status"] = lambda v: _(STATUS_WORDS[v]) if v in STATUS_WORDS else v
    env.filters["mode"] = lambda v: _(MODE_WORDS[v]) if v in MODE_WORDS else v
    return env


def duration(seconds: float) -> str:
    """An estimate's length as the pages word it: 40 s, 3 min, 1 h 20 min (in the page's language)."""
    seconds = max(1, round(seconds))
    if seconds < 90:
        return _("{n} s").format(n=seconds)
    if seconds < 5400:
        return _("{n} min").format(n=round(seconds / 60))
    return _("{h} h {m} min").format(h=seconds // 3600, m=round(seconds % 3600 / 60))


def page_language(request: Request) -> str:
    """?lang= (remembered in the session of a page), else the session's, else Accept-Language (the browser's,
    or `grade submit --server`'s: its --lang or locale)."""
    asked = request.query_params.get("lang")
    session = request.session if "session" in request.scope else {}
    if asked in LANGUAGES:
        session["lang"] = asked
        return asked
    if session.get("lang") in LANGUAGES:
        return session["lang"]
    return "zh" if request.headers.get("accept-language", "").lower().startswith("zh") else "en"


class LanguageMiddleware:
    """Every request answered in its language (page_language): the pages, and the API's messages and refusals
    (`_()` reads the context's language). Inside the session middleware, which it reads."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        with use_language(page_language(Request(scope))):
            await self.app(scope, receive, send)


def render(request: Request, name: str, **context: object) -> HTMLResponse:
    lang = page_language(request)
    request.session.setdefault("csrf", secrets.token_urlsafe(24))
    with use_language(lang):
        html = _templates(lang).get_template(name).render(lang=lang, csrf=request.session["csrf"],
                                                          path=request.url.path, **context)
    return HTMLResponse(html, headers={"Content-Security-Policy": "default-src 'self'; style-src 'unsafe-inline'",
                                       "X-Frame-Options": "DENY"})
