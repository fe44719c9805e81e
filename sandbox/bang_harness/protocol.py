"""The typed host <-> sandbox protocol (DESIGN.md, "Threat model: what the host believes").

Standard library only: imported by the harness inside the sandbox and by the host (`bang_harness.protocol`).
It fixes the values both sides agree on -- error kinds, exit codes, file names, the trace key and the signed
trace line format -- so neither side ever matches on message text.
"""

from __future__ import annotations

import hashlib
import hmac
from enum import StrEnum

KEY_BYTES = 32
KEY_FILE = "trace.key"  # under /io: written by the host, read and unlinked by the supervisor
KEY_FD_ENV = "BANG_EMU_KEY_FD"  # the worker's fd number of a pipe holding the master key
CALL_KEY_PREFIX = b"bang-emu-call:"
MAC_HEX_CHARS = 64

# Trace caps the host applies per call (DESIGN.md "Record fields and host rules").
TRACE_MAX_RECORDS = 10_000
TRACE_MAX_BYTES = 64 << 20
TRACE_MAX_LINE_BYTES = 1 << 20


class ErrorKind(StrEnum):
    """Why a call (or the build) failed. The host maps these values to verdicts; messages are only shown."""

    PYTHON_EXCEPTION = "python_exception"  # the entry raised
    LOAD_FAILURE = "load_failure"  # the student's extension or module failed to load: every call fails alike
    EMULATOR_ERROR = "emulator_error"  # a bang_emu check fired: out-of-bounds, overflow, hazard, deadlock ...
    BAD_OUTPUT = "bad_output"  # the entry returned something that is not a plain tensor numpy can hold
    CRASH = "crash"  # the worker process died during the call (signal or hard exit)
    TIMEOUT = "timeout"  # the call ran past the job's per-call time limit and was killed
    HARNESS_ERROR = "harness_error"  # the harness itself failed; never believed from a file the student could write
    COMPILE_ERROR = "compile_error"  # build.json: the sources did not compile or link


class RecordKind(StrEnum):
    LAUNCH = "launch"
    OUTPUT = "output"


class ExitCode:
    """Exit statuses of `python -m bang_harness ...` (anything else: the host judges from its own observation)."""

    OK = 0
    BUILD_FAILED = 1
    JOB_UNREADABLE = 2  # job.json or the trace key missing/malformed: a host bug
    FRESH_WORKER = 75  # worker -> supervisor: the remaining calls need a new worker


def call_key(master: bytes, call_id: str) -> bytes:
    """key_call = HMAC-SHA256(master, "bang-emu-call:" + call_id)."""
    return hmac.new(master, CALL_KEY_PREFIX + call_id.encode("utf-8"), hashlib.sha256).digest()


def program_key(master: bytes, program: str) -> bytes:
    """The master key of one standalone program's run (bang_harness.programs): its records verify nowhere else."""
    return hmac.new(master, b"program:" + program.encode("utf-8"), hashlib.sha256).digest()


def sign_line(key: bytes, payload: bytes) -> bytes:
    """One trace line (without the newline): `<64 hex HMAC-SHA256(key, payload)> <payload>`."""
    return hmac.new(key, payload, hashlib.sha256).hexdigest().encode("ascii") + b" " + payload


def split_line(line: bytes) -> tuple[bytes, bytes] | None:
    """(mac hex, json payload) of a trace line without its newline, or None when it is not shaped like one."""
    if len(line) < MAC_HEX_CHARS + 2 or line[MAC_HEX_CHARS:MAC_HEX_CHARS + 1] != b" ":
        return None
    return line[:MAC_HEX_CHARS], line[MAC_HEX_CHARS + 1:]


def verify_line(key: bytes, line: bytes) -> bytes | None:
    """The JSON payload of a correctly signed line, else None (constant-time comparison)."""
    parts = split_line(line)
    if parts is None:
        return None
    mac, payload = parts
    expected = hmac.new(key, payload, hashlib.sha256).hexdigest().encode("ascii")
    return payload if hmac.compare_digest(mac, expected) else None
