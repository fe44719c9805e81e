"""The HTTP side of the course server (FastAPI on uvicorn): the JSON API `grade submit --server` talks to,
authenticated by a bearer token, and the web pages (a student's submissions and reports, the instructor's
dashboard, the leaderboard), authenticated by a signed session cookie, with a CSRF token on every form.

Every route but the login form needs an account; a student sees only their own submissions (another's id
answers 404, as a missing one). The routes are grader.server.routes, one router per concern; what they do is
the concern's module of grader.server (accounts, intake, views, workers, admin).
"""

from __future__ import annotations

import math
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, RedirectResponse, Response
from starlette.exceptions import HTTPException
from starlette.middleware.sessions import SessionMiddleware

from grader.i18n import _
from grader.server.db import Database
from grader.server.intake import Enqueue
from grader.server.policy import Refused, malformed
from grader.server.routes import accounts, admin, intake, views
from grader.server.routes.web import LanguageMiddleware, render

SESSION_COOKIE = "bang_grader_session"


def create_app(db: Database, enqueue: Enqueue, secret_key: str, *, https_only: bool = False, sandbox: str = "auto",
               reference_root: Path | None = None) -> FastAPI:
    """The server's ASGI app on `db`; `enqueue` hands a submission id to the queue. `sandbox` and
    `reference_root` (default reference_kernels/): where an assignment being opened has its references graded."""
    app = FastAPI(title="bang-grader course server", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.db, app.state.enqueue = db, enqueue  # what the routes' dependencies hand them (routes.web)
    app.state.sandbox, app.state.reference_root = sandbox, reference_root
    app.add_middleware(LanguageMiddleware)  # added first: inside the session middleware, whose session it reads
    app.add_middleware(SessionMiddleware, secret_key=secret_key, session_cookie=SESSION_COOKIE,
                       same_site="strict", https_only=https_only, max_age=12 * 3600)
    app.exception_handler(Refused)(_refused)
    app.exception_handler(RequestValidationError)(_malformed)
    app.exception_handler(HTTPException)(_http)
    for concern in (accounts, intake, views, admin):
        app.include_router(concern.router)
    return app


def _error(request: Request, message: str, status: int, headers: dict[str, str] | None = None) -> Response:
    """The API's JSON error, or a page's HTML error page (in the page's language) on a page route."""
    if request.url.path.startswith("/api/"):
        return JSONResponse({"error": message}, status_code=status, headers=headers)
    page = render(request, "error.html.j2", status=status, message=message)
    page.status_code = status
    if headers:
        page.headers.update(headers)
    return page


async def _refused(request: Request, exc: Refused) -> Response:
    """A refusal (JSON, or an error page); a 429 (or any refusal that says when to ask again) carries
    Retry-After."""
    retry = exc.retry_after if exc.retry_after is not None else (60.0 if exc.status == 429 else None)
    headers = None if retry is None else {"Retry-After": str(max(1, math.ceil(retry)))}
    return _error(request, str(exc), exc.status, headers)


async def _malformed(request: Request, exc: RequestValidationError) -> Response:
    fields = sorted({".".join(str(p) for p in e.get("loc", ())[1:]) or "body" for e in exc.errors()})
    return await _refused(request, malformed(fields))


async def _http(request: Request, exc: HTTPException) -> Response:
    if exc.status_code == 401 and not request.url.path.startswith("/api/"):
        return RedirectResponse("/login", status_code=303)
    detail = exc.detail if exc.status_code != 404 or exc.detail != "Not Found" else _("no such page")
    return _error(request, detail, exc.status_code, exc.headers)
