"""The upload over HTTP: `grade submit --server` posts a submission's archive (intake.take_submission decides)
and hears its id, its place in the queue and the device type it waits for."""

from typing import Annotated

from fastapi import APIRouter, File, Form, Request, UploadFile

from grader.i18n import current_language
from grader.server.intake import take_submission
from grader.server.routes.web import ApiUser, Db, Queue
from grader.server.uploads import MAX_UPLOAD_BYTES
from grader.server.workers import queue_position, waiting_for

router = APIRouter()


@router.post("/api/submissions", status_code=201)
async def upload(request: Request, db: Db, enqueue: Queue, assignment: Annotated[str, Form()], mode: Annotated[str, Form()],
                 archive: Annotated[UploadFile, File()], user: ApiUser,
                 device: Annotated[str | None, Form()] = None) -> dict:
    data = await archive.read(MAX_UPLOAD_BYTES + 1)
    # graded in the student's language when the request states one (grade submit --server sends its --lang or
    # locale); else the assignment's, as before
    stated = "lang" in request.query_params or "accept-language" in request.headers
    sub = take_submission(db, user, assignment, mode, data, enqueue, device=device or None,
                          lang=current_language() if stated else None)
    return {"id": sub.id, "position": queue_position(db, sub.id), "device_type": sub.device_type,
            "waiting_for": waiting_for(db, sub.id)}
