"""ProcessRunner: a harness phase in a plain child process (`--sandbox none`, and tests).

No isolation beyond the process boundary: the child sees the host file system and network with the grader's
uid. What it does give: the fixed sandbox paths mapped through BANG_GRADER_* variables, a scrubbed
environment, resource limits (setrlimit in the child), its own process group killed as a whole at the wall-clock
limit and at exit, and stdout/stderr kept up to a cap.
"""

from __future__ import annotations

import importlib.util
import math
import os
import re
import resource
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from grader.sandbox.base import Limits, Mounts, Phase, RunOutcome, Started, StartingRunner
from grader.sandbox.layout import check_mounts, sandbox_env
from grader.sandbox.watch import OutputTail

_PYTHON = re.compile(r"^python(3(\.\d+)?)?$")
PASSED_THROUGH_ENV = ("PATH", "NEUWARE_HOME", "LD_LIBRARY_PATH", "MLU_VISIBLE_DEVICES", "BANG_EMU_CACHE")
GROUP_GONE_SECONDS = 2.0  # how long a finished run waits for its killed group's processes to be gone
DRAIN_SECONDS = 1.0  # after the group is killed, how long to wait for pipes held open by escaped processes


def _import_roots() -> list[str]:
    """Folders holding bang_harness and bang_emu, for a child whose interpreter lacks the install."""
    roots = []
    for name in ("bang_harness", "bang_emu"):
        spec = importlib.util.find_spec(name)
        if spec and spec.submodule_search_locations:
            root = str(Path(next(iter(spec.submodule_search_locations))).parent)
            if root not in roots:
                roots.append(root)
    return roots


def _uid_task_count(uid: int) -> int:
    """Threads and processes this uid already runs: RLIMIT_NPROC counts them all, not just the child's."""
    count = 0
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            text = status.read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
        if fields.get("Uid", "").split()[:1] == [str(uid)]:
            count += int(fields.get("Threads", "1").strip() or 1)
    return count


def _limit_setter(limits: Limits) -> Callable[[], None]:
    """What the child runs between fork and exec; only async-signal-tolerable work, values computed here."""
    wanted = [
        # RLIMIT_DATA, not RLIMIT_AS: torch and the emulator's core threads reserve far more address space
        # than they touch, so an address-space cap would fail honest code.
        (resource.RLIMIT_DATA, limits.memory_bytes),
        (resource.RLIMIT_FSIZE, limits.file_size_bytes),
        (resource.RLIMIT_NOFILE, limits.open_files),
        (resource.RLIMIT_CORE, 0),
    ]
    uid = os.geteuid()
    if uid != 0:  # root ignores RLIMIT_NPROC; for others it is per uid, so add the child's budget on top
        wanted.append((resource.RLIMIT_NPROC, _uid_task_count(uid) + limits.pids))
    cpus = sorted(os.sched_getaffinity(0))[: max(1, math.ceil(limits.cpus))]

    def apply() -> None:
        for which, value in wanted:
            _soft, hard = resource.getrlimit(which)
            if hard != resource.RLIM_INFINITY:
                value = min(value, hard)
            resource.setrlimit(which, (value, value))  # hard too, or the child could raise it back
        os.sched_setaffinity(0, cpus)

    return apply


_PCH_READY: set[tuple[str, str]] = set()  # (interpreter, cache) pairs whose precompiled headers exist


def ensure_host_pch(python: str, cache: Path, env: dict[str, str]) -> str | None:
    """Precompiles the torch headers for this interpreter into `cache`/pch once (the image has its own; see
    bang_harness.toolchains.build_pch). Trusted code of the grader, run before any student code; a minute the
    first time on a machine, nothing after. Returns why it failed (the build then only runs slower)."""
    key = (python, str(cache))
    if key in _PCH_READY or os.environ.get("BANG_GRADER_NO_PCH"):
        return None
    try:
        done = subprocess.run([python, "-m", "bang_harness.toolchains", "--build-pch", str(cache / "pch")],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=1800,
                              check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"precompiling the torch headers failed (builds run slower): {exc}"
    if done.returncode != 0:
        return f"precompiling the torch headers failed (builds run slower): {done.stdout.strip()[-500:]}"
    _PCH_READY.add(key)
    return None


class ProcessRunner(StartingRunner):
    name = "process"

    def __init__(self, python: str | None = None) -> None:
        self.python = python or sys.executable

    def command(self, argv: list[str]) -> list[str]:
        """argv as the sandbox would run it; a leading `python`/`python3` means this grader's interpreter."""
        if argv and _PYTHON.match(Path(argv[0]).name):
            return [self.python, *argv[1:]]
        return list(argv)

    def environment(self, phase: Phase, mounts: Mounts, scratch: Path,
                    extra: dict[str, str] | None) -> dict[str, str]:
        env = sandbox_env(phase)
        env.update({key: os.environ[key] for key in PASSED_THROUGH_ENV if key in os.environ})
        env["PATH"] = os.pathsep.join([str(Path(self.python).parent), env.get("PATH", "/usr/bin:/bin")])
        # The emulator's device library is compiled once into its cache: keep using the host user's cache
        # rather than rebuilding it in every run's throw-away HOME.
        env.setdefault("BANG_EMU_CACHE", str(Path.home() / ".cache" / "bang_emu"))
        env.update({
            # No mount namespace here: the harness finds the host folders through these.
            "BANG_GRADER_SUBMISSION": str(mounts.submission),
            "BANG_GRADER_BUILD": str(mounts.build),
            "BANG_GRADER_IO": str(mounts.io),
            "HOME": str(scratch / "home"),
            "TMPDIR": str(scratch / "tmp"),
            "PYTHONNOUSERSITE": "1",
            "PYTHONPATH": os.pathsep.join(_import_roots()),
        })
        env.update(extra or {})
        return env

    def start(self, phase: Phase, argv: list[str], mounts: Mounts, limits: Limits,
              env: dict[str, str] | None = None) -> Started:
        """The child started; its outcome comes from the returned handle."""
        check_mounts(mounts)  # the child's cwd is elsewhere: relative or missing folders are a caller bug
        scratch = Path(tempfile.mkdtemp(prefix=f"bang-grader-{phase.value}-"))
        (scratch / "home").mkdir()
        (scratch / "tmp").mkdir()
        notes = ["process runner: no isolation (host file system, network and uid)"]
        child_env = self.environment(phase, mounts, scratch, env)
        if phase is Phase.BUILD:
            problem = ensure_host_pch(self.command(["python"])[0], Path(child_env["BANG_EMU_CACHE"]),
                                      {**child_env, "HOME": os.environ.get("HOME", child_env["HOME"])})
            if problem:
                notes.append(problem)
        started = time.monotonic()
        try:
            proc = subprocess.Popen(
                self.command(argv), cwd=scratch, env=child_env,
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                start_new_session=True,  # its own session and process group, killed as one
                preexec_fn=_limit_setter(limits),
            )
        except OSError as exc:
            shutil.rmtree(scratch, ignore_errors=True)
            failed = RunOutcome(exit_code=None, wall_seconds=0.0, stderr_tail=f"cannot start {argv[0]}: {exc}",
                                notes=notes)
            return Started(lambda: failed, lambda reason: None)

        def finish() -> RunOutcome:
            stdout, stderr = OutputTail(limits.log_bytes), OutputTail(limits.log_bytes)
            timed_out = self._pump(proc, {proc.stdout: stdout, proc.stderr: stderr},
                                   started + limits.wall_seconds)
            _await_group_gone(proc.pid)  # SIGKILL is delivered asynchronously: none of the group runs on after this
            returncode = proc.wait()
            wall = time.monotonic() - started
            shutil.rmtree(scratch, ignore_errors=True)
            for label, buffer in (("stdout", stdout), ("stderr", stderr)):
                if buffer.dropped:
                    notes.append(f"{label}: first {buffer.dropped} bytes dropped (cap {limits.log_bytes})")
            return RunOutcome(
                exit_code=returncode if returncode >= 0 else None,
                signal=-returncode if returncode < 0 else None,
                timed_out=timed_out,
                wall_seconds=wall,
                stdout_tail=stdout.text(),
                stderr_tail=stderr.text(),
                notes=notes,
            )

        def kill(reason: str) -> None:
            notes.append(reason)
            _kill_group(proc.pid)  # the pump sees the leader gone and drains what is left

        return Started(finish, kill)

    @staticmethod
    def _pump(proc: subprocess.Popen[bytes], buffers: dict, deadline: float) -> bool:
        """Read both pipes until they close; kill the group at the deadline. Returns whether it timed out."""
        timed_out = False
        group_killed = False
        with selectors.DefaultSelector() as selector:
            for stream in buffers:
                selector.register(stream, selectors.EVENT_READ)
            drain_until: float | None = None
            while selector.get_map():
                now = time.monotonic()
                if not group_killed and (now >= deadline or _has_exited(proc.pid)):
                    timed_out = not _has_exited(proc.pid)
                    # The leader is gone or out of time: nothing in its group may outlive it. The leader is not
                    # reaped yet, so its group id cannot have been reused.
                    _kill_group(proc.pid)
                    group_killed = True
                    drain_until = now + DRAIN_SECONDS
                if drain_until is not None and now >= drain_until:
                    break  # a process that left the group holds the pipes; stop listening to it
                wait = (drain_until if drain_until is not None else deadline) - now
                for key, _ in selector.select(timeout=max(0.0, min(wait, 0.25))):
                    chunk = os.read(key.fd, 65536)
                    if chunk:
                        buffers[key.fileobj].feed(chunk)
                    else:
                        selector.unregister(key.fileobj)
        for stream in buffers:
            stream.close()
        if not group_killed:  # the child closed its pipes itself; wait for it within the deadline
            while not _has_exited(proc.pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            timed_out = not _has_exited(proc.pid)
            _kill_group(proc.pid)
        return timed_out


def _has_exited(pid: int) -> bool:
    """Whether the child exited, without reaping it (WNOWAIT keeps its pid and group id reserved)."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _await_group_gone(pgid: int, seconds: float = GROUP_GONE_SECONDS) -> None:
    """Waits (at most `seconds`) until no process of group `pgid` (killed by _kill_group) is still running: one
    that is gone or a zombie no longer runs anything. Another kill is sent each time round, for a member a
    fork made after the last one. The leader, not reaped yet, keeps the group id from being reused meanwhile."""
    until = time.monotonic() + seconds
    while _group_running(pgid) and time.monotonic() < until:
        _kill_group(pgid)
        time.sleep(0.005)


def _group_running(pgid: int) -> bool:
    """Whether a process of group `pgid` is alive and not a zombie (from /proc: state and process group)."""
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
            return True
    return False
