"""Prometheus metrics shared by the services, named after vLLM's spec-decode counters.

Each service process owns one of GatewayMetrics, VerifyMetrics, DraftMetrics (its own registry,
what that service reports on top of the shared ServiceMetrics): draft and verify serve it on their
metrics port, the gateway on /metrics. No torch here: the gateway imports this module;
the model services add CUDA memory with specdec.model_services.device_metrics.track_cuda.

One source per metric: no two services export the same name, so a sum() without a job filter counts
each request, token and round once. The verify service alone counts tokens and rounds
(specdec_generated_tokens, specdec_spec_decode_*, specdec_round_duration_seconds by phase) and keeps
the plain base names (specdec_requests_total, specdec_e2e_request_latency_seconds,
specdec_requests_running, specdec_process_restarts). Every HTTP request is one gateway request, one
verify Generate and one draft Propose stream, so the other two name their own view of requests
(outcomes, latency, sessions in flight, restarts) with a prefix: specdec_gateway_* (its memory is the
standard process collector's) and specdec_draft_*, like the draft's own counters
(specdec_draft_proposed_tokens, its compute per block specdec_draft_block_compute_seconds).
The exception, shared on purpose: the model memory gauges, specdec_model_memory_bytes and
specdec_device_memory_total_bytes, exported by both draft and verify, each about its own process
(split by job): two processes' memory legitimately sums to what both hold on a device they share,
and the device's total is the same fact from either (take max, not sum). Likewise the batching
metrics a batching service adds (specdec.batching.metrics: specdec_batch_*, specdec_kv_cache_*)
count each process's own forward passes and KV cache, distinct things that add up. Derived in PromQL:
  acceptance rate      = rate(specdec_spec_decode_num_accepted_tokens_total[5m])
                         / rate(specdec_spec_decode_num_draft_tokens_total[5m])
  mean accepted length = 1 + rate(..._num_accepted_tokens_total[5m]) / rate(..._num_drafts_total[5m])
  tokens per target forward (the speedup bound)
                       = rate(specdec_generated_tokens_total[5m]) / rate(specdec_target_forwards_total[5m])
"""

from __future__ import annotations

import os
import resource

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector, start_http_server

from specdec.serving.ports import bare_host, describe_os_error, listen_error

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
_ROUND_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5)
_DRAFT_LENGTH_BUCKETS = (0, 1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 24, 32, 64)
# Set by `specdec up` on a service it restarted: how many times it has restarted that service so far.
RESTARTS_ENV = "SPECDEC_RESTARTS"


class ServiceMetrics:
    """What every service reports: finished requests by outcome, their latency, sessions, restarts.

    `prefix` starts every name: "specdec_" for verify, "specdec_draft_" for the draft, "specdec_gateway_"
    for the gateway, whose requests are verify's requests too (the same name on two services would count
    each one twice: the module's docstring)."""

    def __init__(self, service: str, prefix: str = "specdec_") -> None:
        self.service = service
        self.registry = registry = CollectorRegistry()
        self.requests = Counter(f"{prefix}requests", "Finished requests by outcome code", ["code"], registry=registry)
        self.e2e_latency = Histogram(
            f"{prefix}e2e_request_latency_seconds", "Request latency, end to end", registry=registry, buckets=_LATENCY_BUCKETS
        )
        self.running = Gauge(f"{prefix}requests_running", "Requests (sessions) being served", registry=registry)
        # A restart resets every counter here, so the count lives with the supervisor, which hands it over.
        self.process_restarts = Gauge(
            f"{prefix}process_restarts",
            f"Restarts of this service by `specdec up` so far (${RESTARTS_ENV}; 0 elsewhere: compose and Kubernetes count their own)",
            registry=registry,
        )
        self.process_restarts.set(_restarts_from_environment())

    def serve(self, port: int, host: str = "0.0.0.0") -> None:
        """Serve /metrics on host:port (port 0 = do not serve); a port it cannot listen on is a SpecdecError."""
        if not port:
            return
        try:
            start_http_server(port, addr=bare_host(host), registry=self.registry)
        except OSError as error:
            raise listen_error(f"{self.service} service metrics", f"{host}:{port}", describe_os_error(error)) from None


class ModelServiceMetrics(ServiceMetrics):
    """A service that holds a model (verify, draft): its memory against the device's. The memory gauges
    keep their names on both (the module's docstring); `prefix` names the rest."""

    def __init__(self, service: str, prefix: str = "specdec_") -> None:
        super().__init__(service, prefix=prefix)
        registry = self.registry
        self.model_memory = Gauge("specdec_model_memory_bytes", "Memory held by the model process", ["device", "kind"], registry=registry)
        self.device_memory_total = Gauge("specdec_device_memory_total_bytes", "Total memory of the device", ["device"], registry=registry)
        self.model_memory.labels("cpu", "rss").set_function(_rss_bytes)
        self.device_memory_total.labels("cpu").set_function(_host_memory_bytes)


class GatewayMetrics(ServiceMetrics):
    """The gateway's /metrics: HTTP outcomes, its admission queue (the autoscaler's signal), the time to
    the first token its clients see. Tokens, rounds and fallbacks are verify's to count (the module's
    docstring); the gateway's memory is the standard process collector's (process_resident_memory_bytes)."""

    def __init__(self) -> None:
        super().__init__("gateway", prefix="specdec_gateway_")
        registry = self.registry
        self.time_to_first_token = Histogram(
            "specdec_gateway_time_to_first_token_seconds",
            "Time from the HTTP request to its first token (or whole reply), queueing included",
            registry=registry,
            buckets=_LATENCY_BUCKETS,
        )
        self.waiting = Gauge("specdec_requests_waiting", "Requests waiting for a slot", registry=registry)
        self.queue_time = Histogram(
            "specdec_request_queue_time_seconds", "Time waiting for an admission slot", registry=registry, buckets=_LATENCY_BUCKETS
        )
        ProcessCollector(registry=registry)


class VerifyMetrics(ModelServiceMetrics):
    """The verify service's: what callers of the target get (tokens, first-token time, fallbacks), every
    round (vLLM's spec-decode counters: their one source), K, the load-aware policy."""

    def __init__(self) -> None:
        super().__init__("verify")
        registry = self.registry
        self.generated_tokens = Counter("specdec_generated_tokens", "Tokens emitted to callers", registry=registry)
        self.time_to_first_token = Histogram(
            "specdec_time_to_first_token_seconds", "Time to the first token", registry=registry, buckets=_LATENCY_BUCKETS
        )
        self.num_drafts = Counter("specdec_spec_decode_num_drafts", "Verification rounds that had draft candidates", registry=registry)
        self.num_draft_tokens = Counter("specdec_spec_decode_num_draft_tokens", "Draft tokens proposed", registry=registry)
        self.num_accepted_tokens = Counter("specdec_spec_decode_num_accepted_tokens", "Draft tokens accepted", registry=registry)
        self.fallbacks = Counter("specdec_spec_decode_fallbacks", "Requests that fell back to target-only decoding", registry=registry)
        self.accepted_per_position = Counter(
            "specdec_spec_decode_num_accepted_tokens_per_pos",
            "Accepted draft tokens by position in the block",
            ["position"],
            registry=registry,
        )
        # Did a finished speculative request draft at all (policy auto may run it without drafting)?
        self.speculative_requests = Counter(
            "specdec_speculative_requests",
            "Finished speculative requests by speculation policy and whether any round drafted",
            ["policy", "drafted"],
            registry=registry,
        )
        self.target_forwards = Counter("specdec_target_forwards", "Target forward passes (rounds and target-only steps)", registry=registry)
        self.inter_token_latency = Histogram(
            "specdec_inter_token_latency_seconds", "Time between emitted tokens", registry=registry, buckets=_ROUND_BUCKETS
        )
        self.round_duration = _round_duration(registry)
        self.chosen_k = Histogram(
            "specdec_spec_decode_chosen_k",
            "Draft tokens asked for per round (K; adaptive K chooses it)",
            registry=registry,
            buckets=_DRAFT_LENGTH_BUCKETS,
        )
        # Per drafter (draft, lookup, suffix, prediction): which one pays, and how big its blocks (trees) are.
        self.drafter_draft_tokens = Counter(
            "specdec_drafter_draft_tokens", "Candidates proposed, by the drafter that proposed them", ["drafter"], registry=registry
        )
        self.drafter_accepted_tokens = Counter(
            "specdec_drafter_accepted_tokens", "Candidates accepted, by the drafter that proposed them", ["drafter"], registry=registry
        )
        self.drafter_block_size = Histogram(
            "specdec_drafter_block_size",
            "Candidates per verified block (a tree's nodes), by drafter; its count is the drafter's rounds",
            ["drafter"],
            registry=registry,
            buckets=_DRAFT_LENGTH_BUCKETS,
        )
        self.load_policy_drafting = Gauge(
            "specdec_load_policy_drafting",
            "1 while the load-aware policy lets sessions of a kind (greedy, sampled) draft, 0 while it runs plain target steps",
            ["requests"],
            registry=registry,
        )

    def record_round(self, num_candidates: int, num_accepted: int, drafter: str | None = None) -> None:
        self.target_forwards.inc()
        if drafter is not None:
            self.drafter_draft_tokens.labels(drafter).inc(num_candidates)
            self.drafter_accepted_tokens.labels(drafter).inc(num_accepted)
            self.drafter_block_size.labels(drafter).observe(num_candidates)
        if num_candidates:
            self.num_drafts.inc()
            self.num_draft_tokens.inc(num_candidates)
            self.num_accepted_tokens.inc(num_accepted)
            for position in range(num_accepted):
                self.accepted_per_position.labels(str(position)).inc()


class DraftMetrics(ModelServiceMetrics):
    """The draft service's: its blocks, their compute time, and overlap's drafting ahead. Its requests
    (Propose streams) are specdec_draft_requests_total and the like: each is a verify request too."""

    def __init__(self) -> None:
        super().__init__("draft", prefix="specdec_draft_")
        registry = self.registry
        # not specdec_spec_decode_num_draft_tokens: verify counts the candidates it verifies under that name
        self.proposed_tokens = Counter(
            "specdec_draft_proposed_tokens", "Draft tokens proposed in the blocks this service returned", registry=registry
        )
        # not specdec_round_duration_seconds{phase="draft"}: verify times that phase of every round itself
        self.block_compute = Histogram(
            "specdec_draft_block_compute_seconds",
            "Draft compute per block this service returned (verify's rounds time it as phase=draft)",
            registry=registry,
            buckets=_ROUND_BUCKETS,
        )
        self.predrafted_blocks = Counter(
            "specdec_draft_predrafted_blocks",
            "Blocks drafted ahead, by outcome: used (the guess held) or discarded",
            ["outcome"],
            registry=registry,
        )
        self.predraft_saved = Counter(
            "specdec_draft_predraft_saved_seconds", "Draft compute taken off the critical path by drafting ahead", registry=registry
        )


def _round_duration(registry: CollectorRegistry) -> Histogram:
    return Histogram(
        "specdec_round_duration_seconds",
        "Verification round time by phase (draft, target, transport)",
        ["phase"],
        registry=registry,
        buckets=_ROUND_BUCKETS,
    )


def _restarts_from_environment() -> int:
    try:
        return max(0, int(os.environ.get(RESTARTS_ENV, "0")))
    except ValueError:
        return 0


def _rss_bytes() -> float:
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _host_memory_bytes() -> float:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
