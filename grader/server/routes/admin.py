"""The course's administration over HTTP, instructors only: an assignment's state and changes (open through the
reference-seed guard, close, release, deadline and rates) from the API and the dashboard's buttons, a
regrade, a roster's accounts, the class's code similarity."""

import io
import tempfile
import zipfile
from datetime import datetime
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, File, Form, HTTPException, Request, UploadFile
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from pydantic import BaseModel, Field

from grader.i18n import _
from grader.server import admin, jobs
from grader.server.accounts import import_roster
from grader.server.db import Database
from grader.server.routes.web import (
    ApiUser,
    Db,
    Instructor,
    PageUser,
    Queue,
    check_csrf,
    need_instructor,
    render,
)
from grader.server.views import assignments

router = APIRouter()


class AssignmentChange(BaseModel):
    """An instructor's change to an assignment (each field given): open or close it (opening runs the
    reference-seed guard first, once per seed; closing releases its hidden cases), release its hidden cases,
    its deadline, late window and penalty, hourly rate, what counts."""

    open: bool | None = None
    release: bool | None = None
    due: datetime | None = None
    late_hours: float | None = Field(None, ge=0)
    late_penalty: float | None = Field(None, ge=0, le=1)
    per_hour: int | None = Field(None, ge=0)
    counts: str | None = None  # latest, best or chosen (counting.POLICIES)


class RegradeChoice(BaseModel):
    """How a regrade replays the kernels: `engine` None, on the default engine; "native", natively (the course
    staff's resolution of a result held for review; admin.REGRADE_ENGINES); anything else is refused (400)."""

    engine: str | None = None




def _start_open(request: Request, db: Database, name: str) -> int:
    """Opening `name` as a background job (jobs.start_open) with the server's sandbox and reference kernels."""
    return jobs.start_open(db, name, admin.open_assignment, request.app.state.sandbox,
                           reference_root=request.app.state.reference_root)


@router.post("/api/submissions/{submission_id}/regrade")
def regrade_api(submission_id: int, db: Db, enqueue: Queue, _user: Instructor,
                choice: RegradeChoice | None = None) -> dict:
    """Grades the submission again as its next generation; the body's `engine` ("native": after reviewing a
    result held for review) is how its replay runs, none the default engine."""
    engine = choice.engine if choice is not None else None
    admin.regrade(db, submission_id, enqueue, engine)
    return {"id": submission_id, "status": "queued", "engine": engine}


@router.post("/api/roster")
async def roster(db: Db, file: Annotated[UploadFile, File()], _user: Instructor) -> dict:
    with tempfile.TemporaryDirectory(prefix="roster-") as scratch:
        path = Path(scratch) / "roster.csv"
        path.write_bytes(await file.read(4 << 20))
        return {"tokens": import_roster(db, path)}


@router.get("/api/assignments")
def assignments_api(db: Db, user: ApiUser) -> list[dict]:
    """Every assignment's state for an instructor; the open ones, as a student is told of them, for a student
    (grade submit --server URL --list, and the late warning before an upload)."""
    if user.role != "instructor":
        return [a.student_json() for a in assignments(db) if a.open]
    return [a.as_json() for a in assignments(db)]


@router.post("/api/assignments/{name}")
def change_assignment(request: Request, name: str, change: AssignmentChange, db: Db, _user: Instructor) -> dict:
    """The assignment's state after the change; opening starts a background job (its reference-seed guard), the
    answer's `job` (its id: /api/jobs/{id} follows it; the assignment is open once it is done)."""
    admin.set_policy(db, name, due=change.due.timestamp() if change.due else None,
                     late_hours=change.late_hours, late_penalty=change.late_penalty, per_hour=change.per_hour,
                     counts=change.counts)
    if change.release:
        admin.release(db, name)
    started = None
    if change.open is False:
        admin.close_assignment(db, name)
    elif change.open:
        started = _start_open(request, db, name)
    return {**next(a.as_json() for a in assignments(db) if a.name == name), "job": started}


@router.get("/api/jobs/{job_id}")
def job_api(job_id: int, db: Db, _user: Instructor) -> dict:
    """A background job's state and progress (jobs.JobView)."""
    return jobs.job(db, job_id).as_json()


@router.get("/instructor/similarity/{assignment}", response_class=HTMLResponse)
def similarity_page(request: Request, assignment: str, db: Db, user: PageUser) -> HTMLResponse:
    need_instructor(user)
    return render(request, "similarity.html.j2", user=user, assignment=assignment,
                  report=admin.similarity(db, assignment))


@router.post("/instructor/assignments/{name}/{action}")
def assignment_page(request: Request, name: str, action: str, db: Db, csrf: Annotated[str, Form()],
                    user: PageUser) -> Response:
    """The dashboard's buttons: open (a background job: the reference-seed guard first, its progress on the
    dashboard; the button returns at once), close (releases the hidden cases too), release the hidden cases."""
    check_csrf(request, csrf)
    need_instructor(user)
    if action == "open":
        _start_open(request, db, name)
    elif action == "close":
        admin.close_assignment(db, name)
    elif action == "release":
        admin.release(db, name)
    else:
        raise HTTPException(404, _("no such action"))
    return RedirectResponse("/instructor", status_code=303)


@router.post("/instructor/assignments")
def add_assignment_page(request: Request, db: Db, csrf: Annotated[str, Form()], user: PageUser,
                        name: Annotated[str, Form()], device: Annotated[str, Form()] = "") -> Response:
    """The dashboard's Add form: an assignment of this grader (a spec under assignments/) on the server, with a
    fresh secret seed, closed until the instructor opens it (its reference-seed guard first)."""
    check_csrf(request, csrf)
    need_instructor(user)
    admin.ensure_assignment(db, name, device=device or None)
    return RedirectResponse("/instructor", status_code=303)


@router.get("/instructor/export/{name}.zip")
def export_page(name: str, db: Db, user: PageUser) -> Response:
    """The dashboard's export: admin.export_finals (gradebook, Canvas, Gradescope, per-student reports of each
    student's counted final) as one zip download."""
    need_instructor(user)
    if name not in {a.name for a in assignments(db)}:
        raise HTTPException(404, _("no assignment {name!r} on this server").format(name=name))
    with tempfile.TemporaryDirectory(prefix="export-") as scratch:
        out = Path(scratch) / name
        admin.export_finals(db, name, out)
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
            for path in sorted(out.rglob("*")):
                if path.is_file():
                    zf.write(path, Path(name) / path.relative_to(out))
    return Response(buf.getvalue(), media_type="application/zip",
                    headers={"Content-Disposition": f'attachment; filename="{name}-export.zip"'})


@router.post("/instructor/regrade/{submission_id}")
def regrade_page(request: Request, submission_id: int, db: Db, enqueue: Queue, csrf: Annotated[str, Form()],
                 user: PageUser, engine: Annotated[str, Form()] = "", back: Annotated[str, Form()] = "") -> Response:
    """The dashboard's Regrade and "Regrade natively (after review)" buttons (`engine` native); back to the page
    the button was on (the dashboard or a student's page)."""
    check_csrf(request, csrf)
    need_instructor(user)
    admin.regrade(db, submission_id, enqueue, engine or None)
    return RedirectResponse(back if back.startswith("/instructor") else "/instructor", status_code=303)
