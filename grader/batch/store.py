"""The resumable result store of one batch directory.

A result is done when `results/<key>.json` exists and parses: that file is the commit point, written with
temp + fsync + os.replace, so a batch killed at any instant leaves either a whole result or none. The key
covers everything that can change a grade (student, assignment, submission content, assignment spec,
grader version, backend/device and seed), so a rerun skips exactly what is already graded and regrades what
changed. `journal.jsonl` is an append-only log of what happened (for the progress ETA and for audit); it is
never needed to recover.

Layout of DIR:
    batch.json           the batch's settings, including its secret master seed (mode 0600)
    journal.jsonl        one JSON event per line: queued, started, done, skipped, resumed
    results/<key>.json   GradeResult documents (the commit points)
    runs/<key>/          what grading wrote (report.html, artefacts)
    intake/              unpacked archives
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from grader.atomic_file import atomic_write_text
from grader.results import GradeResult, Verdict


@dataclass(frozen=True)
class KeyParts:
    """Everything a grade depends on; two runs with equal parts give the same grade."""

    student_id: str
    assignment: str
    content_hash: str
    spec_hash: str
    grader_version: str
    backend: str
    device: str
    seed_digest: str
    lang: str = "en"  # the feedback's language: a batch in another language writes its texts anew

    def key(self) -> str:
        blob = json.dumps(asdict(self), sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:32]


@dataclass
class BatchManifest:
    """The settings a batch directory was started with, so a resume grades under the same ones."""

    assignment: str
    backend: str
    seed_mode: str
    seed: str
    created_at: float = field(default_factory=time.time)

    @staticmethod
    def new_seed() -> str:
        return secrets.token_hex(16)


def seed_digest(seed: str) -> str:
    return hashlib.sha256(seed.encode()).hexdigest()[:16]


class ResultStore:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.results_dir = root / "results"
        self.runs_dir = root / "runs"
        self.intake_dir = root / "intake"
        self.journal_path = root / "journal.jsonl"
        self.manifest_path = root / "batch.json"
        for folder in (self.results_dir, self.runs_dir, self.intake_dir):
            folder.mkdir(parents=True, exist_ok=True)

    # ------------------------------------------------------------------------------------- manifest
    def load_or_create_manifest(self, assignment: str, backend: str, seed: str | None) -> BatchManifest:
        """The batch's seed: the one given, else the one this directory was started with, else a fresh
        secret one. Kept 0600 since it is what makes the secret inputs secret."""
        if self.manifest_path.exists():
            old = BatchManifest(**json.loads(self.manifest_path.read_text()))
            if seed is None and old.assignment == assignment and old.backend == backend:
                return old
        manifest = BatchManifest(assignment=assignment, backend=backend,
                                 seed_mode="public" if seed else "secret",
                                 seed=seed or BatchManifest.new_seed())
        atomic_write_text(self.manifest_path, json.dumps(asdict(manifest), indent=2), mode=0o600)
        return manifest

    # -------------------------------------------------------------------------------------- results
    def result_path(self, key: str) -> Path:
        return self.results_dir / f"{key}.json"

    def run_dir(self, key: str) -> Path:
        return self.runs_dir / key

    def load(self, key: str) -> GradeResult | None:
        path = self.result_path(key)
        try:
            return GradeResult.from_json(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except ValueError:
            return None  # unreadable: treat as not done, it gets regraded (and overwritten)

    def is_done(self, key: str, *, retry_internal_errors: bool = True) -> bool:
        """Done = a valid result is stored. An internal error is the grader's fault, never the student's,
        so by default a rerun tries those again."""
        result = self.load(key)
        if result is None:
            return False
        return not (retry_internal_errors and result.verdict == Verdict.INTERNAL_ERROR)

    def save(self, key: str, result: GradeResult) -> None:
        atomic_write_text(self.result_path(key), result.to_json())

    # -------------------------------------------------------------------------------------- journal
    def log(self, event: str, **fields: object) -> None:
        """Appends one event; a line is written with one write() so concurrent appends do not interleave."""
        line = json.dumps({"t": round(time.time(), 3), "event": event, **fields}, default=str) + "\n"
        fd = os.open(self.journal_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)

    def journal(self) -> list[dict]:
        """All events; a torn last line (the batch was killed mid-write) is ignored."""
        if not self.journal_path.exists():
            return []
        events = []
        for line in self.journal_path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                events.append(json.loads(line))
            except ValueError:
                continue
        return events
