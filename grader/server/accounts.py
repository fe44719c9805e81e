"""Accounts: a student's or instructor's, keyed by a token seen in clear once (add_account, a roster's
import_roster); who a bearer token or a page session is; a student's leaderboard opt-in."""

from __future__ import annotations

import secrets
import tempfile
from pathlib import Path

from sqlalchemy import select

from grader.batch.intake import IntakeError, read_roster
from grader.server.db import Database, Student, hash_token, new_token
from grader.server.policy import Refused


def add_account(db: Database, student_id: str, name: str = "", role: str = "student") -> str:
    """Creates (or re-keys) an account; returns its new token, the only time it is seen in clear."""
    token = new_token()
    with db.session() as s:
        found = s.scalar(select(Student).where(Student.student_id == student_id))
        if found is None:
            s.add(Student(student_id=student_id, name=name, role=role, token_hash=hash_token(token),
                          pseudonym=f"kernel-{secrets.token_hex(3)}", on_leaderboard=False))
        else:
            found.token_hash, found.name, found.role = hash_token(token), name or found.name, role
    return token


def import_roster(db: Database, roster: Path) -> dict[str, str]:
    """Accounts for every student of a roster CSV in the intake's formats (grader.batch.intake.read_roster);
    returns student id -> new token for the students it added (existing ones keep theirs)."""
    with tempfile.TemporaryDirectory(prefix="roster-") as scratch:
        try:
            rows = read_roster(roster, Path(scratch))
        except IntakeError as exc:
            raise Refused(str(exc)) from exc
    tokens = {}
    for row in rows:
        with db.session() as s:
            exists = s.scalar(select(Student.id).where(Student.student_id == row.student_id)) is not None
        if not exists:
            tokens[row.student_id] = add_account(db, row.student_id, row.name)
    return tokens


def authenticate(db: Database, token: str) -> Student | None:
    if not token:
        return None
    with db.session() as s:
        return s.scalar(select(Student).where(Student.token_hash == hash_token(token)))


def session_account(db: Database, token_hash: str | None) -> Student | None:
    """The account a page session was opened for (it holds the token's hash, never the token)."""
    if not token_hash:
        return None
    with db.session() as s:
        return s.scalar(select(Student).where(Student.token_hash == token_hash))


def set_leaderboard(db: Database, student: Student, on: bool) -> None:
    with db.session() as s:
        s.get(Student, student.id).on_leaderboard = on  # type: ignore[union-attr]
