"""Gateway metrics, in the app's own Prometheus registry (served at /metrics)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram


class GatewayMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("specdec_gateway_requests", "HTTP requests by route and status", ["route", "status"], registry=self.registry)
        self.queue_seconds = Histogram("specdec_gateway_queue_seconds", "Time requests waited for an admission slot", registry=self.registry,
                                       buckets=(0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30))
        self.completion_tokens = Counter("specdec_gateway_completion_tokens", "Completion tokens returned", ["route"], registry=self.registry)
        self.draft_tokens = Counter("specdec_gateway_draft_tokens", "Draft tokens proposed for gateway requests", registry=self.registry)
        self.accepted_tokens = Counter("specdec_gateway_accepted_tokens", "Draft tokens accepted for gateway requests", registry=self.registry)

    def record_completion(self, route: str, body: dict) -> None:
        self.completion_tokens.labels(route).inc(body["usage"]["completion_tokens"])
        self.draft_tokens.inc(body["speculative"]["draft_tokens"])
        self.accepted_tokens.inc(body["speculative"]["accepted_tokens"])
