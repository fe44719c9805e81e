"""`python -m bang_harness zygote --profile FILE`: the first process of a slot container (DESIGN "a zygote per
worker slot"; the protocol's names in bang_harness.protocol). It imports what a run sandbox's fork server imports
(torch above all) once, makes itself non-dumpable, holds no key, and runs the host's jobs one after another, each
confined by bang_harness.slot in namespaces of its own, as the harness command the host asked for (`run`: the
keeper of the rounds, whose fork server is then forked from here rather than started: no second torch import).

It never runs student code itself and believes nothing a job wrote: a job's end is C's exit status, which only
the kernel gives it. The host never believes the zygote to end a job either: it kills the slot container when a
kill it asked for does not end the job in seconds.
"""

from __future__ import annotations

import json
import os
import selectors
import sys
from pathlib import Path

from . import slot
from .protocol import (
    SLOT_COMMANDS,
    SLOT_CONTROL,
    SLOT_DIR,
    SLOT_READY,
    SLOT_STARTED,
    SLOT_STATUS,
    SLOT_UNPARKED,
    slot_command,
)

POLL_SECONDS = 0.02


BASE_ENV: dict[str, str] = {}  # the slot container's own (the image's ENV and the slot's sandbox_env)


def _job_main(argv: list[str], env: dict[str, str]) -> int:
    """In the job's pid 1, confined: the harness command `argv` with the job's environment -- the image's ENV under
    the job's own, as a fresh run container's first process would have it -- by the function the harness's
    command line (bang_harness.__main__) calls for it."""
    os.environ.clear()
    os.environ.update(BASE_ENV)
    os.environ.update(env)
    os.chdir("/tmp")
    from . import forkserver
    from .paths import HarnessPaths
    from .replay_session import replay_phase
    from .session import run_phase

    forkserver.IN_PLACE = True  # the rounds' fork server: forked from this interpreter, torch already imported
    phase = {"run": run_phase, "replay": replay_phase}[slot_command(argv) or ""]
    return phase(HarnessPaths.from_env())


def _write_text(folder: Path, name: str, text: str) -> None:
    tmp = folder / f".{name}.tmp"
    tmp.write_text(text)
    os.replace(tmp, folder / name)


def _write_json(folder: Path, name: str, value: dict) -> None:
    _write_text(folder, name, json.dumps(value))


def _write_status(folder: Path, job: int, code: int) -> None:
    _write_json(folder, SLOT_STATUS, {"job": job, "code": code})


def _start(root: Path, request: dict, profile: dict) -> slot.ConfinedJob:
    k = int(request["job"])
    folder = root / str(k)
    argv = [str(a) for a in request["argv"]]
    env = {str(a): str(b) for a, b in dict(request["env"]).items()}
    if slot_command(argv) is None:
        raise slot.SlotError(f"a slot runs the harness's {', '.join(SLOT_COMMANDS)} only, not {argv[:4]}")
    masked, read_only = request["masks"]
    mounts = slot.JobMounts(io=folder / "io", submission=folder / "submission", build=folder / "build",
                            slot=root, tmp_bytes=int(request["tmp_bytes"]))
    stdout = os.open(folder / "stdout", os.O_WRONLY | os.O_CLOEXEC)
    stderr = os.open(folder / "stderr", os.O_WRONLY | os.O_CLOEXEC)
    return slot.start_confined(mounts, profile, lambda: _job_main(argv, env), stdio=(stdout, stderr),
                               masks=slot.ProcMasks(tuple(masked), tuple(read_only)))


def serve(profile_path: Path, root: Path = Path(SLOT_DIR)) -> int:
    from .forkserver import preload
    from .run import make_undumpable

    BASE_ENV.update(os.environ)
    profile = slot.read_profile(profile_path)
    preload()
    import bang_harness.replay  # noqa: F401 - what a job's pid 1 runs, imported once here
    import bang_harness.replay_session  # noqa: F401
    import bang_harness.run  # noqa: F401
    import bang_harness.session  # noqa: F401

    make_undumpable()
    control = os.open(root / SLOT_CONTROL, os.O_RDWR | os.O_CLOEXEC)  # RDWR: never blocks, never EOF
    (root / SLOT_READY).write_text(str(os.getpid()))
    selector = selectors.DefaultSelector()
    selector.register(control, selectors.EVENT_READ)
    pending = b""
    running: tuple[int, slot.ConfinedJob] | None = None
    parked: float | None = None  # seconds of silence, with no job, after which a parked slot ends
    while True:
        events = selector.select(POLL_SECONDS if running else parked)
        if not events and running is None and parked is not None:
            return 0  # parked and idle for its seconds: nobody adopted it (the container ends with its zygote)
        for _key, _events in events:
            pending += os.read(control, 65536)
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            request: object = None
            try:
                request = json.loads(line)
                assert isinstance(request, dict)
                if request["op"] == "run" and running is None:
                    parked = None
                    k = int(request["job"])
                    job = _start(root, request, profile)
                    _write_json(root / str(k), SLOT_STARTED, {"job": k, "confined": job.confined, "why": job.why})
                    running = (k, job)
                elif request["op"] == "kill" and running is not None and running[0] == int(request["job"]):
                    running[1].kill()
                elif request["op"] == "park":
                    parked = max(1.0, float(request["seconds"]))
                elif request["op"] == "unpark":
                    parked = None
                    _write_text(root, SLOT_UNPARKED, str(request["token"])[:64])
            except (AssertionError, ValueError, KeyError, TypeError, OSError, slot.SlotError) as exc:
                print(f"zygote: request refused: {exc}", file=sys.stderr, flush=True)
                if isinstance(request, dict) and request.get("op") == "run" and running is None:
                    try:
                        k = int(request["job"])
                        _write_json(root / str(k), SLOT_STARTED, {"job": k, "confined": False, "why": str(exc)})
                        _write_status(root / str(k), k, 125)
                    except (KeyError, ValueError, TypeError, OSError):
                        pass
        if running is not None and running[1].poll() is not None:
            k, job = running
            running = None
            _write_status(root / str(k), k, job.status if job.status is not None else 125)
