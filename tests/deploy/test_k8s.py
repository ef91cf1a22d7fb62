"""Static checks of the Kubernetes manifests in deploy/k8s/ (and the manifests shown in its README):
each object validates offline against the Kubernetes OpenAPI schemas (kubernetes-validate, strict: unknown
fields fail), plus what the schemas cannot say: probes, resources, zero-downtime rollouts, drain time,
non-root Pods, GPUs, the headless draft Service behind verify's dns:/// endpoint, PodDisruptionBudgets,
no real keys in the Secret, and every specdec command line parsed by the real CLI parser."""

from __future__ import annotations

import base64
import os
import re

import pytest
from deploy_support import DRAIN_S, METRICS_PORTS, PORTS, ROLES, ROOT, parse_cli
from k8s_support import (
    DEPLOYMENTS,
    DRAFT_DNS,
    K8S,
    KUBERNETES_VERSION,
    NAMESPACE,
    OBJECTS,
    README,
    README_OBJECTS,
    by_kind,
    container,
    manifest_files,
    object_id,
    pod_spec,
    quantity,
    role_of,
    selects,
)

try:
    import kubernetes_validate
except ImportError:  # pragma: no cover - a missing dev dependency
    pytest.fail("kubernetes-validate is not installed: pip install 'kubernetes-validate>=1.30' (a dev dependency)", pytrace=False)

# --- schema -----------------------------------------------------------------------------------------


def test_there_are_manifests():
    assert manifest_files(), f"no manifests in {K8S}"
    kinds = {obj["kind"] for _, obj in OBJECTS}
    assert {
        "Namespace",
        "Deployment",
        "Service",
        "PodDisruptionBudget",
        "Secret",
        "ConfigMap",
        "HorizontalPodAutoscaler",
        "PersistentVolumeClaim",
    } <= kinds
    assert set(DEPLOYMENTS) == set(ROLES)


@pytest.mark.parametrize("item", OBJECTS + [("README.md", obj) for obj in README_OBJECTS], ids=object_id)
def test_manifest_validates_against_the_kubernetes_schema(item):
    name, obj = item
    try:
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.ValidationError as error:
        where = ".".join(str(part) for part in error.path)
        pytest.fail(f"{name}: {obj['kind']}/{obj['metadata']['name']} at {where}: {error.message}", pytrace=False)
    except (kubernetes_validate.SchemaNotFoundError, kubernetes_validate.InvalidSchemaError) as error:
        pytest.fail(f"{name}: {obj['kind']} {obj['apiVersion']}: {error.message}", pytrace=False)


def test_everything_is_in_the_specdec_namespace():
    for name, obj in OBJECTS + [("README.md", obj) for obj in README_OBJECTS]:
        if obj["kind"] == "Namespace":
            assert obj["metadata"]["name"] == NAMESPACE
        else:
            assert obj["metadata"].get("namespace") == NAMESPACE, f"{name}: {obj['kind']}/{obj['metadata']['name']}"


def test_names_are_unique_per_kind():
    seen = set()
    for name, obj in OBJECTS:
        key = (obj["kind"], obj["metadata"]["name"])
        assert key not in seen, f"{name}: {key} defined twice"
        seen.add(key)


# --- Deployments -------------------------------------------------------------------------------------

ALL_DEPLOYMENTS = list(DEPLOYMENTS.items()) + [(obj["metadata"]["name"], obj) for obj in README_OBJECTS if obj["kind"] == "Deployment"]


@pytest.fixture(params=ALL_DEPLOYMENTS, ids=lambda item: item[0])
def deployment(request) -> dict:
    return request.param[1]


def test_selector_matches_the_pod_template(deployment):
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert selects(deployment["spec"]["selector"], labels)


def test_rolling_update_without_unavailability(deployment):
    strategy = deployment["spec"].get("strategy", {})
    assert strategy.get("type") == "RollingUpdate"
    rolling = strategy.get("rollingUpdate", {})
    assert str(rolling.get("maxUnavailable")) in ("0", "0%"), "maxUnavailable: 0 (a new Pod is ready before an old one goes)"
    assert str(rolling.get("maxSurge")) not in ("0", "0%", "None")


def test_probes(deployment):
    role = role_of(deployment)
    main = container(deployment)
    port_names = {port["name"]: port["containerPort"] for port in main.get("ports", [])}
    for kind in ("readinessProbe", "livenessProbe"):
        probe = main.get(kind)
        assert probe, f"{deployment['metadata']['name']}: {kind}"
        if role == "gateway":
            get = probe.get("httpGet")
            assert get, f"gateway {kind} is an HTTP GET"
            assert get["path"] == ("/ready" if kind == "readinessProbe" else "/health")
            assert port_names.get(get["port"], get["port"]) == PORTS["gateway"]
        elif "grpc" in probe:
            assert probe["grpc"]["port"] == PORTS[role], f"{role} {kind}: grpc health on {PORTS[role]}"
        else:
            command = probe.get("exec", {}).get("command", [])
            assert command[:3] == ["specdec", "healthcheck", role], f"{role} {kind}: grpc probe or `specdec healthcheck {role}`"
            parse_cli(command[1:])
    if role != "gateway":
        startup = main.get("startupProbe")
        assert startup, f"{role}: a startupProbe covers the model load, so liveness does not kill a loading Pod"
        budget = startup.get("periodSeconds", 10) * startup.get("failureThreshold", 3)
        assert budget >= 300, f"{role}: the startupProbe allows only {budget} s to load the model"


def test_resources(deployment):
    role = role_of(deployment)
    resources = container(deployment).get("resources", {})
    requests, limits = resources.get("requests", {}), resources.get("limits", {})
    assert "cpu" in requests and "memory" in requests, f"{role}: cpu and memory requests"
    assert "memory" in limits, f"{role}: a memory limit"
    assert quantity(limits["memory"]) >= quantity(requests["memory"])
    if role in ("draft", "verify"):
        assert int(limits.get("nvidia.com/gpu", 0)) >= 1, f"{role}: nvidia.com/gpu limit"
        if "nvidia.com/gpu" in requests:
            assert requests["nvidia.com/gpu"] == limits["nvidia.com/gpu"]
    else:
        assert "nvidia.com/gpu" not in limits and "nvidia.com/gpu" not in requests, "the gateway is CPU only"


def test_termination_grace_covers_the_drain(deployment):
    role = role_of(deployment)
    grace = pod_spec(deployment).get("terminationGracePeriodSeconds")
    assert grace is not None and grace >= 20, f"{role}: terminationGracePeriodSeconds >= 20"
    pre_stop = container(deployment).get("lifecycle", {}).get("preStop", {})
    sleep = 0
    if pre_stop.get("exec", {}).get("command", [None])[0] == "sleep":
        sleep = int(pre_stop["exec"]["command"][1])
    elif "sleep" in pre_stop:
        sleep = int(pre_stop["sleep"]["seconds"])
    assert grace >= sleep + DRAIN_S[role] + 5, f"{role}: {grace} s is not above preStop {sleep} s + drain {DRAIN_S[role]} s"


def test_runs_as_non_root(deployment):
    pod_context = pod_spec(deployment).get("securityContext", {})
    main = container(deployment)
    context = {**pod_context, **main.get("securityContext", {})}
    assert context.get("runAsNonRoot") is True, "runAsNonRoot"
    assert context.get("runAsUser", 10001) != 0
    assert main.get("securityContext", {}).get("allowPrivilegeEscalation") is False
    assert "ALL" in main.get("securityContext", {}).get("capabilities", {}).get("drop", [])
    assert pod_spec(deployment).get("automountServiceAccountToken") is False, "no API token: the services never call the API server"


def test_models_are_mounted_read_only(deployment):
    role = role_of(deployment)
    mounts = {mount["name"]: mount for mount in container(deployment).get("volumeMounts", [])}
    volumes = {volume["name"]: volume for volume in pod_spec(deployment).get("volumes", [])}
    models = [mount for mount in mounts.values() if mount["mountPath"] == "/models"]
    if role == "gateway":
        assert not models, "the gateway loads no model"
        return
    assert len(models) == 1, f"{role}: /models"
    assert models[0].get("readOnly") is True
    claim = volumes[models[0]["name"]].get("persistentVolumeClaim")
    assert claim and claim.get("readOnly") is True, f"{role}: /models is a read-only PVC"
    assert claim["claimName"] in by_kind("PersistentVolumeClaim")


def test_read_only_root_filesystem_has_a_writable_tmp(deployment):
    main = container(deployment)
    assert main.get("securityContext", {}).get("readOnlyRootFilesystem") is True
    volumes = {volume["name"]: volume for volume in pod_spec(deployment)["volumes"]}
    tmp = [mount for mount in main["volumeMounts"] if mount["mountPath"] == "/tmp"]
    assert tmp and "emptyDir" in volumes[tmp[0]["name"]], "caches (HF_HOME, XDG_CACHE_HOME) live under /tmp"


def test_args_parse_with_the_specdec_cli(deployment):
    role = role_of(deployment)
    main = container(deployment)
    assert "command" not in main, "the image's ENTRYPOINT is specdec; Deployments set args only"
    args = parse_cli(main["args"])
    assert (args.command, args.service) == ("serve", role)
    assert args.port == PORTS[role]
    ports = {port["containerPort"] for port in main["ports"]}
    assert PORTS[role] in ports and METRICS_PORTS[role] in ports
    if role != "gateway":
        assert args.metrics_port == METRICS_PORTS[role]
    annotations = deployment["spec"]["template"]["metadata"].get("annotations", {})
    assert annotations.get("prometheus.io/scrape") == "true"
    assert annotations.get("prometheus.io/port") == str(METRICS_PORTS[role])
    assert annotations.get("prometheus.io/path") == "/metrics"


def test_gpu_roles_have_two_replicas_and_the_gateway_too():
    for role in ROLES:
        assert DEPLOYMENTS[role]["spec"]["replicas"] == 2, role


def test_one_image_pinned_across_roles():
    images = {container(deployment)["image"] for deployment in DEPLOYMENTS.values()}
    assert len(images) == 1, f"one image for the three roles: {images}"
    (image,) = images
    tag = image.rpartition(":")[2]
    assert "/" not in tag and tag != "latest" and re.search(r"\d", tag), f"pin a version: {image}"


# --- the draft -> verify -> gateway wiring ------------------------------------------------------------


def test_verify_round_robins_over_a_headless_draft_service():
    services = by_kind("Service")
    draft_service = services["draft"]
    assert draft_service["spec"].get("clusterIP") == "None", "the draft Service is headless (clusterIP: None)"
    assert selects(draft_service["spec"]["selector"], DEPLOYMENTS["draft"]["spec"]["template"]["metadata"]["labels"])
    assert 50051 in {port["port"] for port in draft_service["spec"]["ports"]}
    for name, deployment in ALL_DEPLOYMENTS:
        if role_of(deployment) == "verify":
            endpoint = parse_cli(container(deployment)["args"]).draft_endpoint
            assert endpoint == f"dns:///{DRAFT_DNS}:50051", f"{name}: --draft-endpoint {endpoint}"


def test_gateway_reaches_every_verify_pod():
    services = by_kind("Service")
    endpoint = parse_cli(container(DEPLOYMENTS["gateway"])["args"]).verify_endpoint
    match = re.fullmatch(r"(?:dns:///)?([a-z0-9-]+)\.specdec\.svc\.cluster\.local:(\d+)", endpoint)
    assert match, f"--verify-endpoint {endpoint}"
    service = services[match.group(1)]
    assert int(match.group(2)) in {port["port"] for port in service["spec"]["ports"]}
    if endpoint.startswith("dns:///"):
        assert service["spec"].get("clusterIP") == "None", "dns:/// round-robin needs a headless Service"
    verify_pods = DEPLOYMENTS["verify"]["spec"]["template"]["metadata"]["labels"]
    assert selects(service["spec"]["selector"], verify_pods)
    assert services["verify"]["spec"].get("type", "ClusterIP") == "ClusterIP" and services["verify"]["spec"].get("clusterIP") != "None"


def test_services_select_pods_and_name_their_ports():
    pods = [obj["spec"]["template"] for obj in DEPLOYMENTS.values()]
    for name, service in by_kind("Service").items():
        targets = [pod for pod in pods if selects(service["spec"]["selector"], pod["metadata"]["labels"])]
        assert targets, f"Service {name} selects no Pods"
        for port in service["spec"]["ports"]:
            target = port.get("targetPort", port["port"])
            for pod in targets:
                declared = {p.get("name"): p["containerPort"] for p in pod["spec"]["containers"][0]["ports"]}
                assert target in declared or target in declared.values(), f"Service {name}: targetPort {target}"


def test_canary_in_the_readme_shares_the_verify_services():
    canaries = [obj for obj in README_OBJECTS if obj["kind"] == "Deployment"]
    assert canaries, "the README shows the canary Deployment"
    stable = DEPLOYMENTS["verify"]
    services = by_kind("Service")
    for canary in canaries:
        labels = canary["spec"]["template"]["metadata"]["labels"]
        assert labels.get("track") == "canary" and canary["spec"]["replicas"] == 1
        assert selects(services["verify"]["spec"]["selector"], labels), "the canary is behind the verify Service"
        assert selects(services["verify-headless"]["spec"]["selector"], labels)
        assert not selects(stable["spec"]["selector"], labels), "the stable Deployment must not adopt canary Pods"
        assert not selects(canary["spec"]["selector"], stable["spec"]["template"]["metadata"]["labels"])
    text = README.read_text(encoding="utf-8")
    for needed in ("kubectl -n specdec rollout status", "rollout undo", "track: canary"):
        assert needed in text, f"the README covers {needed}"


def test_each_deployment_has_a_pod_disruption_budget():
    budgets = by_kind("PodDisruptionBudget")
    for name, deployment in DEPLOYMENTS.items():
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        matching = [budget for budget in budgets.values() if selects(budget["spec"]["selector"], labels)]
        assert len(matching) == 1, f"{name}: exactly one PodDisruptionBudget selects it (found {len(matching)})"
        (budget,) = matching
        assert budget["apiVersion"] == "policy/v1"
        assert budget["spec"].get("minAvailable") == 1
        assert budget["spec"]["minAvailable"] < deployment["spec"]["replicas"], f"{name}: a node drain can proceed"


# --- config, keys, autoscaling -------------------------------------------------------------------------


def test_configmap_is_a_valid_specdec_config(tmp_path, monkeypatch):
    from specdec.serving.config import load_config

    for key in [key for key in os.environ if key.startswith("SPECDEC_")]:
        monkeypatch.delenv(key)
    (configmap,) = by_kind("ConfigMap").values()
    path = tmp_path / "specdec.yaml"
    path.write_text(configmap["data"]["specdec.yaml"], encoding="utf-8")
    config = load_config(path)
    assert config.verify_service.draft_endpoint == f"dns:///{DRAFT_DNS}:50051"
    assert config.draft_service.grace_seconds == DRAIN_S["draft"]
    assert config.verify_service.grace_seconds == DRAIN_S["verify"]
    assert config.model.target_path.startswith("/models/") and config.model.draft_path.startswith("/models/")
    gateway_args = parse_cli(container(DEPLOYMENTS["gateway"])["args"])
    assert config.serving.api_keys_file == gateway_args.api_keys_file


def test_config_file_is_mounted_where_specdec_config_points(deployment):
    main = container(deployment)
    env = {item["name"]: item.get("value") for item in main.get("env", [])}
    config_path = env.get("SPECDEC_CONFIG")
    assert config_path, "SPECDEC_CONFIG names the mounted specdec.yaml"
    volumes = {volume["name"]: volume for volume in pod_spec(deployment)["volumes"]}
    mounted = [(mount, volumes[mount["name"]]) for mount in main["volumeMounts"] if config_path.startswith(mount["mountPath"] + "/")]
    assert mounted, f"nothing is mounted at {config_path}"
    mount, volume = mounted[0]
    assert mount.get("readOnly") is True
    assert volume["configMap"]["name"] in by_kind("ConfigMap")
    assert config_path.rsplit("/", 1)[1] in by_kind("ConfigMap")[volume["configMap"]["name"]]["data"]
    for key in env:
        assert not re.search(r"API_KEYS?|SECRET|PASSWORD|TOKEN", key), f"{key}: keys come from the Secret file, not env"


def test_gateway_reads_keys_from_the_secret_volume():
    gateway = DEPLOYMENTS["gateway"]
    keys_file = parse_cli(container(gateway)["args"]).api_keys_file
    volumes = {volume["name"]: volume for volume in pod_spec(gateway)["volumes"]}
    (mount,) = [mount for mount in container(gateway)["volumeMounts"] if keys_file.startswith(mount["mountPath"] + "/")]
    assert "subPath" not in mount, "a subPath mount would never see rotated keys"
    assert mount.get("readOnly") is True
    secret_name = volumes[mount["name"]]["secret"]["secretName"]
    secret = by_kind("Secret")[secret_name]
    assert secret_name == "specdec-api-keys"
    assert keys_file.rsplit("/", 1)[1] in {**secret.get("stringData", {}), **secret.get("data", {})}


KEY_LIKE = [
    re.compile(pattern)
    for pattern in (
        r"\bsk-[A-Za-z0-9_-]{8,}",  # OpenAI-style
        r"\b[A-Fa-f0-9]{32,}\b",  # hex tokens (openssl rand -hex)
        r"(?=[A-Za-z0-9+_=-]*\d[A-Za-z0-9+_=-]*\d[A-Za-z0-9+_=-]*\d[A-Za-z0-9+_=-]*\d)[A-Za-z0-9+_=-]{32,}",  # base64-ish, 4+ digits
        r"-----BEGIN [A-Z ]*PRIVATE KEY-----",
    )
]


def secret_values(secret: dict) -> dict[str, str]:
    values = dict(secret.get("stringData", {}))
    for key, value in secret.get("data", {}).items():
        values[key] = base64.b64decode(value).decode("utf-8", "replace")
    return values


def test_no_secret_holds_anything_like_a_real_key():
    secrets = by_kind("Secret")
    assert secrets
    for name, secret in secrets.items():
        for key, value in secret_values(secret).items():
            live = [line for line in value.splitlines() if line.strip() and not line.lstrip().startswith("#")]
            assert not live, f"Secret {name}/{key} holds a usable key line; ship only a commented placeholder"
            assert "REPLACE" in value.upper(), f"Secret {name}/{key}: say plainly that it is a placeholder"
    for path in manifest_files():
        text = re.sub(r"sha256:[a-f0-9]{64}", "", path.read_text(encoding="utf-8"))
        for pattern in KEY_LIKE:
            found = pattern.search(text)
            assert not found, f"{path.name} contains something that looks like a key: {found.group(0)[:12]}..."


def test_gateway_autoscales_on_its_queue():
    (hpa,) = by_kind("HorizontalPodAutoscaler").values()
    assert hpa["apiVersion"] == "autoscaling/v2"
    target = hpa["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("Deployment", "gateway")
    assert hpa["spec"]["minReplicas"] >= 2, "never below the PDB's needs"
    (metric,) = hpa["spec"]["metrics"]
    assert metric["type"] == "Pods" and metric["pods"]["metric"]["name"] == "specdec_requests_waiting"
    metrics_source = (ROOT / "specdec" / "serving" / "metrics.py").read_text(encoding="utf-8")
    assert '"specdec_requests_waiting"' in metrics_source, "the HPA's metric is one the gateway exports"


def test_gpu_pods_tolerate_the_gpu_taint():
    for role in ("draft", "verify"):
        tolerations = pod_spec(DEPLOYMENTS[role]).get("tolerations", [])
        assert any(t.get("key") == "nvidia.com/gpu" for t in tolerations), role
