"""A service's batching options, from its config section, with metrics in its registry."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from specdec.batching.metrics import BatchMetrics
from specdec.batching.runner import BatchingOptions
from specdec.serving.config import SpecdecConfig


def service_batching(config: SpecdecConfig, service: str, registry: CollectorRegistry) -> BatchingOptions:
    """`service` is "draft" or "verify": its section's settings, serving.max_batch_size by default."""
    section = config.draft_service if service == "draft" else config.verify_service
    metrics = BatchMetrics(registry)
    return BatchingOptions(
        max_batch_size=section.max_batch_size or config.serving.max_batch_size,
        max_wait_s=section.batch_wait_ms / 1000,
        kv_cache_bytes=section.kv_cache_bytes,
        kv_cache_fraction=section.kv_cache_fraction,
        admission_timeout_s=section.admission_timeout_s,
        on_batch=metrics.observe,
    )
