"""The run phase's input (/io/job.json) and per-call output files (/io/outputs/<id>.json, .npy, .trace.jsonl)."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .protocol import ErrorKind

_CALL_ID = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")  # ids become file names


class JobError(Exception):
    """job.json is missing or malformed (a host bug, not a student's)."""


@dataclass(frozen=True)
class Call:
    id: str
    entry: str
    inputs: list[str]
    timed_repeats: int = 0
    warmup: int = 0
    poison: str = "nan"
    dtype: str | None = None


@dataclass(frozen=True)
class Job:
    backend: str
    device: str | None
    module: str
    extension: str
    calls: list[Call]
    call_timeout_seconds: float | None = None  # optional: kill and record a call that runs longer

    @classmethod
    def load(cls, path: Path) -> Job:
        try:
            return cls.parse(path.read_bytes())
        except OSError as exc:
            raise JobError(f"cannot read {path}: {type(exc).__name__}: {exc}") from exc
        except JobError as exc:
            raise JobError(f"{path}: {exc}") from exc

    @classmethod
    def parse(cls, text: bytes) -> Job:
        try:
            data = json.loads(text.decode("utf-8"))
            calls = [_call(c) for c in data["calls"]]
            job = cls(backend=str(data.get("backend", "emu")), device=data.get("device"),
                      module=str(data.get("module", "ops")), extension=str(data.get("extension", "my_ops_ext")),
                      calls=calls, call_timeout_seconds=data.get("call_timeout_seconds"))
        except (ValueError, KeyError, TypeError) as exc:
            raise JobError(f"cannot read the job: {type(exc).__name__}: {exc}") from exc
        if len({c.id for c in calls}) != len(calls):
            raise JobError("call ids in job.json are not unique")
        return job


def _call(data: dict[str, Any]) -> Call:
    call_id = str(data["id"])
    if not _CALL_ID.match(call_id):
        raise ValueError(f"call id {call_id!r} is not a safe file name")
    inputs = [str(name) for name in data.get("inputs", [])]
    for name in inputs:
        if "/" in name or name.startswith("."):
            raise ValueError(f"input name {name!r} must be a plain file name in inputs/")
    return Call(id=call_id, entry=str(data["entry"]), inputs=inputs,
                timed_repeats=int(data.get("timed_repeats", 0)), warmup=int(data.get("warmup", 0)),
                poison=str(data.get("poison", "nan")), dtype=data.get("dtype"))


@dataclass
class CallResult:
    ok: bool
    error: str | None = None
    error_kind: ErrorKind | None = None
    wall_us: list[float] = field(default_factory=list)
    device_us: list[float] = field(default_factory=list)
    trace: str | None = None
    repeats_consistent: bool | None = None  # every timed repeat returned the checked output bit for bit
    during: str = "call"  # "load": failed while loading the extension or module, so every call fails alike

    @classmethod
    def failure(cls, kind: ErrorKind, error: str, **extra: Any) -> CallResult:
        return cls(ok=False, error=error[:20_000], error_kind=kind, **extra)


def result_path(outputs: Path, call_id: str) -> Path:
    return outputs / f"{call_id}.json"


def output_path(outputs: Path, call_id: str) -> Path:
    return outputs / f"{call_id}.npy"


def trace_path(outputs: Path, call_id: str) -> Path:
    return outputs / f"{call_id}.trace.jsonl"


def write_result(outputs: Path, call_id: str, result: CallResult) -> None:
    """Write atomically, so a crash later never leaves a half-written result for the host to trip on."""
    target = result_path(outputs, call_id)
    tmp = target.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(result.__dict__, indent=1), encoding="utf-8")
    os.replace(tmp, target)
