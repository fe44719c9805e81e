"""`python -m bang_harness.project [--backend emu] [--no-build] -- COMMAND...`: a student's own project run as
on their development machine (`grade run`), inside the sandbox.

The project is the writable copy at /build (the host copied it there; the student's folder is never written).
Its own `setup.py` is built first (`python setup.py build_ext --inplace`, as the lab's instructions say), then
COMMAND runs in the project folder with the project on `sys.path` (what `setup.py install` gives on a card) and,
on the emulator, the emulated `torch_mlu` importable. The exit status is COMMAND's (or the build's, if it fails).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

from .backends import get_harness_backend
from .paths import HarnessPaths

BUILD_COMMAND = ["setup.py", "build_ext", "--inplace"]


def project_env(backend: str, project: str) -> dict[str, str]:
    """The environment the student's processes get: the project (and on the emulator the torch_mlu shim) first
    on the path, and cwd importable again (PYTHONSAFEPATH protects the grader's long-lived processes, which a
    development run does not have)."""
    env = dict(os.environ)
    env.pop("PYTHONSAFEPATH", None)
    paths = [project]
    if get_harness_backend(backend).loads_emulator_runtime:
        from bang_emu.torch_mlu_emu import pyshim_dir

        paths.append(str(pyshim_dir()))
    env["PYTHONPATH"] = os.pathsep.join([*paths, *filter(None, [env.get("PYTHONPATH")])])
    return env


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bang_harness.project", description=__doc__)
    parser.add_argument("--backend", default="emu")
    parser.add_argument("--no-build", action="store_true", help="do not run setup.py build_ext --inplace first")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given")
    project = str(HarnessPaths.from_env().build)
    env = project_env(args.backend, project)
    if not args.no_build and os.path.exists(os.path.join(project, "setup.py")):
        print("$ python " + " ".join(BUILD_COMMAND), file=sys.stderr, flush=True)
        built = subprocess.run([sys.executable, *BUILD_COMMAND], cwd=project, env=env, check=False)
        if built.returncode != 0:
            print(f"setup.py build_ext failed (exit status {built.returncode})", file=sys.stderr, flush=True)
            return built.returncode
    print("$ " + " ".join(command), file=sys.stderr, flush=True)
    try:
        return subprocess.run(command, cwd=project, env=env, check=False).returncode
    except OSError as exc:  # no such program
        print(f"cannot run {command[0]}: {exc}", file=sys.stderr, flush=True)
        return 127


if __name__ == "__main__":
    sys.exit(main())
