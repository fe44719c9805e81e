"""Running a batch's jobs on a cluster instead of the local pool: a plan file of self-contained jobs and a
Kubernetes Indexed Job that runs one `python -m grader.batch.worker --plan ... ` pod per job.

Why an Indexed Job: the scheduler already knows devices (Cambricon's device plugin advertises
`cambricon.com/mlu`), retries a failed index on its own (backoffLimitPerIndex), and every pod finds its job
from $JOB_COMPLETION_INDEX, so no queue service is needed. Results land in the shared batch directory with
the same atomic commit as locally; rerunning `grade batch` afterwards skips what the pods committed, grades
whatever they did not, and writes the exports.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

from grader.atomic_file import atomic_write_text
from grader.batch.intake import StudentSubmission
from grader.batch.jobs import GradeJob
from grader.batch.store import ResultStore

PLAN_FILE = "plan.jsonl"
K8S_FILE = "k8s-job.json"
DEFAULT_IMAGE = "bang-grader-worker:latest"
# Emulator pods run under gVisor: a pod has no Docker daemon to give each grading its own container, so the
# pod's kernel boundary is the sandbox (the cluster needs a RuntimeClass named so, handler runsc). MLU pods
# cannot: gVisor passes no Cambricon device through, so they keep the node's default runtime.
GVISOR_RUNTIME_CLASS = "gvisor"


def make_self_contained(store: ResultStore, sub: StudentSubmission, job: GradeJob) -> None:
    """Copies a folder submission into the batch directory (archives are unpacked there already), so a
    pod needs one volume only: the batch directory."""
    if sub.path is None or store.root in sub.path.parents:
        return
    dest = store.intake_dir / f"{sub.slug}-{sub.content_hash[:16]}"
    if not dest.exists():
        staging = dest.with_name(dest.name + ".tmp")
        shutil.rmtree(staging, ignore_errors=True)
        shutil.copytree(sub.path, staging, symlinks=True)
        staging.rename(dest)
    job.submission = str(dest)


def write_plan(store: ResultStore, jobs: list[GradeJob]) -> Path:
    """One job per line, in index order; the seed stays in batch.json (0600), never in the plan."""
    path = store.root / PLAN_FILE
    atomic_write_text(path, "".join(job.without_seed().to_json() + "\n" for job in jobs))
    return path


def kubernetes_job(store: ResultStore, jobs: list[GradeJob], *, backend: str, parallelism: int,
                   image: str = DEFAULT_IMAGE, claim: str = "bang-grader-batch") -> dict:
    """An Indexed Job: one completion per plan line. The batch directory is a PersistentVolumeClaim
    mounted at the same path as here, so the absolute paths in the plan hold inside the pods."""
    name = re.sub(r"[^a-z0-9-]+", "-", f"bang-grader-{jobs[0].assignment if jobs else 'batch'}".lower())[:50]
    limits: dict[str, object] = {"cambricon.com/mlu": 1} if backend == "mlu" else {"cpu": "2", "memory": "8Gi"}
    root = str(store.root)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"generateName": name.rstrip("-") + "-", "labels": {"app": "bang-grader"}},
        "spec": {
            "completionMode": "Indexed",
            "completions": len(jobs),
            "parallelism": parallelism,
            "backoffLimitPerIndex": 1,  # one retry of a pod that died; then the index stays failed
            "maxFailedIndexes": len(jobs),  # a failing submission never stops the others
            "template": {
                "metadata": {"labels": {"app": "bang-grader"}},
                "spec": {
                    "restartPolicy": "Never",
                    **({"runtimeClassName": GVISOR_RUNTIME_CLASS} if backend == "emu" else {}),
                    "automountServiceAccountToken": False,  # nothing in a grading pod talks to the API server
                    "containers": [{
                        "name": "grader",
                        "image": image,
                        "command": ["python", "-m", "grader.batch.worker", "--plan", f"{root}/{PLAN_FILE}"],
                        "resources": {"limits": limits},
                        "volumeMounts": [{"name": "batch", "mountPath": root}],
                    }],
                    "volumes": [{"name": "batch", "persistentVolumeClaim": {"claimName": claim}}],
                },
            },
        },
    }


def write_kubernetes_job(store: ResultStore, jobs: list[GradeJob], *, backend: str, parallelism: int,
                         image: str | None = None) -> Path:
    """Writes the Job as JSON (which kubectl reads as YAML): `kubectl create -f DIR/k8s-job.json`."""
    manifest = kubernetes_job(store, jobs, backend=backend, parallelism=parallelism, image=image or DEFAULT_IMAGE)
    path = store.root / K8S_FILE
    atomic_write_text(path, json.dumps(manifest, indent=2))
    return path
