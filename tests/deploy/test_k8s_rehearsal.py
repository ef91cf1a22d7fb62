"""deploy/k8s/podman_kube.py, what deploy/k8s/smoke.sh runs the cpu-tiny overlay with, checked without podman:
its Pods keep what Kubernetes would run (image, args, user, mounts, the ConfigMap) and stand in for the rest as
its docstring says (Services as /etc/hosts entries, the Secret as a host directory, init containers as commands)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml
from deploy_support import ROLES, parse_cli
from k8s_support import K8S, by_kind, deployments, overlay_objects

SCRIPT = K8S / "podman_kube.py"


@pytest.fixture(scope="module")
def adapted(tmp_path_factory):
    work = tmp_path_factory.mktemp("rehearsal")
    rendered = work / "release.yaml"
    rendered.write_text(yaml.safe_dump_all(overlay_objects("cpu-tiny")), encoding="utf-8")
    (work / "secrets" / "specdec-api-keys").mkdir(parents=True)
    (work / "secrets" / "specdec-api-keys" / "api_keys").write_text("k\n", encoding="utf-8")
    command = [sys.executable, SCRIPT, "adapt", rendered, work / "pods", "--revision", "r1", "--ip-base", "10.213.77.11"]
    result = subprocess.run([*map(str, command), "--secrets-dir", str(work / "secrets")], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return work / "pods", result.stdout


def pod_of(pods, role):
    documents = list(yaml.safe_load_all((pods / f"{role}.yaml").read_text(encoding="utf-8")))
    (pod,) = [d for d in documents if d["kind"] == "Pod"]
    return pod, [d for d in documents if d["kind"] == "ConfigMap"]


def test_what_podman_does_not_run_is_said(adapted):
    _, printed = adapted
    for kind in ("Service", "NetworkPolicy", "Namespace"):
        for name in by_kind(kind, "cpu-tiny"):
            assert f"not run by podman: {kind}/{name}" in printed


@pytest.mark.parametrize("role", ROLES)
def test_each_deployment_becomes_one_pod_that_keeps_its_container(adapted, role):
    pods, _ = adapted
    pod, configmaps = pod_of(pods, role)
    original = deployments("cpu-tiny")[role]["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    (source,) = original["spec"]["containers"]
    for field in ("image", "args", "env", "resources", "securityContext", "volumeMounts"):
        assert container[field] == source[field], field
    assert pod["spec"]["securityContext"] == original["spec"]["securityContext"]
    assert pod["metadata"]["labels"] == original["metadata"]["labels"]
    # the probes move to <role>.probes.json, where `wait` runs them, unchanged
    probes = json.loads((pods / f"{role}.probes.json").read_text(encoding="utf-8"))[source["name"]]
    for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert kind not in container and probes.get(kind) == source.get(kind)
    assert {c["metadata"]["name"] for c in configmaps} == {v["configMap"]["name"] for v in original["spec"]["volumes"] if "configMap" in v}


def test_services_resolve_to_the_pods_they_select(adapted):
    pods, _ = adapted
    ips = {role: (pods / f"{role}.ip").read_text(encoding="utf-8") for role in ROLES}
    services = {"draft": "draft", "verify": "verify", "verify-headless": "verify", "gateway": "gateway"}
    for role in ROLES:
        pod, _ = pod_of(pods, role)
        hosts = {name: alias["ip"] for alias in pod["spec"]["hostAliases"] for name in alias["hostnames"]}
        for service, target in services.items():
            assert hosts[f"{service}.specdec.svc.cluster.local"] == ips[target]


def test_the_secret_is_a_host_directory_where_the_gateway_reads_keys(adapted):
    pods, _ = adapted
    pod, _ = pod_of(pods, "gateway")
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    (mount,) = [m for m in pod["spec"]["containers"][0]["volumeMounts"] if m["mountPath"] == "/run/secrets"]
    assert volumes[mount["name"]]["hostPath"]["path"].endswith("secrets/specdec-api-keys") and mount["readOnly"]


@pytest.mark.parametrize("role", ["draft", "verify"])
def test_init_containers_run_first_into_the_pods_volume(adapted, role):
    pods, _ = adapted
    pod, _ = pod_of(pods, role)
    assert "initContainers" not in pod["spec"]
    (command,) = json.loads((pods / f"{role}.init.json").read_text(encoding="utf-8"))
    (init,) = deployments("cpu-tiny")[role]["spec"]["template"]["spec"]["initContainers"]
    image_at = command.index(init["image"])
    assert parse_cli(command[image_at + 1 :]).command == "make-tiny-pair"
    assert command[command.index("--user") + 1] == "10001:10001" and "--read-only" in command
    claims = {v["name"]: v["persistentVolumeClaim"]["claimName"] for v in pod["spec"]["volumes"] if "persistentVolumeClaim" in v}
    assert f"{claims['models']}:/models" in command, "the init container writes the volume the service then mounts"
