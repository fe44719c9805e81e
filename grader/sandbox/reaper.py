"""Removes a grader's sandbox containers and unmounts its io tmpfs mounts when the grader dies, however it
dies (SIGKILL included).

`grader.sandbox.lifeline.watch_this_process()` starts one such process per grader process, in its own session
(a kill of the grader's process group, as the batch pool does to a worker, does not reach it), reading a pipe
whose only write end the grader holds. The kernel closes that end when the grader exits, for any reason; the reaper then removes every
container labelled with the grader's pid on this host (docker_runner.remove_containers_of), then unmounts the
capped io tmpfs mounts named after its pid (io_cap.release_mounts_of). The `finally` of a run and the sweep at
start (docker_runner.sweep_leftovers) stay: this covers what they cannot, a SIGKILL.

    python -m grader.sandbox.reaper PID     (stdin: the pipe)
"""

from __future__ import annotations

import sys


def main(argv: list[str]) -> int:
    owner = int(argv[0])
    while sys.stdin.buffer.read(1 << 12):  # EOF once the owner is gone
        pass
    status = 0
    try:
        from grader.sandbox.docker_runner import remove_containers_of

        remove_containers_of(owner)  # first: a container still running holds the mount below busy
    except Exception:  # noqa: BLE001 - no daemon (or a bwrap grader): no container of ours can be running
        status = 1
    from grader.sandbox.io_cap import release_mounts_of
    from grader.sandbox.slot_runner import release_slot_mounts_of

    release_slot_mounts_of(owner)  # its slots' binds first: they may hold an io tmpfs below
    release_mounts_of(owner)
    return status


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
