"""Command line: `python -m bang_harness build --backend emu|mlu`, `run` (one job, or rounds: session.py),
`replay` (trusted replay: replay.py; replays one by one: replay_session.py), `build-programs`, `run-programs`."""

from __future__ import annotations

import argparse
import sys

from . import backends
from .paths import HarnessPaths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bang_harness", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    build = commands.add_parser("build", help="compile the submission into /build/ext/<extension>.so")
    build.add_argument("--backend", choices=backends.names(), default="emu")
    commands.add_parser("run", help="run /io/job.json's calls, writing /io/outputs/")
    commands.add_parser("build-programs", help="compile each standalone *.mlu program into /build/programs/")
    commands.add_parser("run-programs", help="run each built program, capturing its launches into /io/outputs/")
    commands.add_parser("replay", help="replay /io/journals/ with the host's fresh inputs (trusted replay)")
    commands.add_parser("replay-programs", help="replay the lab programs' journals (trusted replay)")
    commands.add_parser("make-engine", help="make the WebAssembly engine of /build's kernels into /io (once per module)")
    replay_program = commands.add_parser("replay-program", help=argparse.SUPPRESS)  # one, by `replay-programs`
    replay_program.add_argument("stem")
    replay_one = commands.add_parser("replay-one", help=argparse.SUPPRESS)  # started by `replay`, per journal
    replay_one.add_argument("journal")
    worker = commands.add_parser("worker", help=argparse.SUPPRESS)  # started by `run`, one per crash
    worker.add_argument("--first-call", type=int, default=0)
    worker.add_argument("--control-fd", type=int, default=None)
    zygote = commands.add_parser("zygote", help=argparse.SUPPRESS)  # a slot container's first process
    zygote.add_argument("--profile", required=True)
    server = commands.add_parser("forkserver", help=argparse.SUPPRESS)  # started by the keeper (rounds)
    server.add_argument("--requests-fd", type=int, required=True)
    server.add_argument("--replies-fd", type=int, required=True)
    args = parser.parse_args(argv)

    paths = HarnessPaths.from_env()
    # Imported per command: the supervisor must stay free of torch and of student code.
    if args.command == "build":
        from .build import run_build

        return run_build(args.backend, paths)
    if args.command in ("build-programs", "run-programs", "replay-programs"):
        from .programs import build_programs, replay_programs, run_programs

        return {"build-programs": build_programs, "run-programs": run_programs,
                "replay-programs": replay_programs}[args.command](paths)
    if args.command == "replay-program":
        from .programs import replay_program

        return replay_program(paths, args.stem)
    if args.command == "run":
        from .session import run_phase  # the rounds, which the host writes one by one, or one job

        return run_phase(paths)
    if args.command == "make-engine":
        from .replay import make_engine

        return make_engine(paths)
    if args.command == "replay":
        from .replay_session import replay_phase  # the replays the host hands in one by one, or one

        return replay_phase(paths)
    if args.command == "replay-one":
        from pathlib import Path

        from .replay import replay_one

        return replay_one(paths, Path(args.journal))
    if args.command == "zygote":
        from pathlib import Path

        from .zygote import serve as serve_slot

        return serve_slot(Path(args.profile))
    if args.command == "forkserver":
        from .forkserver import serve

        return serve(args.requests_fd, args.replies_fd)
    from .worker import run_worker

    return run_worker(paths, args.first_call, args.control_fd)


if __name__ == "__main__":
    sys.exit(main())
