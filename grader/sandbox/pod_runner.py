"""PodRunner: one short-lived, locked-down Pod per harness phase, for a grader that runs as a Kubernetes pod
(no Docker daemon there). Created through the Kubernetes API (official `kubernetes` client, extra `k8s`,
imported lazily), always deleted afterwards.

Each phase pod: gVisor (emu) or the default runtime with one `cambricon.com/mlu` (mlu); no service-account
token; non-root; read-only root; no capabilities; no privilege escalation; RuntimeDefault seccomp; cpu,
memory and ephemeral-storage limits from Limits; a deadline from the wall limit; a label the batch's
NetworkPolicy matches (no traffic in or out); /submission, /build and /io as subPaths of the batch PVC, which
the grading pod mounts too (grader.batch.distributed), so inputs and outputs never cross the network.
Output is followed through the pod log into the shared capped tail (flood kills the pod); the writable
subPaths are polled from this side as in the other runners. Kubernetes has no per-pod pids or rlimit field:
rlimits are set by a tiny Python shim before exec; pids are the node's podPidsLimit.
"""

from __future__ import annotations

import math
import os
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grader.sandbox.base import (
    SANDBOX_BUILD,
    SANDBOX_IO,
    SANDBOX_SUBMISSION,
    Limits,
    Mounts,
    Phase,
    RunOutcome,
    SandboxError,
    SandboxTarget,
)
from grader.sandbox.layout import sandbox_env
from grader.sandbox.supervise import Ending, supervise
from grader.sandbox.watch import FLOOD_FACTOR

# The cluster needs a RuntimeClass of this name (handler runsc). gVisor passes no Cambricon device through,
# so MLU pods keep the node's default runtime.
PHASE_LABEL = "bang-grader/sandbox-phase"  # the NetworkPolicy of the batch denies all traffic for it
OWNER_LABEL = "bang-grader/owner"
# What the grading pod tells this runner (set by the manifest in grader.batch.distributed).
ENV_NAMESPACE = "BANG_GRADER_POD_NAMESPACE"
ENV_CLAIM = "BANG_GRADER_POD_CLAIM"
ENV_CLAIM_ROOT = "BANG_GRADER_POD_CLAIM_ROOT"
ENV_IMAGE = "BANG_GRADER_POD_IMAGE"
ENV_OWNER_NAME = "BANG_GRADER_POD_OWNER_NAME"
ENV_OWNER_UID = "BANG_GRADER_POD_OWNER_UID"
# "key=value,key=value": the phase pods' nodeSelector, so a course server's worker of one device type has its run
# pods scheduled on nodes with cards of that type (deploy/k8s/workers-mlu*.yaml)
ENV_NODE_SELECTOR = "BANG_GRADER_POD_NODE_SELECTOR"
ENV_SA_DIR = "BANG_GRADER_K8S_SA_DIR"
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
# The pod deadline also counts scheduling and image pull; our own clock starts when the container runs.
POD_START_SECONDS = 120
POLL_SECONDS = 0.5
# rlimits the container runtime would otherwise set (docker's ulimits): core 0, nofile, fsize; then exec.
RLIMIT_SHIM = ("import os, resource as r, sys; r.setrlimit(r.RLIMIT_CORE, (0, 0)); "
               "n, f = int(sys.argv[1]), int(sys.argv[2]); r.setrlimit(r.RLIMIT_NOFILE, (n, n)); "
               "r.setrlimit(r.RLIMIT_FSIZE, (f, f)); os.execvp(sys.argv[3], sys.argv[3:])")


@dataclass(frozen=True)
class PodSettings:
    namespace: str
    claim: str  # the batch PersistentVolumeClaim
    claim_root: Path  # where this pod mounts it: every mount must lie below
    image: str  # the sandbox image (harness + emulator)
    owner_name: str | None = None  # this grading pod: phase pods are garbage-collected with it
    owner_uid: str | None = None
    node_selector: tuple[tuple[str, str], ...] = ()

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> PodSettings:
        missing = [k for k in (ENV_NAMESPACE, ENV_CLAIM, ENV_CLAIM_ROOT, ENV_IMAGE) if not environ.get(k)]
        if missing:
            raise SandboxError(f"pod sandbox not configured: {', '.join(missing)} unset (the manifest of "
                               "`grade batch --plan-only` sets them)")
        return cls(environ[ENV_NAMESPACE], environ[ENV_CLAIM], Path(environ[ENV_CLAIM_ROOT]),
                   environ[ENV_IMAGE], environ.get(ENV_OWNER_NAME) or None, environ.get(ENV_OWNER_UID) or None,
                   node_selector(environ.get(ENV_NODE_SELECTOR, "")))


def node_selector(text: str) -> tuple[tuple[str, str], ...]:
    """ENV_NODE_SELECTOR's "key=value,key=value" as pairs."""
    pairs = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SandboxError(f"{ENV_NODE_SELECTOR}: {item!r} is not key=value")
        pairs.append((key.strip(), value.strip()))
    return tuple(pairs)


def in_cluster(environ: Mapping[str, str] = os.environ) -> tuple[bool, str]:
    """True when this process runs in a pod and its service-account config loads (it then becomes the
    client's default); else False and why. ENV_SA_DIR names a token projected elsewhere than the default."""
    if not environ.get("KUBERNETES_SERVICE_HOST"):
        return False, "not in a Kubernetes pod (KUBERNETES_SERVICE_HOST unset)"
    try:
        from kubernetes.config import ConfigException
        from kubernetes.config.incluster_config import InClusterConfigLoader
    except ImportError:
        return False, "the kubernetes client is not installed (pip install 'bang-grader[k8s]')"
    sa_dir = Path(environ.get(ENV_SA_DIR) or SERVICE_ACCOUNT_DIR)
    try:
        InClusterConfigLoader(str(sa_dir / "token"), str(sa_dir / "ca.crt"), environ=environ).load_and_set()
    except ConfigException as exc:
        return False, f"in-cluster config does not load: {exc}"
    return True, "ok"


def sub_path(path: Path, root: Path) -> str:
    """The PVC subPath of a folder of this pod's view; a folder outside the claim cannot reach a phase pod."""
    try:
        return str(Path(path).resolve().relative_to(root.resolve()))
    except ValueError as exc:
        raise SandboxError(f"{path} is not on the batch volume {root} (set TMPDIR below it)") from exc


def phase_pod(name: str, phase: Phase, argv: list[str], mounts: Mounts, limits: Limits,
              env: dict[str, str] | None, settings: PodSettings, target: SandboxTarget | None,
              uid: int, gid: int) -> dict[str, Any]:
    """The Pod manifest of one phase (a plain dict the API accepts; tests check it field by field); `target`:
    the backend, for its runtime class and extra resources (None: neither)."""
    resources: dict[str, Any] = {
        "cpu": f"{max(1, math.ceil(limits.cpus * 1000))}m",
        "memory": str(int(limits.memory_bytes)),
        # /tmp (an emptyDir on the node's disk) plus the container log up to the flood trip-wire
        "ephemeral-storage": str(int(limits.tmpfs_bytes + limits.log_bytes * FLOOD_FACTOR)),
    }
    runtime_class = target.pod_runtime_class if target is not None else None
    resources.update(target.pod_resources if target is not None else {})  # the card, for a backend that needs one
    volume_mounts = [
        {"name": "batch", "mountPath": SANDBOX_SUBMISSION, "subPath": sub_path(mounts.submission,
                                                                               settings.claim_root),
         "readOnly": True},
        {"name": "batch", "mountPath": SANDBOX_BUILD, "subPath": sub_path(mounts.build, settings.claim_root),
         "readOnly": phase is not Phase.BUILD},
        {"name": "batch", "mountPath": SANDBOX_IO, "subPath": sub_path(mounts.io, settings.claim_root),
         "readOnly": False},
        {"name": "tmp", "mountPath": "/tmp"},
    ]
    metadata: dict[str, Any] = {"name": name, "namespace": settings.namespace,
                                "labels": {PHASE_LABEL: str(phase), OWNER_LABEL: settings.owner_name or "none"}}
    if settings.owner_name and settings.owner_uid:
        metadata["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": settings.owner_name,
                                        "uid": settings.owner_uid, "blockOwnerDeletion": False}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {
            **({"runtimeClassName": runtime_class} if runtime_class else {}),
            **({"nodeSelector": dict(settings.node_selector)} if settings.node_selector else {}),
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,  # no service addresses in the environment either
            "hostNetwork": False, "hostPID": False, "hostIPC": False,
            "activeDeadlineSeconds": math.ceil(limits.wall_seconds) + POD_START_SECONDS,
            "terminationGracePeriodSeconds": 0,
            "securityContext": {"runAsNonRoot": True, "runAsUser": uid, "runAsGroup": gid,
                                "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{
                "name": "sandbox",
                "image": settings.image,
                "imagePullPolicy": "IfNotPresent",
                "command": ["python3", "-c", RLIMIT_SHIM, str(limits.open_files), str(limits.file_size_bytes),
                            *argv],
                "workingDir": "/tmp",
                "env": [{"name": k, "value": v} for k, v in sandbox_env(phase, env).items()],
                "resources": {"limits": resources, "requests": dict(resources)},
                "securityContext": {
                    "runAsNonRoot": True, "runAsUser": uid, "runAsGroup": gid,
                    "readOnlyRootFilesystem": True,
                    "allowPrivilegeEscalation": False,
                    "privileged": False,
                    "capabilities": {"drop": ["ALL"]},
                    "seccompProfile": {"type": "RuntimeDefault"},
                },
                "volumeMounts": volume_mounts,
            }],
            "volumes": [
                {"name": "batch", "persistentVolumeClaim": {"claimName": settings.claim}},
                {"name": "tmp", "emptyDir": {"sizeLimit": str(int(limits.tmpfs_bytes))}},
            ],
        },
    }


def kubeconfig_api() -> Any:
    """A CoreV1Api from ~/.kube/config, for driving a cluster from outside it (the real-cluster test)."""
    try:
        from kubernetes import client, config
    except ImportError as exc:
        raise SandboxError("the kubernetes client is not installed (pip install 'bang-grader[k8s]')") from exc
    try:
        config.load_kube_config()
    except (config.ConfigException, OSError) as exc:
        raise SandboxError(f"no Kubernetes configuration: {exc}") from exc
    return client.CoreV1Api()


class PodRunner:
    name = "kubernetes"

    def __init__(self, settings: PodSettings, target: SandboxTarget | None = None, api: Any = None) -> None:
        self.settings = settings
        self.target = target
        self.backend = target.name if target is not None else ""
        self.image = settings.image
        from kubernetes.client import CoreV1Api, V1Pod
        from kubernetes.client.exceptions import ApiException

        # Without `api`: the configuration in_cluster() loaded (the select path).
        self.api = api if api is not None else CoreV1Api()

        self._api_error: type[Exception] = ApiException
        self._pod_model = V1Pod

    def run(self, phase: Phase, argv: list[str], mounts: Mounts, limits: Limits,
            env: dict[str, str] | None = None) -> RunOutcome:
        def make(uid: int, gid: int) -> _Pod:
            name = f"bang-grader-{phase}-{uuid.uuid4().hex[:12]}"
            return _Pod(self, name, phase_pod(name, phase, argv, mounts, limits, env, self.settings, self.target,
                                              uid, gid))

        # No /io cap: the folders are subPaths of the batch volume, not host mounts the pod would see.
        outcome = supervise(phase, mounts, limits, make, cap_io=None)[0].wait()
        assert outcome is not None
        return outcome


class _Pod:
    """One phase's pod as the supervision (grader.sandbox.supervise) drives it."""

    def __init__(self, runner: PodRunner, name: str, body: dict[str, Any]) -> None:
        self.api, self.namespace, self.api_error = runner.api, runner.settings.namespace, runner._api_error
        self.model = runner._pod_model
        self.name, self.body = name, body
        self.pod: Any = None  # its last status read
        self.stream: Any = None

    def start(self) -> dict[str, Any]:
        with self._api_errors():
            # The client's typed model (kubernetes >= 37); Strict: the server refuses a field it would drop.
            self.api.create_namespaced_pod(self.namespace, self.model.from_dict(self.body), field_validation="Strict")
            self._wait_started()
            self.stream = self.api.read_namespaced_pod_log(self.name, self.namespace, follow=True,
                                                           _preload_content=False)
        # The kubelet interleaves stdout and stderr in one log: it is kept as one tail.
        return {"output": self.stream.stream(1 << 16)}

    def wait(self, seconds: float | None) -> bool:
        if seconds is None:
            return True  # killed: deleted, and read as killed (pod_ending)
        deadline = time.monotonic() + seconds
        with self._api_errors():
            self.pod = self._get()
            while self.pod is not None and _terminated(self.pod) is None \
                    and getattr(self.pod.status, "phase", None) not in ("Succeeded", "Failed"):
                if time.monotonic() > deadline:
                    return False
                time.sleep(POLL_SECONDS)
                self.pod = self._get()
        return True

    def stop(self) -> None:
        try:
            self.api.delete_namespaced_pod(self.name, self.namespace, grace_period_seconds=0)
        except self.api_error:
            pass  # already gone; else garbage-collected with its owner, the grading pod

    def ending(self, stopped: bool) -> Ending:
        code, signal, timed_out, oom = pod_ending(None if stopped else self.pod, False)
        return Ending(code, signal, oom, timed_out)

    def close(self) -> None:
        if self.stream is not None:
            self.stream.close()  # ends the log thread if it is still reading
        self.stop()

    def _wait_started(self) -> None:
        """Until the container runs or ended; a pod that cannot start (pull, scheduling) is the cluster's fault."""
        deadline = time.monotonic() + POD_START_SECONDS
        while time.monotonic() < deadline:
            pod = self._get()
            if pod is None:
                raise SandboxError(f"pod {self.name} vanished before it started")
            for status in _statuses(pod):
                if status.state.running is not None or status.state.terminated is not None:
                    return
                waiting = status.state.waiting
                if waiting is not None and waiting.reason in ("ErrImagePull", "ImagePullBackOff",
                                                              "CreateContainerConfigError", "InvalidImageName"):
                    raise SandboxError(f"pod {self.name} cannot start: {waiting.reason}: {waiting.message}")
            if pod.status is not None and pod.status.phase == "Failed":
                return
            time.sleep(POLL_SECONDS)
        raise SandboxError(f"pod {self.name} did not start within {POD_START_SECONDS} s")

    def _get(self) -> Any:
        try:
            return self.api.read_namespaced_pod(self.name, self.namespace)
        except self.api_error as exc:
            if getattr(exc, "status", None) == 404:
                return None
            raise

    @contextmanager
    def _api_errors(self) -> Iterator[None]:
        try:
            yield
        except self.api_error as exc:
            raise SandboxError(f"Kubernetes API: {exc}") from exc


def pod_ending(pod: Any, timed_out: bool) -> tuple[int | None, int | None, bool, bool]:
    """(exit code, signal, timed out, OOM-killed) from the pod's last status; None: we deleted it (SIGKILL).
    As under docker-init, a process killed by signal N exits 128+N; the kubelet marks its own deadline."""
    timed_out = timed_out or getattr(getattr(pod, "status", None), "reason", None) == "DeadlineExceeded"
    state = _terminated(pod) if pod is not None else None
    if state is None:
        return None, 9, timed_out, False
    code = int(state.exit_code)
    signal = code - 128 if code > 128 else None
    return (None if (timed_out or signal) else code), signal, timed_out, state.reason == "OOMKilled"


def _statuses(pod: Any) -> list[Any]:
    return list(getattr(pod.status, "container_statuses", None) or [])


def _terminated(pod: Any) -> Any:
    for status in _statuses(pod):
        if status.state.terminated is not None:
            return status.state.terminated
    return None
