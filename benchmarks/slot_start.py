"""What starting one job costs: a fresh run container that imports torch (today's per-grading start) beside a job
confined in a slot container whose zygote imported torch once (bang_harness/slot.py; DESIGN "a zygote per worker
slot"), in one run, same image, same job (torch.sigmoid of a zero).

    .venv/bin/python benchmarks/slot_start.py [--jobs 20] [--containers 5]

Container: wall from create to removal as the client sees it, CPU from the container's cgroup (a cgroup parent of
its own, read after removal as cpu_ledger reads it) and, apart, the Docker daemon's share per container. Slot: wall and CPU (the children's rusage) of
`run_confined` per job, measured inside the zygote. Nothing here is wired into grading yet.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

import uuid  # noqa: E402

from cpu_ledger import cgroup_cpu_seconds, daemon_cpu_seconds, remove_cgroup  # noqa: E402
from docker.types import Mount  # noqa: E402

from grader.sandbox.docker_settings import seccomp_option  # noqa: E402
from grader.sandbox.images import ensure_emu_image  # noqa: E402
from grader.sandbox.layout import SANDBOX_GID, SANDBOX_UID  # noqa: E402

SECCOMP = REPO / "sandbox" / "images" / "seccomp"
JOB = "int(float(torch.sigmoid(torch.zeros(1))[0]) != 0.5)"
FRESH = f"import torch, sys; sys.exit({JOB})"
ZYGOTE = f"""
import json, resource, sys, time
from pathlib import Path
import torch
from bang_harness import slot
profile = slot.read_profile(Path("/profile.json"))
slot.make_undumpable()
walls = []
for n in range(int(sys.argv[1])):
    base = Path("/slot") / str(n)
    for d in ("io", "submission", "build"):
        (base / d).mkdir(parents=True)
    start = time.perf_counter()
    assert slot.run_confined(slot.JobMounts(base / "io", base / "submission", base / "build", Path("/slot")),
                             profile, lambda: {JOB}) == 0
    walls.append(time.perf_counter() - start)
used = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({{"walls": walls, "cpu": (used.ru_utime + used.ru_stime) / len(walls)}}))
"""


def _common(slot_profile: bool) -> dict:
    profile = "seccomp=" + (SECCOMP / "slot-profile.json").read_text() if slot_profile else seccomp_option()
    return dict(user=f"{SANDBOX_UID}:{SANDBOX_GID}", network_mode="none", read_only=True, cap_drop=["ALL"],
                security_opt=["no-new-privileges", profile], init=True, pids_limit=256, mem_limit=2 << 30,
                tmpfs={p: "rw,size=16m" for p in ("/tmp", "/io", "/submission", "/build")},
                environment={"PYTHONPATH": "/opt/bang-grader/sandbox", "PYTHONDONTWRITEBYTECODE": "1", "HOME": "/tmp"})


def fresh_container(client, image: str) -> tuple[float, float]:  # noqa: ANN001
    parent = f"/bang-bench-slot-{uuid.uuid4().hex[:8]}"  # keeps the container's CPU seconds after its removal
    start = time.perf_counter()
    container = client.containers.create(image, ["python3", "-c", FRESH], cgroup_parent=parent, **_common(False))
    try:
        container.start()
        assert container.wait()["StatusCode"] == 0
    finally:
        container.remove(force=True)
    wall = time.perf_counter() - start
    cpu = cgroup_cpu_seconds(parent) or 0.0
    remove_cgroup(parent)
    return wall, cpu


def slot_jobs(client, image: str, jobs: int) -> dict:  # noqa: ANN001
    with tempfile.TemporaryDirectory() as folder:
        slot = Path(folder) / "slot"
        slot.mkdir()
        os.chown(slot, SANDBOX_UID, SANDBOX_GID)
        out = client.containers.run(image, ["python3", "-c", ZYGOTE, str(jobs)], remove=True, **_common(True),
                                    mounts=[Mount("/slot", str(slot), type="bind"),
                                            Mount("/profile.json", str(SECCOMP / "profile.json"), type="bind",
                                                  read_only=True)])
    return json.loads(out.decode().strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=20)
    parser.add_argument("--containers", type=int, default=5)
    args = parser.parse_args()
    import docker

    client = docker.from_env(timeout=300)
    image = ensure_emu_image()
    daemon = daemon_cpu_seconds()
    fresh = [fresh_container(client, image) for _ in range(args.containers)]
    daemon = (daemon_cpu_seconds() - daemon) / args.containers
    slot = slot_jobs(client, image, args.jobs)
    fresh_wall, fresh_cpu = statistics.median(w for w, _ in fresh), statistics.median(c for _, c in fresh)
    slot_wall, slot_cpu = statistics.median(slot["walls"]), slot["cpu"]
    print(f"one job's start, median ({args.containers} containers, {args.jobs} slot jobs), image {image}:")
    print(f"  fresh run container + torch import   wall {fresh_wall:6.3f} s   CPU {fresh_cpu:6.3f} s (its cgroup)")
    print(f"  confined job in a slot (bang_harness.slot) wall {slot_wall:6.3f} s   CPU {slot_cpu:6.3f} s")
    print(f"  ratio fresh/slot: wall {fresh_wall / slot_wall:5.0f}x   CPU {fresh_cpu / max(slot_cpu, 1e-6):5.0f}x")
    print(f"  the Docker daemon's own CPU per fresh container (dockerd, containerd, shims; an upper bound, the"
          f" machine's): {daemon:.3f} s; a slot job costs it none")


if __name__ == "__main__":
    main()
