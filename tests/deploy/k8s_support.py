"""The Kubernetes objects of deploy/k8s/ (and those shown in its README), loaded strictly."""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from deploy_support import ROOT, StrictLoader

K8S = ROOT / "deploy" / "k8s"
README = K8S / "README.md"
NAMESPACE = "specdec"
KUBERNETES_VERSION = "1.30"  # schemas bundled with kubernetes-validate: validated offline

DRAFT_DNS = "draft.specdec.svc.cluster.local"


def manifest_files() -> list[Path]:
    return sorted(K8S.glob("*.yaml"))


def load_objects(path: Path) -> list[dict]:
    return [document for document in yaml.load_all(path.read_text(encoding="utf-8"), Loader=StrictLoader) if document]


def readme_objects() -> list[dict]:
    """The Kubernetes objects in the README's ```yaml blocks (other YAML there, e.g. adapter rules, is skipped)."""
    blocks = re.findall(r"```yaml\n(.*?)```", README.read_text(encoding="utf-8"), re.DOTALL)
    objects = []
    for block in blocks:
        for document in yaml.load_all(block, Loader=StrictLoader):
            if isinstance(document, dict) and "apiVersion" in document and "kind" in document:
                objects.append(document)
    return objects


OBJECTS = [(path.name, obj) for path in manifest_files() for obj in load_objects(path)]
README_OBJECTS = readme_objects()


def by_kind(kind: str) -> dict[str, dict]:
    return {obj["metadata"]["name"]: obj for _, obj in OBJECTS if obj["kind"] == kind}


DEPLOYMENTS = by_kind("Deployment")


def object_id(item) -> str:
    name, obj = item
    return f"{name}:{obj['kind']}/{obj['metadata']['name']}"


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
