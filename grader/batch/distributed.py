"""Running a batch's jobs on a cluster instead of the local pool: a plan file of self-contained jobs and a
Kubernetes Indexed Job that runs one `python -m grader.batch.worker --plan ... ` pod per job.

Why an Indexed Job: the scheduler already knows devices (Cambricon's device plugin advertises
`cambricon.com/mlu`), retries a failed index on its own (backoffLimitPerIndex), and every pod finds its job
from $JOB_COMPLETION_INDEX, so no queue service is needed. Results land in the shared batch directory with
the same atomic commit as locally; rerunning `grade batch` afterwards skips what the pods committed, grades
whatever they did not, and writes the exports.

A grading pod has no Docker daemon, so it grades with grader.sandbox.pod_runner: one locked-down pod per
harness phase on the same PVC. The manifest set therefore also holds the worker's ServiceAccount with a Role
limited to pods in its namespace, and a NetworkPolicy cutting all traffic of the phase pods.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

from grader.atomic_file import atomic_write_text
from grader.backends import get_backend
from grader.batch.intake import StudentSubmission
from grader.batch.jobs import GradeJob
from grader.batch.store import ResultStore
from grader.sandbox.pod_runner import (
    ENV_CLAIM,
    ENV_CLAIM_ROOT,
    ENV_IMAGE,
    ENV_NAMESPACE,
    ENV_OWNER_NAME,
    ENV_OWNER_UID,
    PHASE_LABEL,
)

PLAN_FILE = "plan.jsonl"
K8S_FILE = "k8s-job.json"
DEFAULT_IMAGE = "bang-grader-worker:latest"
SERVICE_ACCOUNT = "bang-grader-worker"
WORK_DIR = "tmp"  # the grading pod's TMPDIR, on the PVC: its work folders become the phase pods' subPaths


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
                   image: str = DEFAULT_IMAGE, claim: str = "bang-grader-batch",
                   sandbox_image: str | None = None) -> dict:
    """An Indexed Job: one completion per plan line. The batch directory is a PersistentVolumeClaim
    mounted at the same path as here, so the absolute paths in the plan hold inside the pods.
    `sandbox_image` runs the phase pods (harness + emulator or MLU toolchain); default: the worker image."""
    name = re.sub(r"[^a-z0-9-]+", "-", f"bang-grader-{jobs[0].assignment if jobs else 'batch'}".lower())[:50]
    root = str(store.root)

    def field(path: str) -> dict:
        return {"valueFrom": {"fieldRef": {"fieldPath": path}}}

    env = [
        {"name": ENV_NAMESPACE, **field("metadata.namespace")},
        {"name": ENV_OWNER_NAME, **field("metadata.name")},
        {"name": ENV_OWNER_UID, **field("metadata.uid")},
        {"name": ENV_CLAIM, "value": claim},
        {"name": ENV_CLAIM_ROOT, "value": root},
        {"name": ENV_IMAGE, "value": sandbox_image or image},
        {"name": "TMPDIR", "value": f"{root}/{WORK_DIR}"},
    ]
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
                    # gVisor for the grading pod too (it parses what the sandbox wrote); MLU pods cannot use it,
                    # but their device goes to the phase pods, so the grading pod never needs one.
                    **({"runtimeClassName": runtime} if (runtime := get_backend(backend).pod_runtime_class) else {}),
                    "serviceAccountName": SERVICE_ACCOUNT,
                    "automountServiceAccountToken": True,  # only here: it starts the phase pods
                    "containers": [{
                        "name": "grader",
                        "image": image,
                        "command": ["python", "-m", "grader.batch.worker", "--plan", f"{root}/{PLAN_FILE}"],
                        "env": env,
                        "resources": {"limits": {"cpu": "2", "memory": "8Gi"}},
                        "volumeMounts": [{"name": "batch", "mountPath": root}],
                    }],
                    "volumes": [{"name": "batch", "persistentVolumeClaim": {"claimName": claim}}],
                },
            },
        },
    }


def sandbox_manifests() -> list[dict]:
    """What a grading pod needs to run phase pods: its ServiceAccount, a Role on pods in its namespace only
    (create, get, delete, read logs), the binding, and a NetworkPolicy denying all traffic to and from
    every phase pod (enforced by the cluster's network plugin)."""
    labels = {"app": "bang-grader"}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {"name": SERVICE_ACCOUNT, "labels": labels}, "automountServiceAccountToken": False},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": {"name": SERVICE_ACCOUNT, "labels": labels},
         "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "get", "delete"]},
                   {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": SERVICE_ACCOUNT, "labels": labels},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": SERVICE_ACCOUNT},
         "subjects": [{"kind": "ServiceAccount", "name": SERVICE_ACCOUNT}]},
        {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
         "metadata": {"name": "bang-grader-sandbox-deny-all", "labels": labels},
         "spec": {"podSelector": {"matchExpressions": [{"key": PHASE_LABEL, "operator": "Exists"}]},
                  "policyTypes": ["Ingress", "Egress"], "ingress": [], "egress": []}},
    ]


def write_kubernetes_job(store: ResultStore, jobs: list[GradeJob], *, backend: str, parallelism: int,
                         image: str | None = None, sandbox_image: str | None = None) -> Path:
    """Writes the manifest set as one JSON List (which kubectl reads as YAML): `kubectl create -f
    DIR/k8s-job.json` (the ServiceAccount, Role, RoleBinding and NetworkPolicy exist after the first batch)."""
    job = kubernetes_job(store, jobs, backend=backend, parallelism=parallelism, image=image or DEFAULT_IMAGE,
                         sandbox_image=sandbox_image)
    (store.root / WORK_DIR).mkdir(exist_ok=True)
    path = store.root / K8S_FILE
    manifest = {"apiVersion": "v1", "kind": "List", "items": [*sandbox_manifests(), job]}
    atomic_write_text(path, json.dumps(manifest, indent=2))
    return path
