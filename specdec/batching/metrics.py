"""Prometheus metrics of a service's batching: pass sizes and the KV cache budget."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from specdec.batching.kv_store import KVBudget
from specdec.batching.packed_forward import PackedRow

_BATCH_BUCKETS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
_TOKEN_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)


class BatchMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.batch_size = Histogram("specdec_batch_size", "Sessions sharing one forward pass", registry=registry, buckets=_BATCH_BUCKETS)
        self.batch_tokens = Histogram("specdec_batch_tokens", "Tokens fed in one forward pass", registry=registry, buckets=_TOKEN_BUCKETS)
        self.kv_tokens = Gauge(
            "specdec_kv_cache_tokens",
            "KV cache tokens reserved by sessions (used) and left in the budget (free)",
            ["state"],
            registry=registry,
        )
        self.kv_bytes = Gauge(
            "specdec_kv_cache_bytes",
            "KV cache memory reserved by sessions (used) and left in the budget (free)",
            ["state"],
            registry=registry,
        )
        self.kv_sessions = Gauge("specdec_kv_cache_sessions", "Sessions holding a KV cache", registry=registry)
        # vLLM's names: prompt tokens looked up in the prompt cache, and those whose KV it held (no prefill for them)
        self.prefix_cache_queries = Counter(
            "specdec_prefix_cache_queries", "Prompt tokens looked up in the prompt cache", registry=registry
        )
        self.prefix_cache_hits = Counter("specdec_prefix_cache_hits", "Prompt tokens whose KV the prompt cache held", registry=registry)
        self.budget: KVBudget | None = None  # known from the first pass; read at scrape time
        self.kv_tokens.labels("used").set_function(lambda: self._read("used_tokens"))
        self.kv_tokens.labels("free").set_function(lambda: self._read("free_tokens"))
        self.kv_bytes.labels("used").set_function(lambda: self._read("used_tokens", bytes_per_token=True))
        self.kv_bytes.labels("free").set_function(lambda: self._read("free_tokens", bytes_per_token=True))
        self.kv_sessions.set_function(lambda: self._read("sessions"))

    def observe(self, rows: list[PackedRow]) -> None:
        self.budget = rows[0].kv.budget
        self.batch_size.observe(len(rows))
        self.batch_tokens.observe(sum(len(row.input_ids) for row in rows))

    def observe_prompt(self, prompt_tokens: int, cached_tokens: int) -> None:
        self.prefix_cache_queries.inc(prompt_tokens)
        self.prefix_cache_hits.inc(cached_tokens)

    def _read(self, name: str, bytes_per_token: bool = False) -> float:
        budget = self.budget
        if budget is None:
            return 0.0
        value = getattr(budget, name)
        if value is None:  # unbounded budget: no "free" figure
            return float("nan")
        return float(value * budget.bytes_per_token if bytes_per_token else value)
