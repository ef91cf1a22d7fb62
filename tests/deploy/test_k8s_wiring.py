"""deploy/k8s/: how the rendered objects connect draft -> verify -> gateway: the headless draft Service behind
verify's dns:/// endpoint, Services that select their Pods, the verify canary beside the stable Deployment, PDBs."""

from __future__ import annotations

import re

import pytest
import yaml
from deploy_support import parse_cli
from k8s_support import (
    CANARY,
    CANARY_IMAGE,
    DRAFT_DNS,
    OVERLAYS,
    README,
    by_kind,
    canary_objects,
    container,
    deployments,
    role_of,
    selects,
)

# --- the draft -> verify -> gateway wiring ------------------------------------------------------------


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_verify_round_robins_over_a_headless_draft_service(overlay):
    services = by_kind("Service", overlay)
    draft_service = services["draft"]
    assert draft_service["spec"].get("clusterIP") == "None", "the draft Service is headless (clusterIP: None)"
    assert selects(draft_service["spec"]["selector"], deployments(overlay)["draft"]["spec"]["template"]["metadata"]["labels"])
    assert 50051 in {port["port"] for port in draft_service["spec"]["ports"]}
    for name, deployment in [*deployments(overlay).items(), ("verify-canary", CANARY)]:
        if role_of(deployment) == "verify":
            endpoint = parse_cli(container(deployment)["args"]).draft_endpoint
            assert endpoint == f"dns:///{DRAFT_DNS}:50051", f"{name}: --draft-endpoint {endpoint}"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_gateway_reaches_every_verify_pod(overlay):
    services = by_kind("Service", overlay)
    endpoint = parse_cli(container(deployments(overlay)["gateway"])["args"]).verify_endpoint
    match = re.fullmatch(r"(?:dns:///)?([a-z0-9-]+)\.specdec\.svc\.cluster\.local:(\d+)", endpoint)
    assert match, f"--verify-endpoint {endpoint}"
    service = services[match.group(1)]
    assert int(match.group(2)) in {port["port"] for port in service["spec"]["ports"]}
    if endpoint.startswith("dns:///"):
        assert service["spec"].get("clusterIP") == "None", "dns:/// round-robin needs a headless Service"
    verify_pods = deployments(overlay)["verify"]["spec"]["template"]["metadata"]["labels"]
    assert selects(service["spec"]["selector"], verify_pods)
    assert services["verify"]["spec"].get("type", "ClusterIP") == "ClusterIP" and services["verify"]["spec"].get("clusterIP") != "None"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_services_select_pods_and_name_their_ports(overlay):
    pods = [obj["spec"]["template"] for obj in deployments(overlay).values()]
    for name, service in by_kind("Service", overlay).items():
        targets = [pod for pod in pods if selects(service["spec"]["selector"], pod["metadata"]["labels"])]
        assert targets, f"Service {name} selects no Pods"
        for port in service["spec"]["ports"]:
            target = port.get("targetPort", port["port"])
            for pod in targets:
                declared = {p.get("name"): p["containerPort"] for p in pod["spec"]["containers"][0]["ports"]}
                assert target in declared or target in declared.values(), f"Service {name}: targetPort {target}"


def test_the_canary_shares_the_verify_services_and_budget():
    rendered = canary_objects()
    services = {obj["metadata"]["name"]: obj for obj in rendered if obj["kind"] == "Service"}
    stable = next(obj for obj in rendered if obj["kind"] == "Deployment" and obj["metadata"]["name"] == "verify")
    labels = CANARY["spec"]["template"]["metadata"]["labels"]
    assert labels.get("track") == "canary" and CANARY["spec"]["replicas"] == 1
    assert selects(services["verify"]["spec"]["selector"], labels), "the canary is behind the verify Service"
    assert selects(services["verify-headless"]["spec"]["selector"], labels)
    assert not selects(stable["spec"]["selector"], labels), "the stable Deployment must not adopt canary Pods"
    assert not selects(CANARY["spec"]["selector"], stable["spec"]["template"]["metadata"]["labels"])
    budgets = [obj for obj in rendered if obj["kind"] == "PodDisruptionBudget" and selects(obj["spec"]["selector"], labels)]
    assert len(budgets) == 1, "exactly the verify PodDisruptionBudget: a Pod under two cannot be evicted"
    assert container(CANARY)["image"] == CANARY_IMAGE and container(stable)["image"] == "localhost/specdec:local"


def test_the_canary_is_the_stable_verify_but_for_its_track_image_and_replicas():
    stable = deployments()["verify"]

    def normalized(deployment: dict) -> dict:
        text = yaml.safe_dump(deployment)
        for old, new in (
            ("verify-canary", "verify"),
            ("track: canary", "track: stable"),
            (CANARY_IMAGE, "IMAGE"),
            ("localhost/specdec:local", "IMAGE"),
        ):
            text = text.replace(old, new)
        text = text.replace(",specdec.track=canary", "")
        document = yaml.safe_load(text)
        document["spec"].pop("replicas")
        return document

    assert normalized(CANARY) == normalized(stable), "components/verify-canary/verify-canary.yaml drifted from base/verify.yaml"
    text = README.read_text(encoding="utf-8")
    for needed in ("kubectl -n specdec rollout status", "rollout undo", "components/verify-canary"):
        assert needed in text, f"the README covers {needed}"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_pod_disruption_budgets(overlay):
    budgets = by_kind("PodDisruptionBudget", overlay)
    for name, deployment in deployments(overlay).items():
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        matching = [budget for budget in budgets.values() if selects(budget["spec"]["selector"], labels)]
        if deployment["spec"]["replicas"] < 2:
            # minAvailable 1 of 1 would block every node drain
            assert not matching, f"{overlay} {name}: a PodDisruptionBudget over a single replica"
            continue
        assert len(matching) == 1, f"{overlay} {name}: exactly one PodDisruptionBudget selects it (found {len(matching)})"
        (budget,) = matching
        assert budget["apiVersion"] == "policy/v1"
        assert budget["spec"].get("minAvailable") == 1
        assert budget["spec"]["minAvailable"] < deployment["spec"]["replicas"], f"{name}: a node drain can proceed"
