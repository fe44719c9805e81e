"""The server's database: SQLAlchemy models, the engine, and the Alembic migration to the newest schema.

SQLite (a file under the data folder) by default, PostgreSQL by URL (postgresql+psycopg://...). The schema is
owned by the migrations in grader/server/migrations; `migrate()` runs them, so a fresh or an older database
ends at the same schema. The commit point of a grading is the row in `results` (unique per submission).
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import (
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    create_engine,
    event,
    select,
    text,
)
from sqlalchemy.engine import Engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker

from grader.backends import DEFAULT_BACKEND

MIGRATIONS = Path(__file__).resolve().parent / "migrations"
# The phases of a submission, in order (PrairieLearn's external grader records the same): each a column
# `<phase>_at` holding a UNIX time, stamped once when the phase is reached.
PHASES = ("submitted", "queued", "started", "built", "ran", "scored", "reported")
MODES = ("test", "benchmark", "final")


class Base(DeclarativeBase):
    pass


class Assignment(Base):
    __tablename__ = "assignments"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)  # the spec's name (assignments/<name>)
    backend: Mapped[str] = mapped_column(String(16), default=DEFAULT_BACKEND)
    # the device type its submissions ask for by default (a device table key; None: the table's default)
    device: Mapped[str | None] = mapped_column(String(64), nullable=True)
    seed: Mapped[str] = mapped_column(String(64))  # secret master seed: never sent to a client or the broker
    is_open: Mapped[bool] = mapped_column(Boolean, default=True)
    deadline: Mapped[float | None] = mapped_column(Float, nullable=True)  # UNIX time; hidden cases shown after it
    late_until: Mapped[float | None] = mapped_column(Float, nullable=True)  # accepted (late) until; then refused
    late_penalty: Mapped[float] = mapped_column(Float, default=0.0)  # share of a late final's score taken off
    per_hour: Mapped[int | None] = mapped_column(Integer, nullable=True)  # uploads per student per hour
    # which graded final submission counts: latest, best or chosen (counting.py); from the spec's [submission]
    counts: Mapped[str | None] = mapped_column(String(16), nullable=True)
    # The reference-seed guard (issue 27): the key (seed digest, version, backend, device) its references passed
    # on, so it runs once per seed; or the failures that keep the assignment closed.
    seed_checked: Mapped[str | None] = mapped_column(String(160), nullable=True)
    seed_failures: Mapped[str | None] = mapped_column(Text, nullable=True)
    # When the instructor released the after_deadline groups to the students (closing releases them too);
    # None: they are shown after the deadline only.
    released_at: Mapped[float | None] = mapped_column(Float, nullable=True)


class Student(Base):
    __tablename__ = "students"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    student_id: Mapped[str] = mapped_column(String(128), unique=True)  # the roster's id
    name: Mapped[str] = mapped_column(String(256), default="")
    role: Mapped[str] = mapped_column(String(16), default="student")  # student | instructor
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)  # sha256 of the bearer token
    pseudonym: Mapped[str] = mapped_column(String(64))
    on_leaderboard: Mapped[bool] = mapped_column(Boolean, default=False)  # opt-in


class Submission(Base):
    __tablename__ = "submissions"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    student_pk: Mapped[int] = mapped_column(ForeignKey("students.id"), index=True)
    assignment_pk: Mapped[int] = mapped_column(ForeignKey("assignments.id"))
    mode: Mapped[str] = mapped_column(String(16))
    content_hash: Mapped[str] = mapped_column(String(64))
    queue: Mapped[str] = mapped_column(String(128))
    device_type: Mapped[str | None] = mapped_column(String(64), nullable=True)  # asked for (routes the queue)
    # what the worker that graded it stated: its device type, and its device (emulator profile or card)
    graded_type: Mapped[str | None] = mapped_column(String(64), nullable=True)
    graded_device: Mapped[str | None] = mapped_column(String(64), nullable=True)
    status: Mapped[str] = mapped_column(String(16), default="queued")  # queued | running | done | cancelled
    # True while queued or grading; a partial unique index allows one such row per student.
    in_flight: Mapped[bool | None] = mapped_column(Boolean, nullable=True, default=True)
    grade_runs: Mapped[int] = mapped_column(Integer, default=0)  # gradings started (a redelivery adds one)
    verdict: Mapped[str | None] = mapped_column(String(32), nullable=True)
    score: Mapped[float | None] = mapped_column(Float, nullable=True)
    max_score: Mapped[float | None] = mapped_column(Float, nullable=True)
    worker: Mapped[str | None] = mapped_column(String(128), nullable=True)
    late: Mapped[bool] = mapped_column(Boolean, default=False)  # after the deadline, inside the late window
    # Which grading counts: 0 the first, each regrade one more; its result replaces the one before only once it is
    # committed (results.generation), and a regrade that failed keeps the one before and says so here.
    generation: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    regrade_failed: Mapped[str | None] = mapped_column(Text, nullable=True)
    cancelled_at: Mapped[float | None] = mapped_column(Float, nullable=True)  # cancelled while queued (final)
    # when its student chose it as the one that counts (an assignment whose policy is `chosen`: counting.py)
    chosen_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    lang: Mapped[str | None] = mapped_column(String(8), nullable=True)  # the student's language: graded in it
    # the trusted replay's engine its grading (the next, or the one in flight) is asked for: None the default
    # (WebAssembly), "native" for an instructor's regrade after reviewing a result held for review (admin.regrade;
    # a plain regrade sets it back to None)
    replay_engine: Mapped[str | None] = mapped_column(String(16), nullable=True)
    submitted_at: Mapped[float] = mapped_column(Float)
    queued_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    started_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    built_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    ran_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    scored_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    reported_at: Mapped[float | None] = mapped_column(Float, nullable=True)

    __table_args__ = (
        Index("one_in_flight_per_student", "student_pk", unique=True,
              sqlite_where=text("in_flight = 1"), postgresql_where=text("in_flight")),
        # What a status poll asks of the queue (workers.queue_place: the jobs ahead and being graded, the recent
        # gradings' times) read from the index alone (17 -> 1 ms a poll at 200 uploads, when the uploads were
        # inline in these rows; issue 41).
        Index("queue_state", "status", "queue", "reported_at", "started_at"),
    )


class Upload(Base):
    """A submission's upload (the tar), so that a worker anywhere needs only the database: in a table of its own
    (migration 0009). SQLite keeps a row's values in one record, so an upload inline in `submissions` put ~100 KB
    of overflow pages in every scan of them (the pages' live refresh, the dashboard, the queue): 20 ms a scan at
    500 uploads, growing with the class."""

    __tablename__ = "uploads"
    submission_pk: Mapped[int] = mapped_column(ForeignKey("submissions.id", ondelete="CASCADE"), primary_key=True)
    archive: Mapped[bytes] = mapped_column(LargeBinary)


def upload_of(session: Session, submission_id: int) -> bytes:
    """The upload of submission `submission_id` (b"" if it has none: an unpacking error says so)."""
    return session.scalar(select(Upload.archive).where(Upload.submission_pk == submission_id)) or b""


class Result(Base):
    __tablename__ = "results"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    submission_pk: Mapped[int] = mapped_column(ForeignKey("submissions.id"), unique=True)  # counted once
    document: Mapped[str] = mapped_column(Text)  # GradeResult JSON; the report is drawn from it on each fetch
    committed_at: Mapped[float] = mapped_column(Float)
    generation: Mapped[int] = mapped_column(Integer, default=0, server_default="0")  # the grading it holds
    replay_engine: Mapped[str | None] = mapped_column(String(16), nullable=True)  # its grading's (Submission's)


class SupersededResult(Base):
    """A result a regrade's committed result replaced (grading.commit_result): kept, never shown as the one that
    counts; the instructor can list them (/api/submissions/{id}/history)."""

    __tablename__ = "superseded_results"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    submission_pk: Mapped[int] = mapped_column(ForeignKey("submissions.id"), index=True)
    generation: Mapped[int] = mapped_column(Integer)
    document: Mapped[str] = mapped_column(Text)  # GradeResult JSON
    committed_at: Mapped[float] = mapped_column(Float)
    superseded_at: Mapped[float] = mapped_column(Float)
    replay_engine: Mapped[str | None] = mapped_column(String(16), nullable=True)  # as Result.replay_engine


class Refusal(Base):
    """An upload the server refused after reading it (too large, unreadable, closed, ...): it is no attempt, but
    it counts against the student's rate (policy.check_rate), so refused uploads cannot stall the server."""

    __tablename__ = "refusals"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    student_pk: Mapped[int] = mapped_column(ForeignKey("students.id"), index=True)
    assignment: Mapped[str | None] = mapped_column(String(64), nullable=True)  # None: not known (never read)
    status: Mapped[int] = mapped_column(Integer)  # the HTTP status it was answered with
    at: Mapped[float] = mapped_column(Float)


class AdminJob(Base):
    """A long instructor action run in the background (the reference-seed check of an opening assignment): its
    state and progress, shown on the dashboard."""

    __tablename__ = "admin_jobs"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    kind: Mapped[str] = mapped_column(String(32))  # open
    assignment: Mapped[str] = mapped_column(String(64))
    state: Mapped[str] = mapped_column(String(16))  # running | done | failed | interrupted
    progress: Mapped[str] = mapped_column(Text, default="", server_default="")
    message: Mapped[str | None] = mapped_column(Text, nullable=True)
    started_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)  # its progress last moved
    finished_at: Mapped[float | None] = mapped_column(Float, nullable=True)


class Worker(Base):
    """A live worker slot, as its grading process last said (queue.py's heartbeat): a type whose queue holds
    jobs and that no fresh row serves is shown as such (nobody will take them)."""

    __tablename__ = "workers"
    name: Mapped[str] = mapped_column(String(160), primary_key=True)  # the Celery node, slot@host
    queue: Mapped[str] = mapped_column(String(128))
    device_type: Mapped[str] = mapped_column(String(64))
    device: Mapped[str | None] = mapped_column(String(64), nullable=True)
    seen_at: Mapped[float] = mapped_column(Float)


def hash_token(token: str) -> str:
    """Tokens are 256 random bits, so one sha256 (no salt, no stretching) keeps a stolen table useless."""
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> str:
    return secrets.token_urlsafe(32)


def sqlite_url(data_dir: Path) -> str:
    return f"sqlite:///{(data_dir / 'server.db').resolve()}"


def make_engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"timeout": 30, "check_same_thread": False})

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(conn, _record) -> None:  # noqa: ANN001 - DBAPI connection
            cur = conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")  # server and workers write side by side
            cur.execute("PRAGMA foreign_keys=ON")
            cur.close()

        return engine
    return create_engine(url, pool_pre_ping=True)


def migrate(url: str) -> None:
    """Upgrades the database at `url` to the newest schema (Alembic, grader/server/migrations)."""
    from alembic import command
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    command.upgrade(config, "head")


class Database:
    def __init__(self, url: str) -> None:
        self.url = url
        self.engine = make_engine(url)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)

    @contextmanager
    def session(self) -> Iterator[Session]:
        with self._sessions() as session, session.begin():
            yield session


def now() -> float:
    return time.time()
