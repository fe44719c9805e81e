"""A submit-only client from scratch (issue 40 item 7): a fresh venv with no torch, the grader installed without
its dependencies plus only pyproject's `client` extra, then `grade submit --server URL` against a real
`grade serve` on loopback (redis-server, no workers: the upload is taken and stays queued). Times each step.

    .venv/bin/python benchmarks/client_venv.py                 # pip installs the client extra from the index (PyPI)
    .venv/bin/python benchmarks/client_venv.py --json out.json

Too slow for the suite (pip resolves and downloads); the suite runs the same client with the grading stack made
unimportable (tests/server/test_server_inputs.py::test_the_client_submits_without_torch_or_the_grading_stack).
"""

from __future__ import annotations

import argparse
import json
import os
import select
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "server"))


def run(cmd: list[str], **kwargs: object) -> float:
    started = time.monotonic()
    subprocess.run(cmd, check=True, **kwargs)  # type: ignore[call-overload]
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="write the timings here")
    args = parser.parse_args()
    from cluster import start_server

    from grader.server.run import start_redis, stop

    client_deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["client"]
    timings: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="client-venv-") as scratch:
        root = Path(scratch)
        venv = root / "venv"
        timings["venv"] = run([sys.executable, "-m", "venv", str(venv)])
        py = venv / "bin" / "python"
        timings["wheel"] = run([str(REPO / ".venv" / "bin" / "python"), "-m", "pip", "wheel", "--no-deps",
                                "--no-build-isolation", "-q", "-w", str(root / "dist"), str(REPO)])
        wheel = next((root / "dist").glob("bang_grader-*.whl"))
        timings["install_grader_no_deps"] = run([str(py), "-m", "pip", "install", "-q", "--no-deps", str(wheel)])
        timings["install_client_deps"] = run([str(py), "-m", "pip", "install", "-q", *client_deps])
        installed = subprocess.run([str(py), "-m", "pip", "list", "--format=freeze"], capture_output=True, text=True,
                                   check=True).stdout
        heavy = [n for n in ("torch", "numpy", "docker", "SQLAlchemy", "fastapi", "celery", "Jinja2")
                 if f"\n{n.lower()}==" in "\n" + installed.lower()]
        assert not heavy, f"the client venv holds {heavy}"
        redis, broker = start_redis(root / "redis")
        server = start_server(root / "server", broker, ["ann"])
        try:
            env = {**os.environ, "BANG_GRADER_TOKEN": server.tokens["ann"], "PYTHONUNBUFFERED": "1",
                   "LANG": "zh_CN.UTF-8"}
            env.pop("PYTHONPATH", None)
            grade = str(venv / "bin" / "grade")
            started = time.monotonic()
            listing = subprocess.run([grade, "submit", "--server", server.url, "--list"], env=env, cwd=root,
                                     capture_output=True, text=True, timeout=120)
            timings["list"] = time.monotonic() - started
            assert listing.returncode == 0 and "sigmoid" in listing.stdout, listing
            started = time.monotonic()
            client = subprocess.Popen([grade, "submit", "--server", server.url,
                                       str(REPO / "reference_kernels" / "sigmoid" / "vector")],
                                      env=env, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            said = ""
            while "排队中" not in said:  # uploaded, and following its phases: queued
                assert client.poll() is None and time.monotonic() - started < 120, said
                if select.select([client.stdout], [], [], 0.5)[0]:
                    said += client.stdout.readline()  # type: ignore[union-attr]
            timings["submit_until_queued"] = time.monotonic() - started
            client.kill()
            client.communicate()
            with server.client("teacher") as c:
                taken = [s for s in c.get("/api/dashboard").json()["submissions"] if s["student_id"] == "ann"]
            assert [s["status"] for s in taken] == ["queued"], taken
        finally:
            server.stop()
            stop(redis)
    print(listing.stdout.strip())
    print(said.strip())
    for step, seconds in timings.items():
        print(f"{step:>24}: {seconds:6.1f} s")
    if args.json:
        args.json.write_text(json.dumps(timings, indent=2))


if __name__ == "__main__":
    main()
