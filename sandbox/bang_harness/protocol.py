"""The typed host <-> sandbox protocol (DESIGN.md, "Threat model: what the host believes").

Standard library only: imported by the harness inside the sandbox and by the host (`bang_harness.protocol`).
It fixes the values both sides agree on -- error kinds, exit codes, file names, the trace key and the signed
trace line format -- so neither side ever matches on message text.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, BinaryIO

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
    WINDOW = "window"  # mlu backend: one invocation as the grader's timing driver saw it (KernelWindow)
    OP = "op"  # emulator replay: a torch operator the replay ran on the device's bytes, and its modelled cost


class ExitCode:
    """Exit statuses of `python -m bang_harness ...` (anything else: the host judges from its own observation)."""

    OK = 0
    BUILD_FAILED = 1
    JOB_UNREADABLE = 2  # job.json or the trace key missing/malformed: a host bug
    ROUND_LOST = 3  # rounds: the fork server died, or a round's processes outlived the keeper's sweep
    REPLAY_FAILED = 4  # replay: a child failed by itself (not a kernel's fault: those are the trace's)
    FRESH_WORKER = 75  # worker -> supervisor: the remaining calls need a new worker


def trace_lines(stream: BinaryIO) -> Iterator[tuple[int, bytes | None, str | None]]:
    """The lines of an untrusted trace file within the caps: (number, line without its newline, None) each; the
    first line that breaks a cap or is cut short ends it as (number, None, what is wrong)."""
    for number in range(1, TRACE_MAX_RECORDS + 2):
        line = stream.readline(TRACE_MAX_LINE_BYTES + 1)
        if not line:
            return
        problem = None
        if number > TRACE_MAX_RECORDS:
            problem = f"more than {TRACE_MAX_RECORDS} records (the cap)"
        elif not line.endswith(b"\n"):
            problem = (f"longer than {TRACE_MAX_LINE_BYTES} bytes" if len(line) > TRACE_MAX_LINE_BYTES
                       else "cut short (no newline at its end)")
        yield (number, None, problem) if problem else (number, line[:-1], None)
        if problem:
            return


def call_key(master: bytes, call_id: str) -> bytes:
    """key_call = HMAC-SHA256(master, "bang-emu-call:" + call_id)."""
    return hmac.new(master, CALL_KEY_PREFIX + call_id.encode("utf-8"), hashlib.sha256).digest()


def program_key(master: bytes, program: str) -> bytes:
    """The master key of one standalone program's run (bang_harness.programs): its records verify nowhere else."""
    return hmac.new(master, b"program:" + program.encode("utf-8"), hashlib.sha256).digest()


# -- trusted replay (DESIGN.md "Threat model"): what the grading run claims is replayed in a sandbox of its own ---
DEVICE_MODULE = "device/module.so"  # under /build: the kernels compiled for replay (bang_emu.device_module)
# under /build, on the WebAssembly engine (the default): the kernels compiled for the WebAssembly replay
# (bang_emu/wasm: checked and counted) and its site names, in invoker order; absent when they do not build for it,
# WASM_NOTE then saying why
WASM_MODULE = "device/module.wasm"
WASM_SITES = "device/wasm-sites.json"
WASM_NOTE = "device/wasm-note.txt"
WASM_NOTE_MAX_BYTES = 4096
# under a replay's /io: the engine made from WASM_MODULE (bang_emu/wasm/engine.py), by the replay itself or, made once
# per module by `bang_harness make-engine` in a sandbox of its own and kept by the host, staged there by the host
WASM_ENGINE = "wasm-engine/device.wasm.so"
REPLAY_PROFILE = "replay-profile.json"  # under a replay's /io/outputs: where its seconds went (benchmarks only)
# The replay's engine (DESIGN.md "Confinement by construction"): "wasm" (the default) builds the kernels for the
# WebAssembly engine as well and replays them there; "native" replays the native device module only (a switch for
# comparisons and second opinions, never chosen by a submission).
REPLAY_ENGINE_ENV = "BANG_EMU_REPLAY_ENGINE"
ENGINES = ("wasm", "native")
ENGINE_RECORD_SUFFIX = ".engine.json"  # outputs/<journal stem>.engine.json: {"engine": ENGINES, "why": str}


def replay_engine(env: Mapping[str, str]) -> str:
    """The engine an environment asks for: "native" only when said so, else "wasm"."""
    return "native" if env.get(REPLAY_ENGINE_ENV) == "native" else "wasm"


JOURNAL_SUFFIX = ".journal"  # outputs/<first call id>.journal: one worker process's device journal
REPLAY_INPUTS = "replay-inputs"  # under the replay's /io: <call>.<k>.bin, the host's fresh inputs (raw bytes)
REPLAY_JOURNALS = "journals"  # under the replay's /io: the run's journals, copied by the host
REPLAY_OUTPUT_SUFFIX = ".out.bin"  # outputs/<call>.out.bin: the replayed output's raw bytes
REPLAY_STATUS_SUFFIX = ".replay.json"  # outputs/<call>.replay.json: {"call", "ok", "sealed", "error"}
REPLAY_SECONDS_PER_CALL = 120.0  # a journal's replay is stopped after this many seconds per call it holds
# A program's replay (bang_harness.programs): /io/twin.json, written by the host, {"kernel": base name,
# "operands": [[pointer arg, rows arg, cols arg], ...] (the graded launch's inputs), "seeds": {stem: int}};
# each launch of the kernel gets twin inputs drawn from its program's seed (runtime/capture.cpp).
PROGRAM_TWIN_FILE = "twin.json"
PROGRAM_TWIN_MAX_BYTES = 64 << 10


# -- rounds: one run-phase sandbox for all of a submission's rounds (bang_harness.session) -------------------
# /io/rounds/<n>/ holds round n: job.mac + job.json (+ inputs/) written by the host, outputs/ by the sandbox,
# and outputs/round.done by the keeper once every process of the round is gone. The key file holds the
# sandbox's master key, which only the keeper (a process that never runs student code) ever holds.
ROUNDS_DIR = "rounds"
JOB_FILE = "job.json"
JOB_MAC_FILE = "job.mac"
DONE_FILE = "round.done"
ROUND_WAIT_SECONDS = 900.0  # the keeper exits when the host writes no next round for this long


def job_mac(master: bytes, index: int, job: bytes) -> str:
    """The host's MAC over round n's job.json: the keeper runs no job it cannot verify."""
    return hmac.new(master, b"bang-job:%d\0" % index + job, hashlib.sha256).hexdigest()


def done_mark(master: bytes, index: int) -> str:
    """The content of round n's done file: only the keeper can write it, so the host knows the round is over
    and no process of the sandbox other than the keeper and its torch-loaded fork server is alive."""
    return hmac.new(master, b"bang-round-done:%d" % index, hashlib.sha256).hexdigest()


# -- replays: one replay sandbox for all of a submission's replays (bang_harness.replay_session) --------------
# /io/replays/<n>/ holds replay n as a replay of its own sandbox would have it in /io (journals/, replay-inputs/,
# replay.json, the staged engine) plus job.mac + job.json (the replay's job again, under the master key), written by
# the host; outputs/ by the replay, and outputs/round.done by the keeper once every process of the replay is gone:
# replay_done_mark(master, n, ok) says whether the replay's children all ended by themselves (ok) or one failed
# by itself (REPLAY_FAILED). Replay n's children sign with replay_key(master, n) alone, never the master key.
REPLAYS_DIR = "replays"
REPLAY_STDERR = "replay.stderr"  # under replay n's outputs: what its processes said on stderr (the host reads a tail)


def replay_key(master: bytes, index: int) -> bytes:
    """Replay n's signing key: what its children hold, and what the host verifies its traces with."""
    return hmac.new(master, b"bang-replay-key:%d" % index, hashlib.sha256).digest()[:KEY_BYTES]


def replay_done_mark(master: bytes, index: int, ok: bool) -> str:
    """The content of replay n's done file: only the keeper can write it, after every process of the replay is
    gone; `ok` False: a replay child failed by itself (the harness's failure, not the kernels')."""
    return hmac.new(master, b"bang-replay-done:%d:%d" % (index, int(ok)), hashlib.sha256).hexdigest()


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


# -- the timing driver's records on the mlu backend ----------------------------------------------------------
# bang_harness.mlu_driver appends one unsigned `window` line per invocation to the call's trace file: the
# notifier time around it and the kernels CNPAPI saw during it. Unsigned because the driver shares the
# student's process (any key would too): the host treats every field as a claim and checks it
# (grader.checks.kernel_use), under the TRACE_MAX_* caps above.
WINDOW_MAX_KERNELS = 256  # kernels listed per invocation; more are counted in `dropped`
KERNEL_NAME_MAX_CHARS = 512
_NS_MAX = (1 << 63) - 1


def _count(data: dict[str, Any], key: str, limit: int) -> int:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= limit:
        raise ValueError(f"{key} is {str(value)[:40]!r}, not an integer in [0, {limit}]")
    return value


def _reject_constant(name: str) -> Any:
    raise ValueError(f"non-standard JSON constant {name}")


@dataclass(frozen=True)
class KernelRecord:
    """One kernel as CNPAPI's activity API saw it on the device (timestamps in ns)."""

    name: str
    start_ns: int
    end_ns: int
    queue_id: int

    @property
    def duration_us(self) -> float:
        return max(0, self.end_ns - self.start_ns) / 1000.0

    def to_json(self) -> dict[str, Any]:
        return {"kernel": self.name[:KERNEL_NAME_MAX_CHARS], "start_ns": self.start_ns, "end_ns": self.end_ns,
                "queue_id": self.queue_id}

    @classmethod
    def from_json(cls, data: Any) -> KernelRecord:
        """ValueError saying what is wrong when `data` is not a bounded, well-formed record."""
        if not isinstance(data, dict):
            raise ValueError("a kernel record is not a JSON object")
        name = data.get("kernel")
        if not isinstance(name, str) or not 0 < len(name) <= KERNEL_NAME_MAX_CHARS:
            raise ValueError(f"kernel name {str(name)[:60]!r} is not a string of 1-{KERNEL_NAME_MAX_CHARS} chars")
        start, end = _count(data, "start_ns", _NS_MAX), _count(data, "end_ns", _NS_MAX)
        if end < start:
            raise ValueError(f"kernel {name[:80]!r} ends ({end} ns) before it starts ({start} ns)")
        return cls(name, start, end, _count(data, "queue_id", _NS_MAX))


@dataclass(frozen=True)
class KernelWindow:
    """One invocation of a call, bracketed by the driver's two CNRT notifiers."""

    invocation: int  # 0, 1, 2 ... within the call: the checked invocation, warm-ups, then timed ones
    device_us: float  # cnrtNotifierDuration between the notifiers
    kernels: tuple[KernelRecord, ...] | None  # CNPAPI's records during it; None: no CNPAPI in the process
    dropped: int = 0  # records beyond WINDOW_MAX_KERNELS, counted but not listed

    def to_line(self) -> bytes:
        listed = None if self.kernels is None else self.kernels[:WINDOW_MAX_KERNELS]
        dropped = self.dropped + (len(self.kernels) - len(listed) if listed is not None and self.kernels else 0)
        payload = {"record": RecordKind.WINDOW.value, "invocation": self.invocation, "device_us": self.device_us,
                   "cnpapi": listed is not None, "kernels": [k.to_json() for k in listed or ()], "dropped": dropped}
        return json.dumps(payload, allow_nan=False, separators=(",", ":")).encode("utf-8") + b"\n"

    @classmethod
    def from_line(cls, line: bytes) -> KernelWindow:
        """ValueError saying what is wrong when the line (without its newline) is not a well-formed window."""
        try:
            data = json.loads(line.decode("utf-8"), parse_constant=_reject_constant)
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            raise ValueError(f"not plain JSON ({type(exc).__name__}: {str(exc)[:120]})") from None
        if not isinstance(data, dict) or data.get("record") != RecordKind.WINDOW:
            raise ValueError("not a window record")
        device_us = data.get("device_us")
        if isinstance(device_us, bool) or not isinstance(device_us, int | float) or not math.isfinite(device_us) \
                or device_us < 0:
            raise ValueError(f"device_us {str(device_us)[:40]!r} is not a finite time >= 0")
        cnpapi, kernels = data.get("cnpapi"), data.get("kernels")
        if not isinstance(cnpapi, bool) or not isinstance(kernels, list) or len(kernels) > WINDOW_MAX_KERNELS:
            raise ValueError(f"cnpapi must be true or false and kernels a list of at most {WINDOW_MAX_KERNELS}")
        if kernels and not cnpapi:
            raise ValueError("kernel records without CNPAPI")
        records = tuple(KernelRecord.from_json(k) for k in kernels) if cnpapi else None
        return cls(_count(data, "invocation", _NS_MAX), float(device_us), records, _count(data, "dropped", _NS_MAX))


# A slot container (bang_harness.zygote; DESIGN "a zygote per worker slot"): the slot's host folder is bound on
# SLOT_DIR. The host writes one JSON request per line into SLOT_CONTROL (a FIFO it made): {"op": "run", "job": k,
# "argv": [...] (a SLOT_COMMANDS command), "env": {...}, "tmp_bytes": n, "masks": [[masked...], [read-only...]]}
# or {"op": "kill", "job": k}; job k's folders are SLOT_DIR/k/{io,submission,build} (the host binds the grading's
# folders on them), its stdout and stderr the FIFOs SLOT_DIR/k/{stdout,stderr} the host made and reads. Once the job's pid 1 says it is
# confined (or why it could not be) the zygote writes SLOT_DIR/k/SLOT_STARTED; when it has ended,
# SLOT_DIR/k/SLOT_STATUS: {"job": k, "code": C's exit status}. SLOT_READY says the zygote listens.
# A slot parked for the next grader process (grader.sandbox.slot_runner, `grade submit`): {"op": "park", "seconds": n}
# -- the zygote ends once no request has come for n seconds with no job running, and the container with it --
# then {"op": "unpark", "token": t} from the process that adopts it, which the zygote answers by writing t to
# SLOT_DIR/SLOT_UNPARKED (the adopter uses the slot only then: an answer in time says the zygote listens).
SLOT_DIR = "/slot"
SLOT_UNPARKED = "unparked"
SLOT_CONTROL = "control"
SLOT_READY = "ready"
SLOT_STATUS = "status.json"
SLOT_STARTED = "started.json"  # {"job": k, "confined": bool, "why": str | None}: written before the job's end
SLOT_ARGV_PREFIX = ("python3", "-m", "bang_harness")  # the only program a slot runs (the harness's own)
# ... and its only commands: the rounds' keeper (or one job) and the trusted replay (its keeper, or one replay), each
# a run-phase sandbox of a plain container's shape. Not the making of a build's WebAssembly engine: once per build,
# beside the rounds and of their limits, it would start a second slot (a torch import) where a plain container
# imports nothing.
SLOT_COMMANDS = ("run", "replay")


def harness_command(argv: list[str] | tuple[str, ...]) -> str | None:
    """`python3 -m bang_harness CMD ...` -> CMD; None for any other program."""
    n = len(SLOT_ARGV_PREFIX)
    return str(argv[n]) if len(argv) > n and tuple(argv[:n]) == SLOT_ARGV_PREFIX else None


def slot_command(argv: list[str] | tuple[str, ...]) -> str | None:
    """The harness command `argv` is, if a slot may run it as a job (the command alone); else None."""
    command = harness_command(argv)
    return command if command in SLOT_COMMANDS and len(argv) == len(SLOT_ARGV_PREFIX) + 1 else None
