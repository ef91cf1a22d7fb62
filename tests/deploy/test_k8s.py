"""Static checks of deploy/k8s/: every overlay as `kubectl kustomize` renders it, and the verify canary component.
Each object validates offline against the Kubernetes OpenAPI schemas (kubernetes-validate, strict: unknown fields
fail; the PodMonitor, a custom resource, has no core schema and is checked structurally in test_k8s_operator.py),
plus what the schemas cannot say: probes, resources, zero-downtime rollouts, drain time, non-root Pods, GPUs, the
headless draft Service behind verify's dns:/// endpoint, PodDisruptionBudgets, the image named in one place, the
every specdec command line parsed by the real CLI parser. The draft -> verify -> gateway wiring: test_k8s_wiring.py;
the config, keys and autoscaling: test_k8s_config.py; the NetworkPolicies: test_k8s_network_policies.py; the cpu-tiny
requests against `specdec plan`: test_k8s_sizing.py."""

from __future__ import annotations

import re

import pytest
import yaml
from deploy_support import DRAIN_S, METRICS_PORTS, PORTS, ROLES, ROOT, parse_cli
from k8s_support import (
    CANARY,
    CUSTOM_KINDS,
    GPU_RESOURCE,
    K8S,
    KUBERNETES_VERSION,
    NAMESPACE,
    OBJECTS,
    OVERLAYS,
    by_kind,
    container,
    deployments,
    object_id,
    overlay_objects,
    pod_spec,
    quantity,
    role_of,
    selects,
)

try:
    import kubernetes_validate
except ImportError:  # pragma: no cover - a missing dev dependency
    pytest.fail("kubernetes-validate is not installed: pip install 'kubernetes-validate>=1.30' (a dev dependency)", pytrace=False)

CORE_KINDS = {"Namespace", "Deployment", "Service", "ConfigMap", "NetworkPolicy"}
GPU_KINDS = CORE_KINDS | {"PodDisruptionBudget", "HorizontalPodAutoscaler", "PersistentVolumeClaim", "PodMonitor"}

# --- rendering and schema -------------------------------------------------------------------------------


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_overlay_renders_the_three_roles(overlay):
    kinds = {obj["kind"] for obj in overlay_objects(overlay)}
    assert kinds == (CORE_KINDS if overlay == "cpu-tiny" else GPU_KINDS), f"{overlay}: {sorted(kinds)}"
    assert set(deployments(overlay)) == set(ROLES)


def test_the_overlays_are_all_there_is():
    assert sorted(path.name for path in (K8S / "overlays").iterdir()) == sorted(OVERLAYS)
    assert not list(K8S.glob("*.yaml")), "manifests live in base/, components/ and overlays/: apply an overlay"


SCHEMA_ITEMS = [item for item in OBJECTS if item[1]["kind"] not in CUSTOM_KINDS] + [("canary", CANARY)]


@pytest.mark.parametrize("item", SCHEMA_ITEMS, ids=object_id)
def test_manifest_validates_against_the_kubernetes_schema(item):
    name, obj = item
    try:
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.ValidationError as error:
        where = ".".join(str(part) for part in error.path)
        pytest.fail(f"{name}: {obj['kind']}/{obj['metadata']['name']} at {where}: {error.message}", pytrace=False)
    except (kubernetes_validate.SchemaNotFoundError, kubernetes_validate.InvalidSchemaError) as error:
        pytest.fail(f"{name}: {obj['kind']} {obj['apiVersion']}: {error.message}", pytrace=False)


def test_custom_resources_are_only_the_known_ones():
    for overlay, obj in OBJECTS:
        if obj["kind"] in CUSTOM_KINDS:
            assert obj["apiVersion"] == CUSTOM_KINDS[obj["kind"]], f"{overlay}: {obj['kind']} {obj['apiVersion']}"
            assert overlay != "cpu-tiny", "cpu-tiny must apply on a cluster without the Prometheus Operator's CRDs"


def test_everything_is_in_the_specdec_namespace():
    for name, obj in [*OBJECTS, ("canary", CANARY)]:
        if obj["kind"] == "Namespace":
            assert obj["metadata"]["name"] == NAMESPACE
        else:
            assert obj["metadata"].get("namespace") == NAMESPACE, f"{name}: {obj['kind']}/{obj['metadata']['name']}"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_names_are_unique_per_kind(overlay):
    seen = set()
    for obj in overlay_objects(overlay):
        key = (obj["kind"], obj["metadata"]["name"])
        assert key not in seen, f"{overlay}: {key} defined twice"
        seen.add(key)


# --- Deployments -------------------------------------------------------------------------------------

ALL_DEPLOYMENTS = [(overlay, deployment) for overlay in OVERLAYS for deployment in deployments(overlay).values()] + [("canary", CANARY)]


@pytest.fixture(params=ALL_DEPLOYMENTS, ids=lambda item: f"{item[0]}:{item[1]['metadata']['name']}")
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


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_resources(overlay):
    gpu = GPU_RESOURCE[overlay]
    for name, deployment in deployments(overlay).items():
        role = role_of(deployment)
        resources = container(deployment).get("resources", {})
        requests, limits = resources.get("requests", {}), resources.get("limits", {})
        assert "cpu" in requests and "memory" in requests, f"{overlay} {role}: cpu and memory requests"
        assert "memory" in limits, f"{overlay} {role}: a memory limit"
        assert quantity(limits["memory"]) >= quantity(requests["memory"])
        asked = {key for key in {**requests, **limits} if key.startswith("nvidia.com/")}
        if role in ("draft", "verify") and gpu:
            assert asked == {gpu}, f"{overlay} {role}: exactly one GPU resource, {gpu} (found {asked})"
            assert int(limits[gpu]) == 1 and requests.get(gpu, limits[gpu]) == limits[gpu]
            tolerations = pod_spec(deployment).get("tolerations", [])
            assert any(t.get("key") == "nvidia.com/gpu" for t in tolerations), f"{overlay} {role}: tolerates the GPU taint"
        else:
            assert not asked, f"{overlay} {name}: no GPU (found {asked})"
            assert not pod_spec(deployment).get("tolerations"), f"{overlay} {name}: no GPU taint to tolerate"


def test_gpu_shared_puts_each_draft_beside_a_verify_pod():
    draft = deployments("gpu-shared")["draft"]
    (term,) = pod_spec(draft)["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert selects(term["labelSelector"], deployments("gpu-shared")["verify"]["spec"]["template"]["metadata"]["labels"])
    for role in ("draft", "verify"):
        env = {item["name"]: item.get("value") for item in container(deployments("gpu-shared")[role])["env"]}
        assert env.get("PYTORCH_CUDA_ALLOC_CONF") == "expandable_segments:True", "as compose.single-gpu.yaml"


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
    for main in pod_spec(deployment)["containers"] + pod_spec(deployment).get("initContainers", []):
        context = {**pod_context, **main.get("securityContext", {})}
        assert context.get("runAsNonRoot") is True, "runAsNonRoot"
        assert context.get("runAsUser", 10001) != 0
        assert main.get("securityContext", {}).get("allowPrivilegeEscalation") is False
        assert "ALL" in main.get("securityContext", {}).get("capabilities", {}).get("drop", [])
        assert main.get("securityContext", {}).get("readOnlyRootFilesystem") is True
    assert pod_spec(deployment).get("automountServiceAccountToken") is False, "no API token: the services never call the API server"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_models_are_mounted_read_only(overlay):
    for deployment in deployments(overlay).values():
        role = role_of(deployment)
        volumes = {volume["name"]: volume for volume in pod_spec(deployment).get("volumes", [])}
        models = [mount for mount in container(deployment).get("volumeMounts", []) if mount["mountPath"] == "/models"]
        if role == "gateway":
            assert not models, "the gateway loads no model"
            continue
        assert len(models) == 1 and models[0].get("readOnly") is True, f"{overlay} {role}: /models, read-only"
        volume = volumes[models[0]["name"]]
        if overlay == "cpu-tiny":
            # the tiny pair: written by the init container into the Pod's emptyDir, then read-only for the service
            assert "emptyDir" in volume and "persistentVolumeClaim" not in volume
            (init,) = pod_spec(deployment)["initContainers"]
            args = parse_cli(init["args"])
            assert args.command == "make-tiny-pair" and args.directory == "/models", init["args"]
            assert init["image"] == container(deployment)["image"], "the init container runs the service's image"
            assert any(m["name"] == models[0]["name"] and not m.get("readOnly") for m in init["volumeMounts"])
        else:
            claim = volume.get("persistentVolumeClaim")
            assert claim and claim.get("readOnly") is True, f"{overlay} {role}: /models is a read-only PVC"
            assert claim["claimName"] in by_kind("PersistentVolumeClaim", overlay)


def test_read_only_root_filesystem_has_a_writable_tmp(deployment):
    main = container(deployment)
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


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_replicas(overlay):
    for role, deployment in deployments(overlay).items():
        # cpu-tiny is for trying it: one of each; the GPU layouts keep two, so one can go during a node drain
        assert deployment["spec"]["replicas"] == (1 if overlay == "cpu-tiny" else 2), f"{overlay} {role}"
        assert deployment["spec"].get("revisionHistoryLimit", 10) >= 2, "rollout undo needs the previous ReplicaSet"


def base_image() -> str:
    kustomization = yaml.safe_load((K8S / "base" / "kustomization.yaml").read_text(encoding="utf-8"))
    (entry,) = kustomization["images"]
    assert entry["name"] == "specdec"
    return f"{entry['newName']}:{entry['newTag']}"


def test_the_image_is_named_in_one_place():
    image = base_image()
    assert image == "localhost/specdec:local", "what compose builds (compose.yaml: ${SPECDEC_IMAGE}:${SPECDEC_TAG} defaults)"
    for path in K8S.rglob("*.yaml"):
        if path.name == "kustomization.yaml":
            if path.parent != K8S / "base":
                assert "images" not in yaml.safe_load(path.read_text(encoding="utf-8")), f"{path}: a second place for the image"
            continue
        # the canary's candidate is the one other image, named by the kustomization that adds the canary
        allowed = "specdec-canary" if path.parent.name == "verify-canary" else "specdec"
        for line in path.read_text(encoding="utf-8").splitlines():
            match = re.match(r"\s*(?:- )?image:\s*(\S+)", line)
            assert not match or match.group(1) == allowed, f"{path.relative_to(ROOT)}: {line.strip()} (say `image: {allowed}`)"
    for overlay in OVERLAYS:
        images = {
            c["image"] for d in deployments(overlay).values() for c in pod_spec(d)["containers"] + pod_spec(d).get("initContainers", [])
        }
        assert images == {image}, f"{overlay}: {images}"


def test_config_file_is_mounted_where_specdec_config_points(deployment):
    main = container(deployment)
    env = {item["name"]: item.get("value") for item in main.get("env", [])}
    config_path = env.get("SPECDEC_CONFIG")
    assert config_path, "SPECDEC_CONFIG names the mounted specdec.yaml"
    volumes = {volume["name"]: volume for volume in pod_spec(deployment)["volumes"]}
    mounted = [(mount, volumes[mount["name"]]) for mount in main["volumeMounts"] if config_path.startswith(mount["mountPath"] + "/")]
    assert mounted, f"nothing is mounted at {config_path}"
    mount, volume = mounted[0]
    assert mount.get("readOnly") is True and "configMap" in volume
    assert config_path.rsplit("/", 1)[1] == "specdec.yaml"
    for key in env:
        assert not re.search(r"API_KEYS?|SECRET|PASSWORD|TOKEN", key), f"{key}: keys come from the Secret file, not env"
