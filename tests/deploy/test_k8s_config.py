"""deploy/k8s/: the rendered config (a valid specdec config where SPECDEC_CONFIG points), the API keys Secret
mounted as compose mounts it, no key in the tree, and the gateway autoscaling on its queue."""

from __future__ import annotations

import os
import re

import pytest
import yaml
from deploy_support import DRAIN_S, ROOT, parse_cli
from k8s_support import (
    DRAFT_DNS,
    GPU_OVERLAYS,
    K8S,
    OBJECTS,
    OVERLAYS,
    README,
    by_kind,
    container,
    deployments,
    pod_spec,
)

# --- config, keys, autoscaling -------------------------------------------------------------------------


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_configmap_is_a_valid_specdec_config(overlay, tmp_path, monkeypatch):
    from specdec.serving.config import load_config

    for key in [key for key in os.environ if key.startswith("SPECDEC_")]:
        monkeypatch.delenv(key)
    (configmap,) = by_kind("ConfigMap", overlay).values()
    assert re.fullmatch(r"specdec-config-[a-z0-9]{10}", configmap["metadata"]["name"]), "generated: a new name per config"
    path = tmp_path / "specdec.yaml"
    path.write_text(configmap["data"]["specdec.yaml"], encoding="utf-8")
    config = load_config(path)
    assert config.verify_service.draft_endpoint == f"dns:///{DRAFT_DNS}:50051"
    assert config.draft_service.grace_seconds == DRAIN_S["draft"]
    assert config.verify_service.grace_seconds == DRAIN_S["verify"]
    assert config.model.target_path.startswith("/models/") and config.model.draft_path.startswith("/models/")
    gateway_args = parse_cli(container(deployments(overlay)["gateway"])["args"])
    assert config.serving.api_keys_file == gateway_args.api_keys_file
    if overlay == "cpu-tiny":
        assert (config.model.device, config.model.draft_device, config.model.dtype) == ("cpu", "cpu", "float32")


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_configmap_reference_resolves(overlay):
    configmaps = by_kind("ConfigMap", overlay)
    for name, deployment in deployments(overlay).items():
        for volume in pod_spec(deployment)["volumes"]:
            if "configMap" in volume:
                assert volume["configMap"]["name"] in configmaps, f"{overlay} {name}: ConfigMap {volume['configMap']['name']}"


def compose_gateway_keys_file() -> str:
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text(encoding="utf-8"))
    return parse_cli(compose["services"]["gateway"]["command"]).api_keys_file


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_gateway_reads_keys_from_the_secret_where_compose_mounts_them(overlay):
    gateway = deployments(overlay)["gateway"]
    keys_file = parse_cli(container(gateway)["args"]).api_keys_file
    assert keys_file == compose_gateway_keys_file() == "/run/secrets/api_keys"
    volumes = {volume["name"]: volume for volume in pod_spec(gateway)["volumes"]}
    (mount,) = [mount for mount in container(gateway)["volumeMounts"] if keys_file.startswith(mount["mountPath"] + "/")]
    assert "subPath" not in mount, "a subPath mount would never see rotated keys"
    assert mount.get("readOnly") is True
    secret = volumes[mount["name"]]["secret"]
    assert secret["secretName"] == "specdec-api-keys" and not secret.get("optional"), "no keys file: the gateway does not start"
    # Not rendered: `kubectl apply -k` must never replace real keys. The README says how to create it.
    assert "specdec-api-keys" not in by_kind("Secret", overlay)
    text = README.read_text(encoding="utf-8")
    assert "create secret generic specdec-api-keys --from-file=api_keys=" in text


KEY_LIKE = [
    re.compile(pattern)
    for pattern in (
        r"\bsk-[A-Za-z0-9_-]{8,}",  # OpenAI-style
        r"\b[A-Fa-f0-9]{32,}\b",  # hex tokens (openssl rand -hex)
        r"(?=[A-Za-z0-9+_=-]*\d[A-Za-z0-9+_=-]*\d[A-Za-z0-9+_=-]*\d[A-Za-z0-9+_=-]*\d)[A-Za-z0-9+_=-]{32,}",  # base64-ish, 4+ digits
        r"-----BEGIN [A-Z ]*PRIVATE KEY-----",
    )
]


def test_nothing_in_deploy_k8s_looks_like_a_key():
    assert not [obj for _, obj in OBJECTS if obj["kind"] == "Secret"], "no Secret is rendered"
    for path in [*K8S.rglob("*.yaml"), README]:
        text = re.sub(r"sha256:[a-f0-9]{64}", "", path.read_text(encoding="utf-8"))
        for pattern in KEY_LIKE:
            found = pattern.search(text)
            assert not found, f"{path.relative_to(ROOT)} contains something that looks like a key: {found.group(0)[:12]}..."


@pytest.mark.parametrize("overlay", GPU_OVERLAYS)
def test_gateway_autoscales_on_its_queue(overlay):
    (hpa,) = by_kind("HorizontalPodAutoscaler", overlay).values()
    assert hpa["apiVersion"] == "autoscaling/v2"
    target = hpa["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("Deployment", "gateway")
    assert hpa["spec"]["minReplicas"] >= 2, "never below the PDB's needs"
    (metric,) = hpa["spec"]["metrics"]
    assert metric["type"] == "Pods" and metric["pods"]["metric"]["name"] == "specdec_requests_waiting"
    metrics_source = (ROOT / "specdec" / "serving" / "metrics.py").read_text(encoding="utf-8")
    assert '"specdec_requests_waiting"' in metrics_source, "the HPA's metric is one the gateway exports"
