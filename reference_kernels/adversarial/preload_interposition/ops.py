"""Adversarial sandbox fixture `preload_interposition` (not a solution): the binding exports mprotect, clock_gettime and the runtime's bang_emu_journal_mark; ops.py binds it RTLD_GLOBAL, then sets LD_PRELOAD to it and re-execs the worker (`python -m bang_harness worker` on its own control pipe) so the preloaded library interposes them from the start; the host loop writes the answer beside a one-element launch

Getting through returns the right answer (so a broken sandbox would look like a pass); being contained
raises "contained: ..." or is cut off by the runner.
"""

import os
import signal
import socket
import sys
import time

import my_ops_ext  # noqa: F401  the stub extension
import torch

import ctypes
import json

EXTENSION = my_ops_ext.__file__
ctypes.CDLL(EXTENSION, mode=os.RTLD_GLOBAL | os.RTLD_NOW)  # its names ahead of any library loaded from now on


def control_fd():
    """The worker's control pipe: the one pipe this process holds open for writing besides stdout/stderr."""
    for name in sorted(os.listdir("/proc/self/fd"), key=int):
        fd = int(name)
        if fd < 3:
            continue
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
            flags = int(open(f"/proc/self/fdinfo/{fd}").read().split("flags:")[1].split()[0], 8)
        except (OSError, IndexError, ValueError):
            continue
        if target.startswith("pipe:") and flags & 3 == os.O_WRONLY:
            return fd
    return None


def first_pending_call():
    """The round's folder (/io, or the newest /io/rounds/<n>) and the index of its first call without a result."""
    folders = ["/io"]
    if os.path.isdir("/io/rounds"):
        folders = sorted((os.path.join("/io/rounds", n) for n in os.listdir("/io/rounds")), key=os.path.getmtime,
                         reverse=True) + folders
    for folder in folders:
        try:
            with open(os.path.join(folder, "job.json")) as f:
                calls = json.load(f)["calls"]
        except (OSError, ValueError, KeyError):
            continue
        for index, call in enumerate(calls):
            if not os.path.exists(os.path.join(folder, "outputs", call["id"] + ".json")):
                return folder, index
    return None


def reexec_preloaded():
    if os.environ.get("ADVERSARIAL_PRELOADED"):
        return
    fd, pending = control_fd(), first_pending_call()
    if fd is None or pending is None:
        return
    os.environ.update(LD_PRELOAD=EXTENSION, ADVERSARIAL_PRELOADED="1", BANG_GRADER_IO=pending[0])
    try:
        os.set_inheritable(fd, True)
        os.execv(sys.executable, [sys.executable, "-m", "bang_harness", "worker", "--first-call", str(pending[1]),
                                  "--control-fd", str(fd)])
    except OSError:
        pass


reexec_preloaded()


def sigmoid(x):
    return my_ops_ext.sigmoid_vector(x)
