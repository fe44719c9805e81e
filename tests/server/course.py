"""An in-process course server for the tests of its pages and API (the real app through Starlette's TestClient,
on SQLite or a PostgreSQL cluster started here): accounts, a live worker row for the default device type (as a
slot's heartbeat writes it), what the app queued, and page sessions logged in through the login form."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from cluster import pg_bin, start_postgres
from fastapi.testclient import TestClient

from grader.server.accounts import add_account
from grader.server.admin import ensure_assignment, set_open
from grader.server.app import create_app
from grader.server.db import Database, migrate, sqlite_url
from grader.server.devices import device_type, queue_name
from grader.server.workers import worker_seen


@dataclass
class Course:
    db: Database
    app: object
    tokens: dict[str, str]
    queued: list[tuple[int, str]] = field(default_factory=list)  # (submission id, queue) the app handed on

    def api(self, who: str) -> TestClient:
        return TestClient(self.app, headers={"Authorization": f"Bearer {self.tokens[who]}"})

    @contextmanager
    def page(self, who: str, lang: str = "en") -> Iterator[TestClient]:
        """`who` logged in through the form; the client's `csrf` holds the session's CSRF token."""
        with TestClient(self.app, follow_redirects=False) as c:
            c.csrf = _csrf(c.get(f"/login?lang={lang}").text)  # type: ignore[attr-defined]
            r = c.post("/login", data={"token": self.tokens[who], "csrf": c.csrf})  # type: ignore[attr-defined]
            assert r.status_code == 303, r.text
            c.csrf = _csrf(c.get(r.headers["location"]).text)  # type: ignore[attr-defined]
            yield c

    def worker_live(self, kind: str | None = None, name: str = "slot0@here") -> None:
        kind = device_type(kind)
        worker_seen(self.db, name, queue=queue_name("emu", kind), device_type=kind, device=kind)


def _csrf(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found is not None, html[:300]
    return found.group(1)


@contextmanager
def course(kind: str, tmp: Path, students: list[str], **app_options: object) -> Iterator[Course]:
    """A course on `kind` (sqlite, postgresql): sigmoid open, `students` and an instructor (`teacher`), a live
    worker of the default device type."""
    pg = None
    if kind == "postgresql":
        if pg_bin() is None:
            pytest.skip("PostgreSQL not installed (scripts/setup-system.sh --tests)")
        pg = start_postgres(tmp / "pg")
    url = pg.url if pg else sqlite_url(tmp)
    try:
        migrate(url)
        db = Database(url)
        ensure_assignment(db, "sigmoid")
        set_open(db, "sigmoid", True)
        tokens = {s: add_account(db, s, s.title()) for s in students}
        tokens["teacher"] = add_account(db, "teacher", "Teacher", role="instructor")
        found = Course(db, None, tokens)
        found.app = create_app(db, lambda sub_id, queue: found.queued.append((sub_id, queue)), "k" * 32,
                               **app_options)
        found.worker_live()
        yield found
        db.engine.dispose()
    finally:
        if pg is not None:
            pg.stop()


def stored(c, who: str) -> int:  # noqa: ANN001 -- a course() context
    """A final submission of `who` stored as the intake stores one (queued), its id."""
    from sqlalchemy import select

    from grader.server.db import Assignment, Student, Submission, now

    with c.db.session() as s:
        student = s.scalar(select(Student).where(Student.student_id == who))
        assignment = s.scalar(select(Assignment).where(Assignment.name == "sigmoid"))
        sub = Submission(student_pk=student.id, assignment_pk=assignment.id, mode="final",
                         content_hash="0" * 64, queue="grade.emu.mlu370-x8", device_type="mlu370-x8",
                         status="queued", in_flight=True, submitted_at=now())
        s.add(sub)
        s.flush()
        return sub.id
