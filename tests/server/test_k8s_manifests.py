"""deploy/k8s, the course server on Kubernetes, checked against the Kubernetes API's own schema: every object is
validated by the official client's generated models (unknown fields and missing required ones are errors), and
against the code it must agree with: the sandbox RBAC is exactly what `grade batch --plan-only` writes, the pod
runner's environment names, the backends' runtime class and card resource, the queues the server routes to,
`grade serve`'s options, and the labels, selectors, services, claims and secrets the objects name."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml")
models = pytest.importorskip("kubernetes.client", reason="the kubernetes client (pip install -e .[dev])")

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "k8s"
KINDS = {("apps/v1", "Deployment"): "V1Deployment", ("apps/v1", "StatefulSet"): "V1StatefulSet",
         ("v1", "Service"): "V1Service", ("v1", "ServiceAccount"): "V1ServiceAccount",
         ("v1", "PersistentVolumeClaim"): "V1PersistentVolumeClaim",
         ("rbac.authorization.k8s.io/v1", "Role"): "V1Role",
         ("rbac.authorization.k8s.io/v1", "RoleBinding"): "V1RoleBinding",
         ("networking.k8s.io/v1", "NetworkPolicy"): "V1NetworkPolicy"}


def documents(name: str | None = None) -> list[dict]:
    files = [DEPLOY / name] if name else sorted(p for p in DEPLOY.glob("*.yaml") if p.name != "kustomization.yaml")
    return [doc for path in files for doc in yaml.safe_load_all(path.read_text()) if doc]


def workloads() -> list[dict]:
    return [d for d in documents() if d["kind"] in ("Deployment", "StatefulSet")]


def test_every_object_is_valid_for_the_api() -> None:
    docs = documents()
    assert len(docs) >= 12
    for doc in docs:
        model = getattr(models, KINDS[(doc["apiVersion"], doc["kind"])])
        model.model_validate(doc)  # raises on an unknown or mistyped field, or a missing required one
    with pytest.raises(Exception, match="Extra inputs"):  # the check can fail
        models.V1Deployment.model_validate({**workloads()[0], "spec": {**workloads()[0]["spec"], "replica": 1}})
    kustomization = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    assert sorted(kustomization["resources"]) == sorted(p.name for p in DEPLOY.glob("*.yaml")
                                                        if p.name != "kustomization.yaml")


def test_the_sandbox_rbac_is_the_batchs() -> None:
    from grader.batch.distributed import sandbox_manifests

    assert documents("sandbox-rbac.yaml") == sandbox_manifests()


def test_selectors_services_claims_and_secrets_line_up() -> None:
    docs = documents()
    claims = {d["metadata"]["name"] for d in docs if d["kind"] == "PersistentVolumeClaim"}
    labels = []
    for w in workloads():
        spec, pod = w["spec"], w["spec"]["template"]
        assert spec["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items(), w["metadata"]["name"]
        labels.append(pod["metadata"]["labels"])
        for volume in pod["spec"].get("volumes", []):
            if "persistentVolumeClaim" in volume:
                assert volume["persistentVolumeClaim"]["claimName"] in claims
        for container in pod["spec"]["containers"]:
            for env in container.get("env", []):
                secret = env.get("valueFrom", {}).get("secretKeyRef")
                if secret:
                    assert secret["name"] == "bang-grader-db" and secret["key"] in ("password", "url")
    services = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Service"}
    for service in services.values():
        assert any(service["spec"]["selector"].items() <= lab.items() for lab in labels), service["metadata"]["name"]
    # what the commands name: the broker's and the database's services
    commands = " ".join(" ".join(c["command"]) for w in workloads() for c in w["spec"]["template"]["spec"]["containers"]
                        if "command" in c)
    for host in re.findall(r"redis://([a-z0-9-]+):6379", commands):
        assert host in services
    assert "bang-grader-redis" in services and "bang-grader-postgres" in services and "bang-grader" in services


def serve_options() -> set[str]:
    import typer

    from grader.cli.app import app

    command = typer.main.get_command(app).commands["serve"]  # type: ignore[attr-defined]
    return {opt for param in command.params for opt in param.opts}


def test_server_and_workers_run_grade_serve_as_the_code_expects() -> None:
    from grader.backends import get_backend
    from grader.backends.mlu import MLU_RESOURCE
    from grader.batch.distributed import SERVICE_ACCOUNT
    from grader.sandbox import pod_runner
    from grader.server.devices import device_type, queue_name

    known = serve_options()
    runner_env = {pod_runner.ENV_NAMESPACE, pod_runner.ENV_OWNER_NAME, pod_runner.ENV_OWNER_UID,
                  pod_runner.ENV_CLAIM, pod_runner.ENV_CLAIM_ROOT, pod_runner.ENV_IMAGE}
    workers = {}
    for w in workloads():
        if w["spec"]["template"]["metadata"]["labels"].get("component") not in ("server", "worker"):
            continue
        pod = w["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        command = container["command"]
        assert command[:4] == ["python", "-m", "grader.cli", "serve"], command
        assert {a for a in command[4:] if a.startswith("-")} <= known, command
        env = {e["name"]: e for e in container["env"]}
        assert runner_env <= env.keys()  # the pod runner's settings (PodSettings.from_env)
        claim_root = env[pod_runner.ENV_CLAIM_ROOT]["value"]
        assert any(m["mountPath"] == claim_root for m in container["volumeMounts"])
        assert pod["serviceAccountName"] == SERVICE_ACCOUNT and pod["automountServiceAccountToken"] is True
        assert MLU_RESOURCE not in str(container.get("resources"))  # never a card in the server or a worker
        if "--worker-only" in command:
            options = dict(zip(command[4:], command[5:], strict=False))
            backend = options["--backend"]
            # a worker pod has no card to read its type from: an mlu worker must state it
            assert backend == "emu" or "--device-type" in options, command
            kind = device_type(options.get("--device-type") or options.get("--device"))
            queue = queue_name(backend, kind)
            assert queue not in workers, queue  # one Deployment per device type
            workers[queue] = pod
            if backend == "mlu":  # its node and its run pods' nodes have cards of its type
                assert pod["nodeSelector"] == {"bang-grader/device": kind}, pod.get("nodeSelector")
                selector = env[pod_runner.ENV_NODE_SELECTOR]["value"]
                assert dict(pod_runner.node_selector(selector)) == pod["nodeSelector"], selector
        else:
            assert "--no-workers" in command
            assert "--device-type" not in command  # the -a assignments ask for the table's default type
    default = device_type(None)
    assert set(workers) == {f"grade.emu.{default}", "grade.mlu.mlu370-x8", "grade.mlu.mlu370-x4"}, workers
    assert workers[f"grade.emu.{default}"].get("runtimeClassName") == get_backend("emu").pod_runtime_class
    assert all("runtimeClassName" not in workers[q] for q in ("grade.mlu.mlu370-x8", "grade.mlu.mlu370-x4"))
    assert get_backend("mlu").pod_resources == {MLU_RESOURCE: "1"}  # each run pod it starts takes one card
