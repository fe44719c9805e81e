"""The `grade` command's entry point: `grade submit --server ...` runs the course server's client alone
(remote_app: no torch, docker or grading stack imported, so a submit-only install works); every other verb
the whole command line (app.py)."""

from __future__ import annotations

import sys


def remote(argv: list[str]) -> bool:
    """Whether `argv` (after the program name) is `submit` to a course server."""
    return argv[:1] == ["submit"] and any(a == "--server" or a.startswith("--server=") for a in argv[1:])


def main() -> None:
    argv = sys.argv[1:]
    if remote(argv):
        from grader.cli.remote_app import main as submit_remote

        submit_remote(argv[1:])
    else:
        from grader.cli.app import main as grade

        grade()
