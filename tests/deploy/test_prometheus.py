"""Checks of the monitoring config in deploy/: Prometheus config, alert rules and their unit tests
(with promtool), the Grafana dashboard and provisioning, and that every metric they reference is
one the services export (specdec/serving/metrics.py), so renaming a metric breaks this test."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
PROMETHEUS = ROOT / "deploy" / "prometheus"
GRAFANA = ROOT / "deploy" / "grafana"
DASHBOARD = GRAFANA / "specdec-dashboard.json"

ALERTS = {
    "SpecdecAcceptanceRateLow",
    "SpecdecFallbackRateHigh",
    "SpecdecErrorRateHigh",
    "SpecdecQueueTimeP99High",
    "SpecdecModelMemoryHigh",
    "SpecdecServiceDown",
}

# What the services' metrics export, as exposed (counters with _total). Checked against the code below.
COUNTERS = {
    "specdec_drafter_draft_tokens_total",
    "specdec_drafter_accepted_tokens_total",
    "specdec_spec_decode_num_drafts_total",
    "specdec_spec_decode_num_draft_tokens_total",
    "specdec_spec_decode_num_accepted_tokens_total",
    "specdec_spec_decode_num_accepted_tokens_per_pos_total",
    "specdec_spec_decode_fallbacks_total",
    "specdec_speculative_requests_total",
    "specdec_generated_tokens_total",
    "specdec_target_forwards_total",
    "specdec_requests_total",
    "specdec_draft_requests_total",
    "specdec_gateway_requests_total",
    "specdec_draft_proposed_tokens_total",
    "specdec_draft_predrafted_blocks_total",
    "specdec_draft_predraft_saved_seconds_total",
}
HISTOGRAMS = {
    "specdec_drafter_block_size",
    "specdec_time_to_first_token_seconds",
    "specdec_gateway_time_to_first_token_seconds",
    "specdec_inter_token_latency_seconds",
    "specdec_e2e_request_latency_seconds",
    "specdec_draft_e2e_request_latency_seconds",
    "specdec_gateway_e2e_request_latency_seconds",
    "specdec_request_queue_time_seconds",
    "specdec_round_duration_seconds",
    "specdec_draft_block_compute_seconds",
    "specdec_spec_decode_chosen_k",
}
GAUGES = {
    "specdec_requests_running",
    "specdec_draft_requests_running",
    "specdec_gateway_requests_running",
    "specdec_requests_waiting",
    "specdec_model_memory_bytes",
    "specdec_device_memory_total_bytes",
    "specdec_load_policy_drafting",
    "specdec_process_restarts",
    "specdec_draft_process_restarts",
    "specdec_gateway_process_restarts",
}
# The one set of names both model services export (their memory: two processes' memory sums).
MODEL_SERVICE_GAUGES = {"specdec_model_memory_bytes", "specdec_device_memory_total_bytes"}
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")
# Names that can appear in a query: a histogram only through its series.
QUERYABLE = COUNTERS | GAUGES | {name + suffix for name in HISTOGRAMS for suffix in HISTOGRAM_SUFFIXES}
METRIC_RE = re.compile(r"specdec_[a-z0-9_]+")  # [a-z0-9]: specdec_e2e_...

PROMTOOL_MISSING = (
    "promtool is not on PATH: install Debian's prometheus package: "
    "apt-get install prometheus (apt-get install -y --no-install-recommends prometheus)"
)


def _promtool() -> str:
    """promtool's path; a failure (not a skip, not a fixture error) when it is not installed."""
    path = shutil.which("promtool")
    if path is None:
        pytest.fail(PROMTOOL_MISSING, pytrace=False)
    return path


def _run(*args: str) -> None:
    proc = subprocess.run([_promtool(), *args], check=False, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, (
        f"promtool {' '.join(args)} exited {proc.returncode}\n--- stdout ---\n{proc.stdout}\n--- stderr ---\n{proc.stderr}"
    )


def _load_yaml(path: Path):
    with path.open(encoding="utf-8") as f:
        return yaml.safe_load(f)


def _alert_rules() -> dict[str, dict]:
    rules = {}
    for group in _load_yaml(PROMETHEUS / "alerts.yml")["groups"]:
        for rule in group["rules"]:
            if "alert" in rule:
                assert rule["alert"] not in rules, f"alert {rule['alert']} defined twice"
                rules[rule["alert"]] = rule
    return rules


def _dashboard() -> dict:
    with DASHBOARD.open(encoding="utf-8") as f:
        return json.load(f)


def _dashboard_exprs(dashboard: dict) -> list[tuple[str, str]]:
    """(where, expr) for every panel target and query variable."""
    exprs = [
        (f"panel {panel.get('id')} {panel.get('title')!r} target {target.get('refId')}", target["expr"])
        for panel in dashboard["panels"]
        for target in panel.get("targets", [])
    ]
    for variable in dashboard.get("templating", {}).get("list", []):
        if variable.get("type") == "query":
            query = variable["query"]
            exprs.append((f"variable {variable['name']}", query["query"] if isinstance(query, dict) else query))
    return exprs


# ------------------------------------------------------------------------------------- promtool


def test_promtool_check_config():
    _run("check", "config", "deploy/prometheus/prometheus.yml")


def test_promtool_check_rules():
    _run("check", "rules", "deploy/prometheus/alerts.yml")


def test_promtool_alert_unit_tests():
    _run("test", "rules", "deploy/prometheus/alerts_test.yml")


def test_dashboard_exprs_are_valid_promql(tmp_path):
    """Each dashboard query, with Grafana's variables filled in, parses as PromQL."""
    substitutions = {"$__rate_interval": "5m", "$__interval": "1m", "$__range": "1h", "$instance": ".*"}
    rules = []
    for index, (where, expr) in enumerate(_dashboard_exprs(_dashboard())):
        if expr.startswith("label_values("):
            match = re.fullmatch(r"label_values\((.+),\s*[a-zA-Z_]\w*\)", expr)
            assert match, f"{where}: cannot read {expr!r}"
            expr = match.group(1)
        for variable, value in substitutions.items():
            expr = expr.replace(variable, value)
        assert "$" not in expr, f"{where}: unknown variable in {expr!r}"
        rules.append({"record": f"dashboard:query_{index}", "expr": expr, "labels": {"where": where}})
    rules_file = tmp_path / "dashboard_rules.yml"
    rules_file.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}), encoding="utf-8")
    _run("check", "rules", str(rules_file))


# ------------------------------------------------------------------------------- metric names


def _families(metrics) -> dict[str, set[str]]:
    """The specdec_ families (not the standard process collector's, which the gateway has)."""
    families = {"counter": set(), "histogram": set(), "gauge": set()}
    for family in metrics.registry.collect():
        if not family.name.startswith("specdec_"):
            continue
        name = family.name + "_total" if family.type == "counter" else family.name
        families.setdefault(family.type, set()).add(name)
    return families


def _exported_by_job() -> dict[str, set[str]]:
    """Per scrape job, the names a query can use (histograms through their series)."""
    from specdec.serving.metrics import DraftMetrics, GatewayMetrics, VerifyMetrics

    exported = {}
    for job, metrics in (("specdec-gateway", GatewayMetrics()), ("specdec-verify", VerifyMetrics()), ("specdec-draft", DraftMetrics())):
        families = _families(metrics)
        exported[job] = (
            families["counter"] | families["gauge"] | {name + suffix for name in families["histogram"] for suffix in HISTOGRAM_SUFFIXES}
        )
    return exported


def test_allowed_metric_names_match_service_metrics():
    """The list above is what the three services' metrics really register (so a rename there fails here)."""
    from specdec.serving.metrics import DraftMetrics, GatewayMetrics, VerifyMetrics

    families = {"counter": set(), "histogram": set(), "gauge": set()}
    for metrics in (GatewayMetrics(), VerifyMetrics(), DraftMetrics()):
        for kind, names in _families(metrics).items():
            families[kind] |= names
    assert families == {"counter": COUNTERS, "histogram": HISTOGRAMS, "gauge": GAUGES}


def test_each_service_exports_only_what_it_reports():
    exported = _exported_by_job()
    assert "specdec_requests_waiting" in exported["specdec-gateway"] - exported["specdec-verify"]  # the autoscaler's
    assert "specdec_load_policy_drafting" in exported["specdec-verify"] - exported["specdec-gateway"] - exported["specdec-draft"]
    assert "specdec_draft_predrafted_blocks_total" in exported["specdec-draft"] - exported["specdec-verify"]
    # one source per metric (issue 29): no name both the gateway and verify export, so a sum() without a
    # job filter counts each token and request once; the spec-decode counters are verify's alone
    assert not exported["specdec-gateway"] & exported["specdec-verify"]
    spec_decode = {name for names in exported.values() for name in names if name.startswith("specdec_spec_decode_")}
    assert spec_decode and spec_decode <= exported["specdec-verify"] - exported["specdec-gateway"] - exported["specdec-draft"]


def test_draft_and_verify_share_no_name_but_the_memory_gauges():
    """One source per metric (issue 29): each HTTP request is one verify Generate and one draft Propose
    stream, so a request metric both model services exported would count it twice in a sum() without a
    job filter; the draft's are specdec_draft_*. Only the memory gauges are shared (the docstring of
    specdec/serving/metrics.py): each process's memory is its own, and they sum to what both hold."""
    exported = _exported_by_job()
    assert exported["specdec-draft"] & exported["specdec-verify"] == MODEL_SERVICE_GAUGES
    for name in ("requests_total", "requests_running", "process_restarts", "e2e_request_latency_seconds_bucket"):
        assert f"specdec_draft_{name}" in exported["specdec-draft"] and f"specdec_{name}" in exported["specdec-verify"]


def test_queries_for_one_job_name_metrics_that_job_exports():
    exported, checked = _exported_by_job(), 0
    for where, expr in [(f"alerts.yml {name}", rule["expr"]) for name, rule in _alert_rules().items()] + [
        (f"dashboard {where}", expr) for where, expr in _dashboard_exprs(_dashboard())
    ]:
        for metric, job in re.findall(r'(specdec_[a-z0-9_]+)\{job="(specdec-[a-z]+)"', expr):
            assert metric in exported[job], f"{where}: {job} does not export {metric}"
            checked += 1
    assert checked >= 5


def _referenced_names() -> list[tuple[str, str]]:
    refs = []
    for name, rule in _alert_rules().items():
        refs += [(f"alerts.yml {name}", metric) for metric in METRIC_RE.findall(rule["expr"])]
    for where, expr in _dashboard_exprs(_dashboard()):
        refs += [(f"dashboard {where}", metric) for metric in METRIC_RE.findall(expr)]
    for test in _load_yaml(PROMETHEUS / "alerts_test.yml")["tests"]:
        for series in test.get("input_series", []):
            refs += [(f"alerts_test.yml {test.get('name')!r}", metric) for metric in METRIC_RE.findall(series["series"])]
    return refs


def test_referenced_metrics_exist():
    refs = _referenced_names()
    assert refs, "no specdec_ metric found in the alerts or the dashboard"
    unknown = sorted({f"{where}: {metric}" for where, metric in refs if metric not in QUERYABLE})
    hints = []
    for line in unknown:
        metric = line.rsplit(": ", 1)[1]
        base = next((metric[: -len(s)] for s in HISTOGRAM_SUFFIXES if metric.endswith(s)), metric)
        if base in HISTOGRAMS and base == metric:
            hints.append(f"{metric} is a histogram: query {metric}_bucket, _sum or _count")
    assert not unknown, "metrics not exported by specdec/serving/metrics.py:\n  " + "\n  ".join(unknown + hints)


def test_dashboard_covers_every_metric_family():
    used = {metric for where, metric in _referenced_names() if where.startswith("dashboard")}
    bases = {next((m[: -len(s)] for s in HISTOGRAM_SUFFIXES if m.endswith(s) and m[: -len(s)] in HISTOGRAMS), m) for m in used}
    missing = (COUNTERS | HISTOGRAMS | GAUGES) - bases
    assert not missing, f"the dashboard shows nothing of {sorted(missing)}"


# ------------------------------------------------------------------------------------- alerts


def test_alerts_are_defined_with_severity_and_annotations():
    rules = _alert_rules()
    assert set(rules) >= ALERTS, f"missing alerts: {sorted(ALERTS - set(rules))}"
    for name, rule in rules.items():
        assert rule.get("for"), f"{name}: no for:"
        assert rule.get("labels", {}).get("severity") in {"info", "warning", "critical"}, f"{name}: severity label"
        annotations = rule.get("annotations", {})
        for key in ("summary", "description"):
            assert "{{" in annotations.get(key, ""), f"{name}: annotation {key} missing or not templated"


def test_each_alert_has_a_positive_and_a_negative_unit_test():
    tests = _load_yaml(PROMETHEUS / "alerts_test.yml")
    assert tests["rule_files"] == ["alerts.yml"]
    positive, negative = set(), set()
    for test in tests["tests"]:
        for case in test.get("alert_rule_test", []):
            (positive if case.get("exp_alerts") else negative).add(case["alertname"])
            for alert in case.get("exp_alerts") or []:
                assert alert.get("exp_labels", {}).get("severity"), f"{case['alertname']}: exp_labels without severity"
                assert set(alert.get("exp_annotations", {})) >= {"summary", "description"}, (
                    f"{case['alertname']}: exp_annotations must check the rendered summary and description"
                )
    assert not ALERTS - positive, f"alerts never shown to fire: {sorted(ALERTS - positive)}"
    assert not ALERTS - negative, f"alerts never shown not to fire: {sorted(ALERTS - negative)}"
    assert not (positive | negative) - set(_alert_rules()), "unit tests for alerts that do not exist"


# -------------------------------------------------------------------------- prometheus config


def test_prometheus_config_scrapes_the_three_services():
    config = _load_yaml(PROMETHEUS / "prometheus.yml")
    assert config["global"]["scrape_interval"] == "15s"
    assert config["global"]["evaluation_interval"] == "15s"
    assert config["rule_files"] == ["alerts.yml"]
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    expected = {"specdec-gateway": "gateway:8000", "specdec-verify": "verify:9102", "specdec-draft": "draft:9101"}
    assert set(jobs) == set(expected)
    for name, target in expected.items():
        assert jobs[name].get("metrics_path", "/metrics") == "/metrics"
        assert [t for sc in jobs[name]["static_configs"] for t in sc["targets"]] == [target]


# ------------------------------------------------------------------------------------ grafana


def test_dashboard_structure():
    dashboard = _dashboard()
    assert dashboard["schemaVersion"] >= 36
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    datasource = variables["datasource"]
    assert (datasource["type"], datasource["query"], datasource["current"]["value"]) == ("datasource", "prometheus", "specdec")

    panels = dashboard["panels"]
    ids = [panel["id"] for panel in panels]
    assert all(isinstance(i, int) for i in ids) and len(ids) == len(set(ids)), f"panel ids not unique: {ids}"
    cells: dict[tuple[int, int], int] = {}
    for panel in panels:
        name = f"panel {panel['id']} {panel.get('title')!r}"
        assert panel.get("title"), f"{name}: no title"
        assert panel["type"] in {"timeseries", "stat"}, f"{name}: type {panel['type']}"
        assert panel["datasource"]["uid"] == "${datasource}", f"{name}: datasource"
        grid = panel["gridPos"]
        assert all(isinstance(grid[k], int) for k in "xywh") and grid["w"] > 0 and grid["h"] > 0, f"{name}: gridPos"
        assert grid["x"] + grid["w"] <= 24, f"{name}: wider than the grid"
        for x in range(grid["x"], grid["x"] + grid["w"]):
            for y in range(grid["y"], grid["y"] + grid["h"]):
                assert (x, y) not in cells, f"{name} overlaps panel {cells[(x, y)]}"
                cells[(x, y)] = panel["id"]
        targets = panel["targets"]
        assert targets, f"{name}: no targets"
        assert all(t.get("expr", "").strip() for t in targets), f"{name}: target without expr"
        ref_ids = [t["refId"] for t in targets]
        assert len(ref_ids) == len(set(ref_ids)), f"{name}: refIds {ref_ids}"


def test_grafana_provisioning():
    datasources = _load_yaml(GRAFANA / "provisioning" / "datasources" / "prometheus.yml")["datasources"]
    (prometheus,) = [d for d in datasources if d["name"] == "Prometheus"]
    assert (prometheus["type"], prometheus["uid"], prometheus["url"]) == ("prometheus", "specdec", "http://prometheus:9090")
    providers = _load_yaml(GRAFANA / "provisioning" / "dashboards" / "specdec.yml")["providers"]
    assert any(p["type"] == "file" and p["options"]["path"] == "/var/lib/grafana/dashboards" for p in providers)
