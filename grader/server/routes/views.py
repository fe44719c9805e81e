"""What the API and the pages show, over HTTP: submissions, a result and its report (as the viewer may see
them), the leaderboard, the dashboards, a submission's code, and the live pages' event stream."""

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Annotated
from urllib.parse import urlencode

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response, StreamingResponse

from grader.i18n import LANGUAGES, _
from grader.server import views
from grader.server.counting import POLICY_WORDS
from grader.server.db import Database, Student
from grader.server.routes.web import (
    TEMPLATES,
    ApiUser,
    Db,
    Instructor,
    PageUser,
    check_csrf,
    need_instructor,
    page_language,
    render,
)
from grader.server.workers import QueuePlace, queue_depth, queue_place, queues

LIVE_SECONDS = 600  # one event stream's life; the browser's EventSource reconnects by itself

router = APIRouter()


@router.get("/api/submissions")
def my_submissions(db: Db, user: ApiUser) -> list[dict]:
    return [v.as_json() for v in views.submissions(db, None if user.role == "instructor" else user)]


@router.get("/api/submissions/{submission_id}")
def status(submission_id: int, db: Db, user: ApiUser) -> dict:
    """A submission's state; while queued or grading, its place in the queue (position, live workers, an estimate
    of the seconds until its result, the device type it waits for when no live worker serves it)."""
    view, counting = views.status_of(db, submission_id, user)
    place = queue_place(db, submission_id) if view.status in ("queued", "running") else QueuePlace()
    return {**view.as_json(), **place.as_json(), "counting": counting}


@router.post("/api/submissions/{submission_id}/choose")
def choose_api(submission_id: int, db: Db, user: ApiUser) -> dict:
    """The student chooses this graded final submission to count (an assignment whose policy is `chosen`)."""
    views.choose(db, submission_id, user)
    return {"counting": views.counting_of(db, submission_id, user)}


@router.post("/submissions/{submission_id}/choose")
def choose_page(request: Request, submission_id: int, db: Db, csrf: Annotated[str, Form()],
                user: PageUser) -> Response:
    check_csrf(request, csrf)
    views.choose(db, submission_id, user)
    return RedirectResponse("/", status_code=303)


@router.get("/api/submissions/{submission_id}/result")
def result(submission_id: int, db: Db, user: ApiUser) -> Response:
    return Response(views.result_of(db, submission_id, user)[0], media_type="application/json")


@router.get("/api/submissions/{submission_id}/history")
def history(submission_id: int, db: Db, user: Instructor) -> list[dict]:
    """Every committed grading of a submission (its regrades' superseded results, then the one that counts)."""
    return views.grading_history(db, submission_id, user)


@router.get("/api/submissions/{submission_id}/report")
def report(submission_id: int, db: Db, user: ApiUser, lang: str | None = None) -> HTMLResponse:
    """The report, in the language it was graded in, or in `?lang=` (en, zh)."""
    return HTMLResponse(views.result_of(db, submission_id, user, lang if lang in LANGUAGES else None)[1])


@router.get("/api/dashboard")
def dashboard_api(db: Db, _user: Instructor) -> dict:
    return {"queue_depth": queue_depth(db), "queues": [q.as_json() for q in queues(db)],
            "submissions": [v.as_json() for v in views.submissions(db)]}


@router.get("/api/leaderboard/{assignment}")
def leaderboard_api(assignment: str, db: Db, user: ApiUser) -> dict:
    return {stage: [row.__dict__ for row in rows] for stage, rows in views.leaderboard(db, assignment, user).items()}


@router.get("/", response_class=HTMLResponse)
def home(request: Request, db: Db, user: PageUser) -> HTMLResponse:
    hidden = views.hidden_notices(db)  # worded in the page's language (LanguageMiddleware)
    policy_words = {p: _(words) for p, words in POLICY_WORDS.items()}
    return render(request, "student.html.j2", user=user, rows=views.with_places(db, views.submissions(db, user)),
                  assignments=[a for a in views.assignments(db) if a.open], hidden=hidden, policy_words=policy_words)


@router.get("/submissions/{submission_id}/report", response_class=HTMLResponse)
def report_page(request: Request, submission_id: int, db: Db, user: PageUser) -> HTMLResponse:
    """The report in the page's language (?lang=, the session's, the browser's), whatever the worker graded in."""
    return HTMLResponse(views.result_of(db, submission_id, user, page_language(request))[1])


@router.get("/leaderboard/{assignment}", response_class=HTMLResponse)
def board(request: Request, assignment: str, db: Db, user: PageUser) -> HTMLResponse:
    return render(request, "leaderboard.html.j2", user=user, assignment=assignment,
                  stages=views.leaderboard(db, assignment, user), hidden=views.hides_cases_of(db, assignment, user))


@router.get("/instructor", response_class=HTMLResponse)
def dashboard(request: Request, db: Db, user: PageUser, assignment: str = "", status: str = "", late: str = "",
              page: int = 1) -> HTMLResponse:
    """The class dashboard: the assignments (with adding one, their background jobs and exports), the queues,
    and the class's submissions filtered (assignment, status, late) a page at a time."""
    need_instructor(user)
    return _class_page(request, db, user, None, assignment=assignment, status=status, late=late, page=page)


@router.get("/instructor/students/{student_id}", response_class=HTMLResponse)
def student_page(request: Request, student_id: str, db: Db, user: PageUser, status: str = "", late: str = "",
                 page: int = 1) -> HTMLResponse:
    """Every submission of one student (filtered by status and late, a page at a time)."""
    need_instructor(user)
    return _class_page(request, db, user, views.student_of(db, student_id), status=status, late=late, page=page)


def _class_page(request: Request, db: Database, user: Student, student: Student | None, *, status: str, late: str,
                page: int, assignment: str = "") -> HTMLResponse:
    from grader.server.devices import device_types
    from grader.server.jobs import recent_jobs
    from grader.spec.loader import available_assignments

    filters = {"assignment": assignment, "status": status if status in views.STATUSES else "",
               "late": late if late in ("0", "1") else ""}
    shown = views.class_page(db, assignment=filters["assignment"] or None, status=filters["status"] or None,
                             late={"1": True, "0": False}.get(filters["late"]),
                             student=student.student_id if student else None, page=page)

    def page_url(number: int) -> str:
        return f"{request.url.path}?{urlencode({**{k: v for k, v in filters.items() if v}, 'page': number})}"

    listed = views.assignments(db) if student is None else []
    running = recent_jobs(db) if student is None else []
    return render(request, "instructor.html.j2", user=user, student=student, shown=shown, filters=filters,
                  statuses=views.STATUSES, prev_url=page_url(shown.page - 1) if shown.page > 1 else "",
                  next_url=page_url(shown.page + 1) if shown.page < shown.pages else "",
                  depth=queue_depth(db), assignments=listed, queues=queues(db) if student is None else [],
                  jobs=running, openings={j.assignment: j for j in reversed(running) if j.active},
                  device_types=device_types(),
                  available=[n for n in available_assignments() if n not in {a.name for a in listed}])


@router.get("/submissions/{submission_id}/code", response_class=HTMLResponse)
def code_page(request: Request, submission_id: int, db: Db, user: PageUser) -> HTMLResponse:
    files, notes = views.code_of(db, submission_id, user)  # a student's own only: another's is a 404
    return render(request, "code.html.j2", user=user, submission=submission_id, files=files, notes=notes)


@router.get("/events")
async def events(request: Request, db: Db, user: PageUser) -> StreamingResponse:
    """Server-sent events for the pages' live refresh (live.js): the change stamp of what the page shows,
    sent when it changes (polled once a second; a comment every 15 s keeps proxies from closing it)."""
    whose = None if user.role == "instructor" else user

    async def stream() -> AsyncIterator[str]:
        last, quiet, started = None, 0, time.monotonic()
        while time.monotonic() - started < LIVE_SECONDS and not await request.is_disconnected():
            stamp = await asyncio.to_thread(views.change_stamp, db, whose)
            if stamp != last:
                last, quiet = stamp, 0
                yield f"data: {stamp}\n\n"
            elif (quiet := quiet + 1) % 15 == 0:
                yield ": still here\n\n"
            await asyncio.sleep(1.0)

    return StreamingResponse(stream(), media_type="text/event-stream", headers={"Cache-Control": "no-store"})


@router.get("/live.js")
def live_js(_user: PageUser) -> Response:
    return Response((TEMPLATES / "live.js").read_text(), media_type="text/javascript",
                    headers={"Cache-Control": "no-store"})
