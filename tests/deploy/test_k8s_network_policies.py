"""The NetworkPolicies of every rendered overlay, evaluated the way Kubernetes does (a Pod selected by no Ingress
policy admits everything; otherwise a connection is admitted when some policy selecting the Pod has a rule whose
peers and ports both match), for each (client, Pod, port) pair: exactly the allowed pairs may connect. So a
rule opened wider (a port dropped from `ports`, a peer widened, an ipBlock, an `ingress: [{}]`) fails here."""

from __future__ import annotations

import ipaddress

import pytest
from deploy_support import METRICS_PORTS, PORTS
from k8s_support import NAMESPACE, OVERLAYS, by_kind, deployments, pod_spec

MONITORING = "monitoring"
NAMESPACE_LABELS = {
    NAMESPACE: {"kubernetes.io/metadata.name": NAMESPACE},
    MONITORING: {"kubernetes.io/metadata.name": MONITORING},
    "default": {"kubernetes.io/metadata.name": "default"},
}


def specdec_pod(component: str, **extra: str) -> dict:
    return {"app.kubernetes.io/name": "specdec", "app.kubernetes.io/part-of": "specdec", "app.kubernetes.io/component": component, **extra}


# Who might connect: (name, namespace, Pod labels, IP). A namespace of None is a client outside the cluster.
CLIENTS = [
    ("gateway", NAMESPACE, specdec_pod("gateway"), "10.0.0.10"),
    ("verify", NAMESPACE, specdec_pod("verify", track="stable"), "10.0.0.11"),
    ("verify canary", NAMESPACE, specdec_pod("verify", track="canary"), "10.0.0.12"),
    ("draft", NAMESPACE, specdec_pod("draft"), "10.0.0.13"),
    ("direct verify client", NAMESPACE, {"app": "bench", "specdec/verify-client": "true"}, "10.0.0.14"),
    ("other pod in specdec", NAMESPACE, {"app": "debug"}, "10.0.0.15"),
    ("prometheus", MONITORING, {"app.kubernetes.io/name": "prometheus"}, "10.0.1.10"),
    ("pod in another namespace", "default", {"app": "web"}, "10.0.2.10"),
    ("ingress controller / outside", None, {}, "203.0.113.7"),
]
ANY_CLIENT = {name for name, *_ in CLIENTS}

# What must be admitted, and nothing else: (destination role, port) -> the clients allowed.
ALLOWED = {
    ("draft", PORTS["draft"]): {"verify", "verify canary"},
    ("draft", METRICS_PORTS["draft"]): {"prometheus"},
    ("verify", PORTS["verify"]): {"gateway", "direct verify client"},
    ("verify", METRICS_PORTS["verify"]): {"prometheus"},
    ("gateway", PORTS["gateway"]): ANY_CLIENT,  # the API (and /metrics beside it): clients come from anywhere
}
OTHER_PORTS = (22, 443, 6379, 8080)  # nothing listens there, and nothing may be let through to them either


def label_selector_matches(selector: dict, labels: dict) -> bool:
    """A LabelSelector; the empty selector matches everything."""
    for key, value in selector.get("matchLabels", {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions", []):
        key, operator, values = expression["key"], expression["operator"], expression.get("values", [])
        present = key in labels
        if not {
            "In": present and labels.get(key) in values,
            "NotIn": not present or labels.get(key) not in values,
            "Exists": present,
            "DoesNotExist": not present,
        }[operator]:
            return False
    return True


def peer_matches(peer: dict, policy_namespace: str, client) -> bool:
    _, namespace, labels, ip = client
    if "ipBlock" in peer:
        block = peer["ipBlock"]
        address = ipaddress.ip_address(ip)
        return address in ipaddress.ip_network(block["cidr"]) and not any(
            address in ipaddress.ip_network(e) for e in block.get("except", [])
        )
    if namespace is None:
        return False  # pod and namespace selectors only ever match Pods
    if "namespaceSelector" in peer:
        if not label_selector_matches(peer["namespaceSelector"], NAMESPACE_LABELS[namespace]):
            return False
    elif namespace != policy_namespace:
        return False  # a podSelector alone means Pods of the policy's own namespace
    return label_selector_matches(peer.get("podSelector", {}), labels)


def port_matches(rule_port: dict, port: int, named_ports: dict[str, int]) -> bool:
    if rule_port.get("protocol", "TCP") != "TCP":
        return False
    if "port" not in rule_port:
        return True  # every port
    start = named_ports.get(rule_port["port"], rule_port["port"])
    if not isinstance(start, int):
        return False  # a name the Pod does not declare matches nothing
    return start <= port <= rule_port.get("endPort", start)


def admitted(policies: list[dict], pod_labels: dict, named_ports: dict[str, int], client, port: int) -> bool:
    selecting = [
        policy
        for policy in policies
        if "Ingress" in policy["spec"].get("policyTypes", ["Ingress"]) and label_selector_matches(policy["spec"]["podSelector"], pod_labels)
    ]
    if not selecting:
        return True
    for policy in selecting:
        for rule in policy["spec"].get("ingress", []):
            peers_ok = (
                "from" not in rule
                or not rule["from"]
                or any(peer_matches(peer, policy["metadata"]["namespace"], client) for peer in rule["from"])
            )
            ports_ok = "ports" not in rule or not rule["ports"] or any(port_matches(p, port, named_ports) for p in rule["ports"])
            if peers_ok and ports_ok:
                return True
    return False


def destinations(overlay: str):
    """Each role's Pod labels and named ports, the canary's too (it carries verify's labels but track: canary)."""
    for role, deployment in deployments(overlay).items():
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        ports = {p["name"]: p["containerPort"] for c in pod_spec(deployment)["containers"] for p in c.get("ports", [])}
        yield role, labels, ports
        if role == "verify":
            yield role, {**labels, "track": "canary"}, ports


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_each_port_admits_exactly_its_clients(overlay):
    policies = list(by_kind("NetworkPolicy", overlay).values())
    assert policies, f"{overlay}: no NetworkPolicy"
    wrong = []
    for role, labels, ports in destinations(overlay):
        for port in sorted({*ports.values(), *OTHER_PORTS}):
            allowed = ALLOWED.get((role, port), set())
            for client in CLIENTS:
                if admitted(policies, labels, ports, client, port) != (client[0] in allowed):
                    wrong.append(
                        f"{client[0]} -> {role}{' (canary)' if labels.get('track') == 'canary' else ''}:{port} "
                        f"{'admitted' if client[0] not in allowed else 'refused'}"
                    )
    assert not wrong, f"{overlay}:\n  " + "\n  ".join(wrong)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_everything_else_is_denied_by_default(overlay):
    (deny,) = [p for p in by_kind("NetworkPolicy", overlay).values() if p["spec"]["podSelector"] == {}]
    assert deny["spec"]["policyTypes"] == ["Ingress"] and not deny["spec"].get("ingress"), "a Pod added later admits nothing by default"
    newcomer = {"app.kubernetes.io/name": "specdec", "app.kubernetes.io/component": "something-new"}
    for client in CLIENTS:
        assert not admitted(list(by_kind("NetworkPolicy", overlay).values()), newcomer, {}, client, 8000)


def test_the_evaluator_sees_a_widened_rule():
    """The checks above can fail: the same policies with verify's gRPC rule opened to every port and peer."""
    policies = [dict(p) for p in by_kind("NetworkPolicy").values()]
    verify = next(p for p in policies if p["metadata"]["name"] == "verify")
    pod = deployments()["verify"]["spec"]["template"]["metadata"]["labels"]
    outsider = next(client for client in CLIENTS if client[0] == "pod in another namespace")
    assert not admitted(policies, pod, {}, outsider, PORTS["verify"])
    widened = {**verify, "spec": {**verify["spec"], "ingress": [*verify["spec"]["ingress"], {}]}}
    assert admitted([widened if p is verify else p for p in policies], pod, {}, outsider, PORTS["verify"])
