"""BwrapRunner: bubblewrap isolation for student self-checks on machines without a Docker daemon.

Same mount layout as the container (/submission ro, /build rw only while building, /io rw, capped tmpfs
/tmp), new pid/net/ipc/uts namespaces, no capabilities, a fresh session, an emptied environment, and
rlimits via prlimit (bwrap has no cgroup limits of its own; RLIMIT_NPROC stands in for the pids cgroup and
RLIMIT_AS for memory). The sandboxed process never runs as root: as root we start bwrap privileged (no user
namespace: in one, the sandbox uid would map to host root) and drop to a dedicated uid with setpriv inside;
as a normal user bwrap runs unprivileged in a user namespace.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

from grader.sandbox.base import (
    SANDBOX_BUILD,
    SANDBOX_IO,
    SANDBOX_SUBMISSION,
    Limits,
    Mounts,
    Phase,
    Started,
    StartingRunner,
)
from grader.sandbox.layout import sandbox_env, sandbox_user
from grader.sandbox.supervise import Ending, supervise

REPO_SANDBOX = Path(__file__).resolve().parents[2] / "sandbox"
_PREBUILT_THIS_PROCESS: set[tuple[str, str]] = set()  # the prebuild check imports torch: once per process


class BwrapUnavailable(RuntimeError):
    """bwrap or prlimit is missing, or user namespaces are disabled."""


def bwrap_available() -> bool:
    return all(shutil.which(tool) for tool in ("bwrap", "prlimit", "setpriv"))


class BwrapRunner(StartingRunner):
    name = "bwrap"

    def __init__(self, python: str | None = None, emu_cache: Path | None = None) -> None:
        if not bwrap_available():
            raise BwrapUnavailable("bubblewrap sandbox needs bwrap, prlimit and setpriv (util-linux) on PATH")
        # The interpreter and its venv are bound read-only at their own paths, so shebangs and pyvenv.cfg work.
        self.python = python or sys.executable
        default_cache = Path(os.environ.get("BANG_EMU_CACHE") or Path.home() / ".cache" / "bang_emu")
        self.emu_cache = emu_cache or default_cache
        self.notes: list[str] = []
        self.io_note = ""
        self._prebuilt = False

    def _prebuild_on_host(self) -> None:
        """Builds the emulator's device library with the grader's own (trusted) code before any sandboxed
        run, as the image build does: inside, the cache is read-only and /tmp would rebuild it every run."""
        self._prebuilt = True
        main = REPO_SANDBOX / "bang_emu" / "torch_mlu_emu" / "__main__.py"
        key = (self.python, str(self.emu_cache))
        if not main.is_file() or key in _PREBUILT_THIS_PROCESS:
            return
        _PREBUILT_THIS_PROCESS.add(key)
        env = {**os.environ, "BANG_EMU_CACHE": str(self.emu_cache), "PYTHONPATH": str(REPO_SANDBOX)}
        for argv in (["bang_emu.driver", "--prebuild-runtime", str(self.emu_cache)],
                     ["bang_emu.torch_mlu_emu", "prebuild"]):
            done = subprocess.run([self.python, "-m", *argv], env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True, timeout=900)
            if done.returncode != 0:
                self.notes.append(f"emulator prebuild {argv[0]} failed on the host: {done.stdout[-500:]}")
        if self.emu_cache.is_dir():  # built by us (maybe root, via mkstemp 0600): the sandbox uid must read it
            subprocess.run(["chmod", "-R", "a+rX", str(self.emu_cache)], check=False)

    def _python_roots(self) -> list[Path]:
        roots = {Path(sys.prefix), Path(sys.base_prefix), Path(os.path.realpath(self.python)).parent.parent}
        roots |= {Path(p) for p in (sysconfig.get_paths()["purelib"], sysconfig.get_paths()["stdlib"])}
        roots = {r for r in roots if not str(r).startswith("/usr")}
        return sorted(r for r in roots if not any(o != r and r.is_relative_to(o) for o in roots))

    def command(self, phase: Phase, argv: list[str], mounts: Mounts, limits: Limits,
                env: dict[str, str] | None) -> list[str]:
        uid, gid = sandbox_user()
        as_root = os.geteuid() == 0
        args = ["bwrap", "--die-with-parent", "--new-session", "--clearenv",
                "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try"]
        if as_root:
            args += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]  # only to drop to uid below
        else:
            args += ["--unshare-user", "--disable-userns", "--cap-drop", "ALL"]
        args += ["--ro-bind", "/usr", "/usr"]
        for name in ("bin", "sbin", "lib", "lib64", "lib32"):
            host = Path("/") / name
            if host.is_symlink():
                args += ["--symlink", os.readlink(host), f"/{name}"]
            elif host.is_dir():
                args += ["--ro-bind", str(host), f"/{name}"]
        # made here, not left to bwrap: as root it makes a missing parent 0700, and the sandbox uid could not
        # follow /usr/bin/c++ -> /etc/alternatives/c++ (the emulator's device build runs `c++`)
        args += ["--perms", "0755", "--dir", "/etc"]
        for etc in ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "localtime"):
            if (Path("/etc") / etc).exists():
                args += ["--ro-bind", f"/etc/{etc}", f"/etc/{etc}"]
        # /tmp first: a checkout or venv that lives under /tmp (a CI clone) is bound on top of it, not hidden by it.
        args += ["--size", str(limits.tmpfs_bytes), "--perms", "1777", "--tmpfs", "/tmp"]
        made: set[str] = {"/", "/usr", "/etc", "/tmp"}
        for root in self._python_roots():
            args += _parents_readable(root, made)
            args += ["--ro-bind", str(root), str(root)]
        # The harness and the emulator's cache at their host paths: the device library's cache key hashes the
        # emulator's include and link paths, so a library prebuilt on the host (_prebuild_on_host) is found inside
        # only where those paths read the same (elsewhere every call failed: the read-only cache cannot build it).
        for root in (REPO_SANDBOX, *([self.emu_cache] if self.emu_cache.is_dir() else [])):
            args += _parents_readable(root, made)
            args += ["--ro-bind", str(root), str(root)]
        args += ["--proc", "/proc", "--dev", "/dev",
                 "--ro-bind", str(mounts.submission), SANDBOX_SUBMISSION,
                 "--ro-bind" if phase is Phase.RUN else "--bind", str(mounts.build), SANDBOX_BUILD,
                 "--bind", str(mounts.io), SANDBOX_IO,
                 "--chdir", "/tmp"]
        full_env = sandbox_env(phase, env)
        full_env["PATH"] = f"{Path(self.python).parent}:/usr/local/bin:/usr/bin:/bin"
        full_env["PYTHONPATH"] = str(REPO_SANDBOX)
        full_env["BANG_EMU_CACHE"] = str(self.emu_cache)
        for key, value in full_env.items():
            args += ["--setenv", key, value]
        args.append("--")
        if as_root:
            args += ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--inh-caps=-all", "--"]
        if argv and argv[0] in ("python", "python3"):
            argv = [self.python, *argv[1:]]
        # prlimit outermost: rlimits are inherited through bwrap and setpriv by the sandboxed process.
        # RLIMIT_AS is a stand-in for the memory cgroup bwrap lacks; torch needs headroom for its mappings.
        prlimit = ["prlimit", f"--nofile={limits.open_files}", f"--fsize={limits.file_size_bytes}", "--core=0",
                   f"--as={limits.memory_bytes * 2}"]
        if as_root:
            prlimit.append(f"--nproc={limits.pids}")  # per uid: the dedicated uid makes it per sandbox
        return [*prlimit, "--", *args, *argv]

    def start(self, phase: Phase, argv: list[str], mounts: Mounts, limits: Limits,
              env: dict[str, str] | None = None) -> Started:
        """bwrap started; its outcome comes from the returned handle."""
        if not self._prebuilt:
            self._prebuild_on_host()
        # bwrap binds host paths in our own mount namespace, so a host tmpfs on /io is what the sandbox sees.
        started, self.io_note = supervise(
            phase, mounts, limits, lambda _uid, _gid: _Bwrap(self.command(phase, argv, mounts, limits, env)),
            notes=self.notes)
        return started


class _Bwrap:
    """One phase's bwrap process tree as the supervision (grader.sandbox.supervise) drives it."""

    def __init__(self, command: list[str]) -> None:
        self.command = command
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> dict[str, Any]:
        self.proc = subprocess.Popen(self.command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, start_new_session=True, close_fds=True,
                                     env={"PATH": "/usr/bin:/bin"})
        return {"stdout": self.proc.stdout, "stderr": self.proc.stderr}

    def wait(self, seconds: float | None) -> bool:
        assert self.proc is not None
        try:
            self.proc.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            return False
        return True

    def stop(self) -> None:
        # Killing bwrap's group kills the sandbox's pid 1 (--die-with-parent), hence the whole pid namespace.
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def ending(self, stopped: bool) -> Ending:  # noqa: ARG002 - the exit status says it all
        assert self.proc is not None
        code = self.proc.returncode
        # bwrap returns the child's status; a child killed by signal N shows as 128+N (or -N for bwrap itself).
        return Ending(code, -code if code < 0 else (code - 128 if code > 128 else None))

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:  # interrupted: killed by the supervision just now
            self.proc.wait()


def _parents_readable(path: Path, made: set[str]) -> list[str]:
    """bwrap creates missing parents 0700 (as the host's /root is): make them traversable instead."""
    args: list[str] = []
    for parent in reversed(path.parents):
        key = str(parent)
        if key in made:
            continue
        made.add(key)
        args += ["--perms", "0755", "--dir", key]
    return args
