"""The upload over HTTP: `grade submit --server` posts a submission's archive (intake.take_submission decides)
and hears its id, its place in the queue and the device type it waits for; a queued submission cancelled.

The body is never read whole before it is capped: a student over their refused uploads is answered before
any of it is read, a Content-Length past the cap is refused from the header (with the true size), and the
body is streamed (the form parser spools the file to a temporary file) with a running count that stops at
the cap. The archive's inspection runs in the thread pool, so the event loop serves other requests meanwhile.
"""

from typing import Annotated

from fastapi import APIRouter, Form, Request
from fastapi.responses import RedirectResponse, Response
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData, UploadFile
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import Message

from grader.i18n import current_language
from grader.server import intake
from grader.server.policy import Refused, malformed, refused_upload
from grader.server.routes.web import ApiUser, Db, PageUser, Queue, check_csrf
from grader.server.uploads import MAX_UPLOAD_BYTES, too_large
from grader.server.workers import queue_place

router = APIRouter()

# What the form adds around the archive (boundaries, the other fields): a body past MAX_UPLOAD_BYTES + this
# is refused without being read further.
FORM_SLACK_BYTES = 64 << 10


async def capped_form(request: Request, limit: int) -> FormData:
    """The request's multipart form, read with a running cap of `limit` body bytes (Refused 413 past it: by the
    Content-Length before reading, else where streaming stops)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise refused_upload(too_large(int(declared)))
    received = 0

    async def receive() -> Message:
        nonlocal received
        message = await request.receive()
        if message["type"] == "http.request":
            received += len(message.get("body", b""))
            if received > limit:
                raise refused_upload(too_large(None))
        return message

    try:
        return await Request(request.scope, receive).form(max_files=1, max_fields=8)
    except StarletteHTTPException as exc:  # the form parser's: not a multipart form
        raise malformed(["body"]) from exc


@router.post("/api/submissions", status_code=201)
async def upload(request: Request, db: Db, enqueue: Queue, user: ApiUser) -> dict:
    await run_in_threadpool(intake.check_refusals, db, user)  # 429 before a byte of the body is read
    # graded in the student's language when the request states one (grade submit --server sends its --lang or
    # locale); else the assignment's, as before. Read here: the thread pool does not see the request's language.
    stated = "lang" in request.query_params or "accept-language" in request.headers
    lang = current_language() if stated else None
    assignment = None
    try:
        form = await capped_form(request, MAX_UPLOAD_BYTES + FORM_SLACK_BYTES)
        assignment, mode, archive = form.get("assignment"), form.get("mode"), form.get("archive")
        missing = [n for n, v in (("assignment", assignment), ("mode", mode)) if not isinstance(v, str) or not v]
        if not isinstance(archive, UploadFile):
            missing.append("archive")
        if missing:
            raise malformed(missing)
        data = await archive.read(MAX_UPLOAD_BYTES + 1)
        device = form.get("device")
        sub = await run_in_threadpool(intake.take_submission, db, user, assignment, mode, data, enqueue,
                                      device if isinstance(device, str) and device else None, lang)
    except Refused as refused:
        await run_in_threadpool(intake.record_refusal, db, user,
                                assignment if isinstance(assignment, str) else None, refused)
        raise
    place = await run_in_threadpool(queue_place, db, sub.id)
    return {"id": sub.id, "device_type": sub.device_type, **place.as_json()}


@router.post("/api/submissions/{submission_id}/cancel")
def cancel_api(submission_id: int, db: Db, user: ApiUser) -> dict:
    return {"id": submission_id, "status": intake.cancel_submission(db, submission_id, user)}


@router.post("/submissions/{submission_id}/cancel")
def cancel_page(request: Request, submission_id: int, db: Db, csrf: Annotated[str, Form()],
                user: PageUser) -> Response:
    """The pages' Cancel button: back to the page it was pressed on (the student's, or the dashboard)."""
    check_csrf(request, csrf)
    intake.cancel_submission(db, submission_id, user)
    return RedirectResponse("/instructor" if user.role == "instructor" else "/", status_code=303)
