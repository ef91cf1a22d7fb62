"""What a cluster operator's tooling reads: the PodMonitor (a Prometheus Operator custom resource, so no core
schema validates it: it is checked here field by field against the PodMonitor fields it may use, and by what it
selects and the job names it produces) and the prometheus-adapter rule behind the gateway's HPA."""

from __future__ import annotations

import re

import pytest
import yaml
from deploy_support import METRICS_PORTS, ROOT
from k8s_support import K8S, OVERLAYS, by_kind, deployments, pod_spec, selects

PODMONITOR_FIELDS = {
    "spec": {"selector", "podMetricsEndpoints", "namespaceSelector", "jobLabel", "podTargetLabels", "sampleLimit"},
    "endpoint": {"port", "path", "interval", "scrapeTimeout", "scheme", "relabelings", "metricRelabelings", "honorLabels"},
    "relabeling": {"sourceLabels", "separator", "targetLabel", "regex", "modulus", "replacement", "action"},
}
MONITORED = [overlay for overlay in OVERLAYS if by_kind("PodMonitor", overlay)]
ADAPTER_VALUES = K8S / "prometheus-adapter" / "values.yaml"


def test_the_gpu_layouts_are_monitored():
    assert MONITORED == ["gpu-shared", "gpu-split"]


def relabel(rules: list[dict], labels: dict[str, str]) -> dict[str, str]:
    """Prometheus' relabelling for the `replace` action (the default), the one used here."""
    labels = dict(labels)
    for rule in rules:
        assert rule.get("action", "replace") == "replace", rule
        value = rule.get("separator", ";").join(labels.get(name, "") for name in rule["sourceLabels"])
        match = re.fullmatch(rule.get("regex", "(.*)"), value)
        if match:
            labels[rule["targetLabel"]] = match.expand(rule.get("replacement", "$1").replace("$", "\\"))
    return labels


def scraped_targets(overlay: str) -> dict[str, tuple[int, str, dict]]:
    """Role -> (port, path, target labels) for each Pod template the PodMonitor scrapes (the canary too)."""
    (monitor,) = by_kind("PodMonitor", overlay).values()
    spec = monitor["spec"]
    assert set(spec) <= PODMONITOR_FIELDS["spec"], f"unknown PodMonitor fields: {set(spec) - PODMONITOR_FIELDS['spec']}"
    targets = {}
    for role, deployment in deployments(overlay).items():
        for track in ("stable", "canary"):
            labels = {**deployment["spec"]["template"]["metadata"]["labels"], "track": track}
            assert selects(spec["selector"], labels), f"the PodMonitor does not select {role} ({track})"
            ports = {p["name"]: p["containerPort"] for c in pod_spec(deployment)["containers"] for p in c.get("ports", [])}
            for endpoint in spec["podMetricsEndpoints"]:
                assert set(endpoint) <= PODMONITOR_FIELDS["endpoint"], set(endpoint) - PODMONITOR_FIELDS["endpoint"]
                for rule in endpoint.get("relabelings", []):
                    assert set(rule) <= PODMONITOR_FIELDS["relabeling"], set(rule) - PODMONITOR_FIELDS["relabeling"]
                if endpoint["port"] in ports:
                    meta = {f"__meta_kubernetes_pod_label_{re.sub(r'[^a-zA-Z0-9_]', '_', k)}": v for k, v in labels.items()}
                    result = relabel(endpoint.get("relabelings", []), meta)
                    assert (role, track) not in targets, f"{role}: scraped twice"
                    targets[role, track] = (ports[endpoint["port"]], endpoint.get("path", "/metrics"), result)
    return targets


@pytest.mark.parametrize("overlay", MONITORED)
def test_the_pod_monitor_scrapes_each_role_on_its_metrics_port(overlay):
    targets = scraped_targets(overlay)
    for (role, track), (port, path, labels) in targets.items():
        assert port == METRICS_PORTS[role] and path == "/metrics", f"{role}: {port}{path}"
        assert labels["job"] == f"specdec-{role}", f"{role}: job {labels['job']}"
        assert labels["track"] == track, "canary and stable must stay apart"
    assert {role for role, _ in targets} == {"draft", "verify", "gateway"}


@pytest.mark.parametrize("overlay", MONITORED)
def test_the_alerts_and_the_dashboard_find_the_pod_monitors_jobs(overlay):
    jobs = {labels["job"] for _, _, labels in scraped_targets(overlay).values()}
    alerts = (ROOT / "deploy" / "prometheus" / "alerts.yml").read_text(encoding="utf-8")
    named = set(re.findall(r'job="(specdec-[a-z]+)"', alerts))
    named |= {f"specdec-{role}" for pattern in re.findall(r'job=~"specdec-\(([a-z|]+)\)"', alerts) for role in pattern.split("|")}
    assert named and named <= jobs, f"alerts.yml selects {sorted(named - jobs)}, which the PodMonitor does not produce"
    compose_jobs = {
        job["job_name"] for job in yaml.safe_load((ROOT / "deploy" / "prometheus" / "prometheus.yml").read_text())["scrape_configs"]
    }
    assert jobs <= compose_jobs, "the same job names as compose's Prometheus, so one dashboard serves both"


def test_the_adapter_rule_serves_the_hpa_metric():
    values = yaml.safe_load(ADAPTER_VALUES.read_text(encoding="utf-8"))
    (hpa,) = by_kind("HorizontalPodAutoscaler").values()
    (metric,) = hpa["spec"]["metrics"]
    wanted = metric["pods"]["metric"]["name"]
    (rule,) = values["rules"]["custom"]
    series = re.fullmatch(r"([a-z_]+)\{(.*)\}", rule["seriesQuery"])
    assert series and series.group(1) == wanted, rule["seriesQuery"]
    gateway_job = scraped_targets("gpu-split")["gateway", "stable"][2]["job"]
    assert f'job="{gateway_job}"' in series.group(2), "only the gateway's queue: verify and draft export no such gauge"
    # a Pods metric: the series must map to the HPA's namespace and Pods, labels the PodMonitor's targets carry
    assert rule["resources"]["overrides"] == {"namespace": {"resource": "namespace"}, "pod": {"resource": "pod"}}
    assert re.fullmatch(rule["name"]["matches"], wanted) and rule["name"]["as"] == wanted
    for placeholder in ("<<.Series>>", "<<.LabelMatchers>>", "<<.GroupBy>>"):
        assert placeholder in rule["metricsQuery"]
    source = (ROOT / "specdec" / "serving" / "metrics.py").read_text(encoding="utf-8")
    assert re.search(rf'Gauge\("{wanted}"', source), "the gateway exports the gauge"
