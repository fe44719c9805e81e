"""The HTTP side of the course server (FastAPI on uvicorn): the JSON API `grade submit --server` talks to,
authenticated by a bearer token, and the web pages (a student's submissions and reports, the instructor's
dashboard, the leaderboard), authenticated by a signed session cookie, with a CSRF token on every form.

Every route but the login form needs an account; a student sees only their own submissions (another's id
answers 404, as a missing one). What the routes do is grader.server.service; this module maps it to HTTP.
No `from __future__ import annotations` here: FastAPI reads the routes' annotations, which name closures.
"""


import asyncio
import hmac
import secrets
import time
from collections.abc import AsyncIterator
from datetime import datetime
from functools import cache
from pathlib import Path
from typing import Annotated

import jinja2
from fastapi import Depends, FastAPI, File, Form, HTTPException, Request, UploadFile
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response, StreamingResponse
from pydantic import BaseModel, Field
from starlette.middleware.sessions import SessionMiddleware

from grader.i18n import LANGUAGES, _, install_jinja, use_language
from grader.results import Verdict, verdict_label
from grader.server import service
from grader.server.db import PHASES, Database, Student
from grader.server.service import Enqueue, Refused
from grader.server.uploads import MAX_UPLOAD_BYTES

TEMPLATES = Path(__file__).resolve().parents[2] / "reports" / "templates" / "server"


class AssignmentChange(BaseModel):
    """An instructor's change to an assignment (each field given): open or close it (opening runs the
    reference-seed guard first, once per seed; closing releases its hidden cases), release its hidden cases,
    its deadline, late window and penalty, hourly rate."""

    open: bool | None = None
    release: bool | None = None
    due: datetime | None = None
    late_hours: float | None = Field(None, ge=0)
    late_penalty: float | None = Field(None, ge=0, le=1)
    per_hour: int | None = Field(None, ge=0)
SESSION_COOKIE = "bang_grader_session"
LIVE_SECONDS = 600  # one event stream's life; the browser's EventSource reconnects by itself


@cache
def _templates(lang: str) -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True,
                             undefined=jinja2.StrictUndefined, extensions=["jinja2.ext.i18n"])
    install_jinja(env, lang)
    env.globals["phases"] = PHASES
    env.filters["verdict"] = lambda v: verdict_label(Verdict(v)) if v else ""  # in the page's language
    env.filters["clock"] = lambda t: "" if t is None else time.strftime("%H:%M:%S", time.localtime(t))
    env.filters["date"] = lambda t: "" if t is None else time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(t))
    return env


def page_language(request: Request) -> str:
    """?lang= (remembered in the session), else the session's, else the browser's Accept-Language."""
    asked = request.query_params.get("lang")
    if asked in LANGUAGES:
        request.session["lang"] = asked
    if request.session.get("lang") in LANGUAGES:
        return request.session["lang"]
    return "zh" if request.headers.get("accept-language", "").lower().startswith("zh") else "en"


def create_app(db: Database, enqueue: Enqueue, secret_key: str, *, https_only: bool = False) -> FastAPI:
    """The server's ASGI app on `db`; `enqueue` hands a submission id to the queue."""
    app = FastAPI(title="bang-grader course server", docs_url=None, redoc_url=None, openapi_url=None)
    app.add_middleware(SessionMiddleware, secret_key=secret_key, session_cookie=SESSION_COOKIE,
                       same_site="strict", https_only=https_only, max_age=12 * 3600)

    @app.exception_handler(Refused)
    async def _refused(_request: Request, exc: Refused) -> JSONResponse:
        return JSONResponse({"error": str(exc)}, status_code=exc.status)

    @app.exception_handler(RequestValidationError)
    async def _malformed(_request: Request, exc: RequestValidationError) -> JSONResponse:
        fields = sorted({".".join(str(p) for p in e.get("loc", ())[1:]) or "body" for e in exc.errors()})
        return JSONResponse({"error": _("malformed request: missing or invalid {fields}").format(
            fields=", ".join(fields))}, status_code=400)

    # ------------------------------------------------------------------------------------------ accounts
    def api_user(request: Request) -> Student:
        scheme, _sep, token = request.headers.get("authorization", "").partition(" ")
        user = service.authenticate(db, token.strip()) if scheme.lower() == "bearer" else None
        if user is None:
            raise HTTPException(401, _("missing or wrong token"), headers={"WWW-Authenticate": "Bearer"})
        return user

    def instructor(user: Annotated[Student, Depends(api_user)]) -> Student:
        if user.role != "instructor":
            raise HTTPException(403, _("instructors only"))
        return user

    def page_user(request: Request) -> Student | None:
        token = request.session.get("token_hash")
        if not token:
            return None
        with db.session() as s:
            from sqlalchemy import select

            return s.scalar(select(Student).where(Student.token_hash == token))

    def check_csrf(request: Request, csrf: str) -> None:
        expected = request.session.get("csrf", "")
        if not expected or not hmac.compare_digest(expected, csrf):
            raise HTTPException(403, _("the form expired or did not come from this site; reload the page"))

    def render(request: Request, name: str, **context: object) -> HTMLResponse:
        lang = page_language(request)
        request.session.setdefault("csrf", secrets.token_urlsafe(24))
        with use_language(lang):
            html = _templates(lang).get_template(name).render(lang=lang, csrf=request.session["csrf"],
                                                              path=request.url.path, **context)
        return HTMLResponse(html, headers={"Content-Security-Policy": "default-src 'self'; style-src 'unsafe-inline'",
                                           "X-Frame-Options": "DENY"})

    @app.exception_handler(HTTPException)
    async def _http(request: Request, exc: HTTPException) -> Response:
        if request.url.path.startswith("/api/"):
            return JSONResponse({"error": exc.detail}, status_code=exc.status_code, headers=exc.headers)
        if exc.status_code == 401:
            return RedirectResponse("/login", status_code=303)
        return JSONResponse({"error": exc.detail}, status_code=exc.status_code)

    # --------------------------------------------------------------------------------------------- API
    @app.get("/api/me")
    def me(user: Annotated[Student, Depends(api_user)]) -> dict:
        return {"student_id": user.student_id, "name": user.name, "role": user.role}

    @app.post("/api/submissions", status_code=201)
    async def upload(request: Request, assignment: Annotated[str, Form()], mode: Annotated[str, Form()],
                     archive: Annotated[UploadFile, File()], user: Annotated[Student, Depends(api_user)],
                     device: Annotated[str | None, Form()] = None) -> dict:
        data = await archive.read(MAX_UPLOAD_BYTES + 1)
        sub = service.take_submission(db, user, assignment, mode, data, enqueue, device=device or None)
        return {"id": sub.id, "position": service.queue_position(db, sub.id), "device_type": sub.device_type,
                "waiting_for": service.waiting_for(db, sub.id)}

    @app.get("/api/submissions")
    def my_submissions(user: Annotated[Student, Depends(api_user)]) -> list[dict]:
        return [v.as_json() for v in service.submissions(db, None if user.role == "instructor" else user)]

    @app.get("/api/submissions/{submission_id}")
    def status(submission_id: int, user: Annotated[Student, Depends(api_user)]) -> dict:
        view = service.submission_of(db, submission_id, user)
        return {**view.as_json(), "position": service.queue_position(db, submission_id),
                "waiting_for": service.waiting_for(db, submission_id)}

    @app.get("/api/submissions/{submission_id}/result")
    def result(submission_id: int, user: Annotated[Student, Depends(api_user)]) -> Response:
        return Response(service.result_of(db, submission_id, user)[0], media_type="application/json")

    @app.get("/api/submissions/{submission_id}/report")
    def report(submission_id: int, user: Annotated[Student, Depends(api_user)]) -> HTMLResponse:
        return HTMLResponse(service.result_of(db, submission_id, user)[1])

    @app.post("/api/submissions/{submission_id}/regrade")
    def regrade_api(submission_id: int, _user: Annotated[Student, Depends(instructor)]) -> dict:
        service.regrade(db, submission_id, enqueue)
        return {"id": submission_id, "status": "queued"}

    @app.post("/api/roster")
    async def roster(file: Annotated[UploadFile, File()], _user: Annotated[Student, Depends(instructor)]) -> dict:
        import tempfile

        with tempfile.TemporaryDirectory(prefix="roster-") as scratch:
            path = Path(scratch) / "roster.csv"
            path.write_bytes(await file.read(4 << 20))
            return {"tokens": service.import_roster(db, path)}

    @app.get("/api/assignments")
    def assignments_api(_user: Annotated[Student, Depends(instructor)]) -> list[dict]:
        return [a.as_json() for a in service.assignments(db)]

    @app.post("/api/assignments/{name}")
    def change_assignment(name: str, change: AssignmentChange,
                          _user: Annotated[Student, Depends(instructor)]) -> dict:
        service.set_policy(db, name, due=change.due.timestamp() if change.due else None,
                           late_hours=change.late_hours, late_penalty=change.late_penalty, per_hour=change.per_hour)
        if change.release:
            service.release(db, name)
        if change.open is False:
            service.close_assignment(db, name)
        elif change.open:
            check = service.open_assignment(db, name)
            if check.failures:
                raise Refused(check.message, 409)
        return next(a.as_json() for a in service.assignments(db) if a.name == name)

    @app.get("/api/dashboard")
    def dashboard_api(_user: Annotated[Student, Depends(instructor)]) -> dict:
        return {"queue_depth": service.queue_depth(db), "queues": [q.as_json() for q in service.queues(db)],
                "submissions": [v.as_json() for v in service.submissions(db)]}

    @app.get("/api/leaderboard/{assignment}")
    def leaderboard_api(assignment: str, user: Annotated[Student, Depends(api_user)]) -> dict:
        return {stage: [row.__dict__ for row in rows]
                for stage, rows in service.leaderboard(db, assignment, user).items()}

    # ------------------------------------------------------------------------------------------- pages
    @app.get("/login", response_class=HTMLResponse)
    def login_form(request: Request) -> HTMLResponse:
        return render(request, "login.html.j2", error="")

    @app.post("/login")
    def login(request: Request, token: Annotated[str, Form()], csrf: Annotated[str, Form()]) -> Response:
        check_csrf(request, csrf)
        user = service.authenticate(db, token.strip())
        if user is None:
            return render(request, "login.html.j2", error=_("wrong token"))
        lang = request.session.get("lang")
        request.session.clear()  # a fresh session (and CSRF token) on login; the language chosen stays
        request.session.update(token_hash=user.token_hash, csrf=secrets.token_urlsafe(24))
        if lang in LANGUAGES:
            request.session["lang"] = lang
        return RedirectResponse("/instructor" if user.role == "instructor" else "/", status_code=303)

    @app.post("/logout")
    def logout(request: Request, csrf: Annotated[str, Form()]) -> Response:
        check_csrf(request, csrf)
        request.session.clear()
        return RedirectResponse("/login", status_code=303)

    def need_page_user(request: Request) -> Student:
        user = page_user(request)
        if user is None:
            raise HTTPException(401)
        return user

    @app.get("/", response_class=HTMLResponse)
    def home(request: Request, user: Annotated[Student, Depends(need_page_user)]) -> HTMLResponse:
        with db.session() as s:
            from grader.server.db import Assignment

            assignments = [a.name for a in s.query(Assignment).order_by(Assignment.name)]
        with use_language(page_language(request)):  # the notices are worded here, in the page's language
            hidden = service.hidden_notices(db)
        return render(request, "student.html.j2", user=user, rows=service.submissions(db, user),
                      assignments=assignments, hidden=hidden)

    @app.get("/submissions/{submission_id}/report", response_class=HTMLResponse)
    def report_page(submission_id: int, user: Annotated[Student, Depends(need_page_user)]) -> HTMLResponse:
        return HTMLResponse(service.result_of(db, submission_id, user)[1])

    @app.post("/leaderboard/opt")
    def opt(request: Request, csrf: Annotated[str, Form()], user: Annotated[Student, Depends(need_page_user)],
            on: Annotated[str, Form()] = "0") -> Response:
        check_csrf(request, csrf)
        service.set_leaderboard(db, user, on == "1")
        return RedirectResponse("/", status_code=303)

    @app.get("/leaderboard/{assignment}", response_class=HTMLResponse)
    def board(request: Request, assignment: str, user: Annotated[Student, Depends(need_page_user)]) -> HTMLResponse:
        return render(request, "leaderboard.html.j2", user=user, assignment=assignment,
                      stages=service.leaderboard(db, assignment, user),
                      hidden=service.hides_cases_of(db, assignment, user))

    @app.get("/instructor", response_class=HTMLResponse)
    def dashboard(request: Request, user: Annotated[Student, Depends(need_page_user)]) -> HTMLResponse:
        if user.role != "instructor":
            raise HTTPException(403, _("instructors only"))
        rows = service.submissions(db)
        verdicts: dict[str, int] = {}
        for row in rows:
            if row.verdict:
                verdicts[row.verdict] = verdicts.get(row.verdict, 0) + 1
        return render(request, "instructor.html.j2", user=user, rows=rows, depth=service.queue_depth(db),
                      verdicts=verdicts, assignments=service.assignments(db), queues=service.queues(db))

    @app.get("/submissions/{submission_id}/code", response_class=HTMLResponse)
    def code_page(request: Request, submission_id: int,
                  user: Annotated[Student, Depends(need_page_user)]) -> HTMLResponse:
        files, notes = service.code_of(db, submission_id, user)  # a student's own only: another's is a 404
        return render(request, "code.html.j2", user=user, submission=submission_id, files=files, notes=notes)

    @app.get("/instructor/similarity/{assignment}", response_class=HTMLResponse)
    def similarity_page(request: Request, assignment: str,
                        user: Annotated[Student, Depends(need_page_user)]) -> HTMLResponse:
        if user.role != "instructor":
            raise HTTPException(403, _("instructors only"))
        return render(request, "similarity.html.j2", user=user, assignment=assignment,
                      report=service.similarity(db, assignment))

    @app.get("/events")
    async def events(request: Request, user: Annotated[Student, Depends(need_page_user)]) -> StreamingResponse:
        """Server-sent events for the pages' live refresh (live.js): the change stamp of what the page shows,
        sent when it changes (polled once a second; a comment every 15 s keeps proxies from closing it)."""
        whose = None if user.role == "instructor" else user

        async def stream() -> AsyncIterator[str]:
            last, quiet, started = None, 0, time.monotonic()
            while time.monotonic() - started < LIVE_SECONDS and not await request.is_disconnected():
                stamp = await asyncio.to_thread(service.change_stamp, db, whose)
                if stamp != last:
                    last, quiet = stamp, 0
                    yield f"data: {stamp}\n\n"
                elif (quiet := quiet + 1) % 15 == 0:
                    yield ": still here\n\n"
                await asyncio.sleep(1.0)

        return StreamingResponse(stream(), media_type="text/event-stream", headers={"Cache-Control": "no-store"})

    @app.get("/live.js")
    def live_js(_user: Annotated[Student, Depends(need_page_user)]) -> Response:
        return Response((TEMPLATES / "live.js").read_text(), media_type="text/javascript",
                        headers={"Cache-Control": "no-store"})

    @app.post("/instructor/assignments/{name}/{action}")
    def assignment_page(request: Request, name: str, action: str, csrf: Annotated[str, Form()],
                        user: Annotated[Student, Depends(need_page_user)]) -> Response:
        """The dashboard's buttons: open (through the reference-seed guard), close (releases the hidden
        cases too), release the hidden cases."""
        check_csrf(request, csrf)
        if user.role != "instructor":
            raise HTTPException(403, _("instructors only"))
        if action == "open":
            check = service.open_assignment(db, name)
            if check.failures:
                raise Refused(check.message, 409)
        elif action == "close":
            service.close_assignment(db, name)
        elif action == "release":
            service.release(db, name)
        else:
            raise HTTPException(404, _("no such action"))
        return RedirectResponse("/instructor", status_code=303)

    @app.post("/instructor/regrade/{submission_id}")
    def regrade_page(request: Request, submission_id: int, csrf: Annotated[str, Form()],
                     user: Annotated[Student, Depends(need_page_user)]) -> Response:
        check_csrf(request, csrf)
        if user.role != "instructor":
            raise HTTPException(403, _("instructors only"))
        service.regrade(db, submission_id, enqueue)
        return RedirectResponse("/instructor", status_code=303)

    return app
