"""The Kubernetes objects of deploy/k8s/: each overlay as `kubectl kustomize` renders it (with the verify canary
component too), loaded strictly."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import yaml
from deploy_support import ROOT, StrictLoader

K8S = ROOT / "deploy" / "k8s"
README = K8S / "README.md"
NAMESPACE = "specdec"
KUBERNETES_VERSION = "1.30"  # schemas bundled with kubernetes-validate: validated offline
OVERLAYS = ("cpu-tiny", "gpu-shared", "gpu-split")
DEFAULT_OVERLAY = "gpu-split"
GPU_RESOURCE = {"cpu-tiny": None, "gpu-shared": "nvidia.com/gpu.shared", "gpu-split": "nvidia.com/gpu"}
# Custom resources: no schema among kubernetes-validate's core ones; checked structurally instead.
CUSTOM_KINDS = {"PodMonitor": "monitoring.coreos.com/v1"}

DRAFT_DNS = "draft.specdec.svc.cluster.local"


def kubectl() -> str:
    path = shutil.which("kubectl")
    assert path, "kubectl is needed to render the overlays (kubectl kustomize, offline; kubectl >= 1.27)"
    return path


@functools.cache
def render(path: Path) -> tuple[dict, ...]:
    """What `kubectl kustomize PATH` renders: the objects `kubectl apply -k PATH` would apply."""
    result = subprocess.run([kubectl(), "kustomize", str(path)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, f"kubectl kustomize {path} failed:\n{result.stderr}"
    return tuple(document for document in yaml.load_all(result.stdout, Loader=StrictLoader) if document)


def overlay_objects(overlay: str) -> tuple[dict, ...]:
    return render(K8S / "overlays" / overlay)


CANARY_IMAGE = "localhost/specdec:candidate"


@functools.cache
def canary_objects(overlay: str = DEFAULT_OVERLAY) -> tuple[dict, ...]:
    """The overlay with the verify canary component, as README.md's Canary section runs it."""
    with tempfile.TemporaryDirectory() as directory:
        name, tag = CANARY_IMAGE.rsplit(":", 1)
        kustomization = {
            "apiVersion": "kustomize.config.k8s.io/v1beta1",
            "kind": "Kustomization",
            # kustomize takes only relative paths
            "resources": [os.path.relpath(K8S / "overlays" / overlay, directory)],
            "components": [os.path.relpath(K8S / "components" / "verify-canary", directory)],
            "images": [{"name": "specdec-canary", "newName": name, "newTag": tag}],
        }
        (Path(directory) / "kustomization.yaml").write_text(yaml.safe_dump(kustomization), encoding="utf-8")
        return render(Path(directory))


OBJECTS = [(overlay, obj) for overlay in OVERLAYS for obj in overlay_objects(overlay)]


def by_kind(kind: str, overlay: str = DEFAULT_OVERLAY) -> dict[str, dict]:
    return {obj["metadata"]["name"]: obj for obj in overlay_objects(overlay) if obj["kind"] == kind}


def deployments(overlay: str = DEFAULT_OVERLAY) -> dict[str, dict]:
    return by_kind("Deployment", overlay)


DEPLOYMENTS = deployments()


def object_id(item) -> str:
    overlay, obj = item
    return f"{overlay}:{obj['kind']}/{obj['metadata']['name']}"


def pod_spec(deployment: dict) -> dict:
    return deployment["spec"]["template"]["spec"]


def container(deployment: dict) -> dict:
    containers = pod_spec(deployment)["containers"]
    assert len(containers) == 1, f"{deployment['metadata']['name']}: one container"
    return containers[0]


def role_of(deployment: dict) -> str:
    return deployment["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"]


def selects(selector: dict, labels: dict) -> bool:
    """Whether a Service selector (a plain map) or a label selector (matchLabels) selects these labels."""
    assert not selector.get("matchExpressions"), "only matchLabels selectors are used here"
    match = selector.get("matchLabels", selector)
    return bool(match) and all(labels.get(key) == value for key, value in match.items())


def quantity(value) -> float:
    """A Kubernetes quantity ('500m', '2', '16Gi') as a number."""
    text = str(value)
    suffixes = {"m": 1e-3, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
    for suffix in sorted(suffixes, key=len, reverse=True):
        if text.endswith(suffix):
            return float(text[: -len(suffix)]) * suffixes[suffix]
    return float(text)


GPU_OVERLAYS = [overlay for overlay in OVERLAYS if GPU_RESOURCE[overlay]]
CANARY = next(obj for obj in canary_objects() if obj["metadata"]["name"] == "verify-canary")  # the canary Deployment
