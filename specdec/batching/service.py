"""A service's batching options, from its config section, with metrics in its registry."""

from __future__ import annotations

from typing import Protocol

from prometheus_client import CollectorRegistry

from specdec.batching.metrics import BatchMetrics
from specdec.batching.runner import BatchingOptions


class BatchingSettings(Protocol):
    """What a service's config section says about batching (specdec.serving.config's _BatchingSection;
    read structurally, so the core does not import the configuration above it)."""

    max_batch_size: int | None
    batch_wait_ms: float
    kv_cache_bytes: int | None
    kv_cache_fraction: float
    admission_timeout_s: float


def service_batching(section: BatchingSettings, default_max_batch_size: int, registry: CollectorRegistry) -> BatchingOptions:
    """`section`'s settings; `default_max_batch_size` (serving.max_batch_size) where it sets no max_batch_size."""
    metrics = BatchMetrics(registry)
    return BatchingOptions(
        max_batch_size=section.max_batch_size or default_max_batch_size,
        max_wait_s=section.batch_wait_ms / 1000,
        kv_cache_bytes=section.kv_cache_bytes,
        kv_cache_fraction=section.kv_cache_fraction,
        admission_timeout_s=section.admission_timeout_s,
        on_batch=metrics.observe,
        on_prompt=metrics.observe_prompt,
    )
