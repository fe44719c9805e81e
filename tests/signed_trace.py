"""Test helper: write trace files the way the emulator runtime does (DESIGN.md "Record fields and host rules"),
signed with a real key, so the host's reader and integrity checks are tested against the actual format."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from bang_harness.protocol import call_key, sign_line

DEVICE = "mlu370-x8"


def new_key() -> bytes:
    return os.urandom(32)


def signed_lines(key: bytes, call_id: str, records: list[dict[str, Any]], number: bool = True) -> list[bytes]:
    """Signed lines; with `number`, `record`/`call`/`seq` are filled in (launch by default)."""
    lines = []
    key_call = call_key(key, call_id)
    for seq, record in enumerate(records):
        if number:
            record = {"record": "launch", "call": call_id, "seq": seq, **record}
        lines.append(sign_line(key_call, json.dumps(record, separators=(",", ":")).encode()))
    return lines


def write_signed(path: Path, key: bytes, call_id: str, records: list[dict[str, Any]], number: bool = True) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(line + b"\n" for line in signed_lines(key, call_id, records, number)))
    return path
