"""The pod-native runner: the phase pod against the hardening list (derived from Limits), the manifest set
(RBAC + NetworkPolicy), runner selection from the environment, and a real cluster when one answers."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from grader.backends import get_backend
from grader.backends.emu import EmuBackend
from grader.backends.mlu import MLU_RESOURCE
from grader.batch.distributed import (
    SERVICE_ACCOUNT,
    WORK_DIR,
    kubernetes_job,
    sandbox_manifests,
    write_kubernetes_job,
)
from grader.batch.store import ResultStore
from grader.sandbox.base import Limits, Mounts, Phase, SandboxError
from grader.sandbox.pod_runner import (
    ENV_CLAIM,
    ENV_CLAIM_ROOT,
    ENV_IMAGE,
    ENV_NAMESPACE,
    ENV_OWNER_NAME,
    ENV_OWNER_UID,
    ENV_SA_DIR,
    PHASE_LABEL,
    POD_START_SECONDS,
    RLIMIT_SHIM,
    PodSettings,
    phase_pod,
)
from grader.sandbox.watch import FLOOD_FACTOR

REPO = Path(__file__).resolve().parents[2]
LIMITS = [
    Limits(),
    Limits(wall_seconds=12.5, memory_bytes=3 << 30, cpus=2.5, file_size_bytes=8 << 20, open_files=77,
           tmpfs_bytes=100 << 20, log_bytes=1 << 16),
]


def claim_mounts(root: Path) -> Mounts:
    made = Mounts(submission=root / "intake" / "ann", build=root / "tmp" / "w" / "build", io=root / "tmp" / "w" / "io")
    for path in (made.submission, made.build, made.io):
        path.mkdir(parents=True)
    return made


def settings(root: Path, owner: bool = False) -> PodSettings:
    return PodSettings("grading", "batch-pvc", root, "reg/sandbox:1", *(("worker-0", "uid-1") if owner else ()))


def container_of(pod: dict) -> dict:
    (container,) = pod["spec"]["containers"]
    return container


@pytest.mark.parametrize("limits", LIMITS, ids=["default", "custom"])
def test_phase_pod_is_hardened_and_derived_from_limits(tmp_path, limits):
    mounts = claim_mounts(tmp_path)
    pod = phase_pod("p", Phase.RUN, ["python3", "-m", "bang_harness", "run"], mounts, limits, {"X": "1"},
                    settings(tmp_path), get_backend("emu"), 10001, 10002)
    spec, container = pod["spec"], container_of(pod)
    assert spec["runtimeClassName"] == EmuBackend.pod_runtime_class == "gvisor"
    assert spec["automountServiceAccountToken"] is False and spec["enableServiceLinks"] is False
    assert (spec["hostNetwork"], spec["hostPID"], spec["hostIPC"]) == (False, False, False)
    assert spec["restartPolicy"] == "Never"
    assert spec["activeDeadlineSeconds"] == math.ceil(limits.wall_seconds) + POD_START_SECONDS
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    ctx = container["securityContext"]
    assert ctx["runAsNonRoot"] is True and (ctx["runAsUser"], ctx["runAsGroup"]) == (10001, 10002)
    assert ctx["readOnlyRootFilesystem"] is True
    assert ctx["allowPrivilegeEscalation"] is False and ctx["privileged"] is False
    assert ctx["capabilities"] == {"drop": ["ALL"]}
    assert ctx["seccompProfile"] == {"type": "RuntimeDefault"}
    expected = {"cpu": f"{math.ceil(limits.cpus * 1000)}m", "memory": str(limits.memory_bytes),
                "ephemeral-storage": str(limits.tmpfs_bytes + limits.log_bytes * FLOOD_FACTOR)}
    assert container["resources"] == {"limits": expected, "requests": expected}
    assert MLU_RESOURCE not in container["resources"]["limits"]
    assert pod["metadata"]["labels"][PHASE_LABEL] == "run"
    assert container["image"] == "reg/sandbox:1"
    assert container["command"] == ["python3", "-c", RLIMIT_SHIM, str(limits.open_files),
                                    str(limits.file_size_bytes), "python3", "-m", "bang_harness", "run"]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["X"] == "1" and env["BANG_GRADER_PHASE"] == "run" and env["HOME"] == "/tmp"
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["batch"]["persistentVolumeClaim"] == {"claimName": "batch-pvc"}
    assert volumes["tmp"]["emptyDir"] == {"sizeLimit": str(limits.tmpfs_bytes)}
    mounted = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert mounted["/submission"] == {"name": "batch", "mountPath": "/submission", "subPath": "intake/ann",
                                      "readOnly": True}
    assert mounted["/build"]["subPath"] == "tmp/w/build" and mounted["/build"]["readOnly"] is True
    assert mounted["/io"]["subPath"] == "tmp/w/io" and mounted["/io"]["readOnly"] is False
    assert "ownerReferences" not in pod["metadata"]


def test_build_phase_writes_build_and_mlu_gets_one_card_without_gvisor(tmp_path):
    mounts = claim_mounts(tmp_path)
    pod = phase_pod("p", Phase.BUILD, ["true"], mounts, Limits(), None, settings(tmp_path, owner=True),
                    get_backend("mlu"),
                    10001, 10001)
    assert "runtimeClassName" not in pod["spec"]  # gVisor passes no Cambricon device through
    assert container_of(pod)["resources"]["limits"][MLU_RESOURCE] == "1"
    mounted = {m["mountPath"]: m for m in container_of(pod)["volumeMounts"]}
    assert mounted["/build"]["readOnly"] is False
    (owner,) = pod["metadata"]["ownerReferences"]  # deleted with the grading pod if it dies
    assert (owner["kind"], owner["name"], owner["uid"]) == ("Pod", "worker-0", "uid-1")


def test_a_node_selector_from_the_environment_reaches_the_phase_pod(tmp_path):
    """A course server's MLU worker of one device type has its run pods scheduled on nodes of that type."""
    from grader.sandbox.pod_runner import ENV_NODE_SELECTOR

    environ = {ENV_NAMESPACE: "grading", ENV_CLAIM: "batch-pvc", ENV_CLAIM_ROOT: str(tmp_path), ENV_IMAGE: "reg/s:1",
               ENV_NODE_SELECTOR: "bang-grader/device=mlu370-x4, zone=a"}
    mounts = claim_mounts(tmp_path)
    pod = phase_pod("p", Phase.RUN, ["true"], mounts, Limits(), None, PodSettings.from_env(environ),
                    get_backend("mlu"), 10001, 10001)
    assert pod["spec"]["nodeSelector"] == {"bang-grader/device": "mlu370-x4", "zone": "a"}
    assert "nodeSelector" not in phase_pod("p", Phase.RUN, ["true"], mounts, Limits(), None, settings(tmp_path),
                                           get_backend("mlu"), 1, 1)["spec"]
    with pytest.raises(SandboxError, match="not key=value"):
        PodSettings.from_env({**environ, ENV_NODE_SELECTOR: "mlu370-x4"})


def test_a_folder_off_the_claim_is_refused(tmp_path):
    mounts = claim_mounts(tmp_path / "elsewhere")
    with pytest.raises(SandboxError, match="not on the batch volume"):
        phase_pod("p", Phase.RUN, ["true"], mounts, Limits(), None, settings(tmp_path / "claim"), get_backend("emu"), 1, 1)


def test_rlimit_shim_sets_the_limits_then_execs():
    probe = "import resource as r; print(r.getrlimit(r.RLIMIT_NOFILE)[0], r.getrlimit(r.RLIMIT_FSIZE)[0], " \
            "r.getrlimit(r.RLIMIT_CORE)[0])"
    out = subprocess.run([sys.executable, "-c", RLIMIT_SHIM, "99", str(5 << 20), sys.executable, "-c", probe],
                         capture_output=True, text=True, timeout=30, check=True)
    assert out.stdout.split() == ["99", str(5 << 20), "0"]


def test_manifest_set_has_rbac_networkpolicy_and_a_token_only_for_the_worker(tmp_path):
    store = ResultStore(tmp_path / "batch")
    path = write_kubernetes_job(store, [], backend="emu", parallelism=2, image="reg/grader:1",
                                sandbox_image="reg/sandbox:1")
    items = json.loads(path.read_text())["items"]
    kinds = {item["kind"]: item for item in items}
    assert set(kinds) == {"ServiceAccount", "Role", "RoleBinding", "NetworkPolicy", "Job"}
    assert (store.root / WORK_DIR).is_dir()
    role = kinds["Role"]
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "get", "delete"]},
                             {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]}]
    binding = kinds["RoleBinding"]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": SERVICE_ACCOUNT}]
    policy = kinds["NetworkPolicy"]["spec"]
    assert policy["policyTypes"] == ["Ingress", "Egress"] and policy["ingress"] == [] and policy["egress"] == []
    (selector,) = policy["podSelector"]["matchExpressions"]
    pod = phase_pod("p", Phase.BUILD, ["true"], claim_mounts(store.root), Limits(), None, settings(store.root),
                    get_backend("emu"), 1, 1)
    assert selector == {"key": PHASE_LABEL, "operator": "Exists"} and PHASE_LABEL in pod["metadata"]["labels"]
    worker = kinds["Job"]["spec"]["template"]["spec"]
    assert worker["serviceAccountName"] == SERVICE_ACCOUNT and worker["automountServiceAccountToken"] is True
    assert kinds["ServiceAccount"]["automountServiceAccountToken"] is False  # opt-in per pod, the worker only
    env = {e["name"]: e for e in worker["containers"][0]["env"]}
    assert env[ENV_NAMESPACE]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    assert env[ENV_OWNER_UID]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.uid"
    assert env[ENV_OWNER_NAME]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert env[ENV_CLAIM_ROOT]["value"] == str(store.root) and env[ENV_IMAGE]["value"] == "reg/sandbox:1"
    assert env["TMPDIR"]["value"] == str(store.root / WORK_DIR)
    mlu = kubernetes_job(store, [], backend="mlu", parallelism=1)["spec"]["template"]["spec"]
    assert "runtimeClassName" not in mlu and MLU_RESOURCE not in mlu["containers"][0]["resources"]["limits"]
    assert sandbox_manifests() == items[:4]


# --- selection from the environment (a real dead Docker socket, real service-account files) --------------

@pytest.fixture
def no_docker(monkeypatch, tmp_path):
    pytest.importorskip("kubernetes", reason="the k8s extra is not installed (pip install 'bang-grader[k8s]')")
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")
    for name in ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT", ENV_SA_DIR, ENV_NAMESPACE, ENV_CLAIM,
                 ENV_CLAIM_ROOT, ENV_IMAGE):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def in_a_pod(monkeypatch, tmp_path: Path, configured: bool = True) -> None:
    sa = tmp_path / "sa"
    sa.mkdir()
    (sa / "token").write_text("token")
    (sa / "ca.crt").write_text("not checked before the first request")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    monkeypatch.setenv(ENV_SA_DIR, str(sa))
    if configured:
        for name, value in ((ENV_NAMESPACE, "grading"), (ENV_CLAIM, "pvc"), (ENV_CLAIM_ROOT, str(tmp_path)),
                            (ENV_IMAGE, "reg/sandbox:1")):
            monkeypatch.setenv(name, value)


def test_outside_a_cluster_batch_without_docker_is_refused(no_docker):
    from grader.sandbox.select import SandboxRefused, select_runner

    with pytest.raises(SandboxRefused, match="KUBERNETES_SERVICE_HOST unset"):
        select_runner("auto", batch=True, backend=get_backend("emu"))


def test_a_pod_without_a_loadable_service_account_is_refused(no_docker, tmp_path):
    from grader.sandbox.select import SandboxRefused, select_runner

    no_docker.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    no_docker.setenv("KUBERNETES_SERVICE_PORT", "443")
    no_docker.setenv(ENV_SA_DIR, str(tmp_path / "absent"))
    with pytest.raises(SandboxRefused, match="in-cluster config does not load"):
        select_runner("docker", batch=True, backend=get_backend("emu"))


@pytest.mark.parametrize("backend", ["emu", "mlu"])
def test_in_a_pod_without_docker_the_pod_runner_is_chosen(no_docker, tmp_path, backend):
    from grader.sandbox.pod_runner import PodRunner
    from grader.sandbox.select import select_runner

    in_a_pod(no_docker, tmp_path)
    runner = select_runner("auto", batch=True, backend=get_backend(backend))
    assert isinstance(runner, PodRunner) and runner.backend == backend
    assert runner.settings == PodSettings("grading", "pvc", tmp_path, "reg/sandbox:1")
    assert runner.api.api_client.configuration.host == "https://10.0.0.1:443"


def test_in_a_pod_without_the_manifest_settings_is_refused(no_docker, tmp_path):
    from grader.sandbox.select import SandboxRefused, select_runner

    in_a_pod(no_docker, tmp_path, configured=False)
    with pytest.raises(SandboxRefused, match=f"{ENV_NAMESPACE}.*unset"):
        select_runner("auto", batch=True, backend=get_backend("emu"))


# --- a real cluster ---------------------------------------------------------------------------------------

def cluster_settings() -> PodSettings:
    """From kubeconfig and BANG_GRADER_TEST_K8S_{NAMESPACE,CLAIM,CLAIM_ROOT,IMAGE}: the claim must be mounted
    here at CLAIM_ROOT (e.g. a kind cluster with the folder as extraMount behind a hostPath PV)."""
    pytest.importorskip("kubernetes", reason="the k8s extra is not installed (pip install 'bang-grader[k8s]')")
    from grader.sandbox.pod_runner import kubeconfig_api

    try:
        kubeconfig_api().get_api_resources()
    except Exception as exc:  # no kubeconfig, or nothing answers at its address
        pytest.skip(f"no Kubernetes cluster answers: {exc}")
    env = {k: os.environ.get(f"BANG_GRADER_TEST_K8S_{k}") for k in ("NAMESPACE", "CLAIM", "CLAIM_ROOT", "IMAGE")}
    missing = [f"BANG_GRADER_TEST_K8S_{k}" for k, v in env.items() if not v]
    if missing:
        pytest.skip(f"a cluster answers but {', '.join(missing)} unset")
    return PodSettings(env["NAMESPACE"], env["CLAIM"], Path(env["CLAIM_ROOT"]), env["IMAGE"])  # type: ignore[arg-type]


def test_real_cluster_builds_the_bundled_example():
    from grader.sandbox.pod_runner import PodRunner, kubeconfig_api

    cluster = cluster_settings()
    work = cluster.claim_root / f"pod-runner-test-{uuid.uuid4().hex[:8]}"
    try:
        shutil.copytree(REPO / "reference_kernels" / "example", work / "submission")
        mounts = Mounts(submission=work / "submission", build=work / "build", io=work / "io")
        mounts.build.mkdir()
        mounts.io.mkdir()
        runner = PodRunner(cluster, api=kubeconfig_api())
        out = runner.run(Phase.BUILD, ["python3", "-m", "bang_harness", "build", "--backend", "emu"], mounts,
                         Limits(wall_seconds=600))
        assert out.ok, out
        assert json.loads((mounts.build / "build.json").read_text())["ok"] is True
        flood = runner.run(Phase.RUN, ["python3", "-c", "while True: print('x' * 4096)"], mounts,
                           Limits(wall_seconds=60, log_bytes=1 << 12))
        assert not flood.ok and any("output_limit_exceeded" in n for n in flood.notes)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def test_every_manifest_round_trips_the_clients_models(tmp_path):
    """The client drops keys its models do not know: a misspelt field would vanish here."""
    pytest.importorskip("kubernetes", reason="the k8s extra is not installed (pip install 'bang-grader[k8s]')")
    import kubernetes.client
    from kubernetes.client import ApiClient

    api = ApiClient()
    store = ResultStore(tmp_path / "batch")
    pod = phase_pod("p", Phase.BUILD, ["true"], claim_mounts(store.root), Limits(), None,
                    settings(store.root, owner=True), get_backend("mlu"), 1, 1)
    items = [*sandbox_manifests(), kubernetes_job(store, [], backend="emu", parallelism=1), pod]
    for item in items:
        model = getattr(kubernetes.client, f"V1{item['kind']}").from_dict(item)  # as PodRunner sends a pod
        assert api.sanitize_for_serialization(model) == item, item["kind"]


def pod_status(exit_code: int, reason: str | None = None, pod_reason: str | None = None) -> object:
    """A pod as read_namespaced_pod returns it (the client's own model, from the API's JSON)."""
    kubernetes = pytest.importorskip("kubernetes", reason="the k8s extra is not installed")
    terminated = {"exitCode": exit_code, **({"reason": reason} if reason else {})}
    status = {"phase": "Failed" if exit_code else "Succeeded", **({"reason": pod_reason} if pod_reason else {}),
              "containerStatuses": [{"name": "sandbox", "image": "i", "imageID": "", "ready": False,
                                     "restartCount": 0, "state": {"terminated": terminated}}]}
    return kubernetes.client.V1Pod.from_dict({"status": status})


@pytest.mark.parametrize(("case", "expected"), [
    ((0,), (0, None, False, False)),
    ((3, "Error"), (3, None, False, False)),
    ((137, "OOMKilled"), (None, 9, False, True)),
    ((139, "Error"), (None, 11, False, False)),
    ((137, "Error", "DeadlineExceeded"), (None, 9, True, False)),
])
def test_pod_ending_reads_exit_signal_oom_and_deadline(case, expected):
    from grader.sandbox.pod_runner import pod_ending

    assert pod_ending(pod_status(*case), timed_out=False) == expected


def test_a_pod_we_deleted_ends_by_sigkill():
    from grader.sandbox.pod_runner import pod_ending

    assert pod_ending(None, timed_out=True) == (None, 9, True, False)
    assert pod_ending(None, timed_out=False) == (None, 9, False, False)
