"""Where a model's sequences get their caches and passes: batched when the architecture allows."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Protocol

import torch
from transformers import PreTrainedModel

from specdec.batching.kv_store import KVBudget, KVShape, SessionKV, available_memory_bytes
from specdec.batching.packed_forward import ModelParts, PackedRow, model_parts, packed_forward
from specdec.batching.scheduler import BatchScheduler
from specdec.kv_cache import CachedSequence, PrefixCache

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BatchingOptions:
    """How a service batches one model's sessions (from its config section)."""

    max_batch_size: int = 1
    max_wait_s: float = 0.05
    kv_cache_bytes: int | None = None  # the budget; None: kv_cache_fraction of the memory free after loading
    kv_cache_fraction: float | None = None  # None with kv_cache_bytes None: unbounded (in-process use)
    admission_timeout_s: float | None = None  # longest wait for cache room; None: forever
    on_batch: Callable[[list[PackedRow]], None] | None = None  # metrics
    on_prompt: Callable[[int, int], None] | None = None  # metrics: a prompt's tokens, and how many a prompt cache held

    def capacity_tokens(self, shape: KVShape) -> int | None:
        if self.kv_cache_bytes is not None:
            return self.kv_cache_bytes // shape.bytes_per_token
        if self.kv_cache_fraction is not None:
            return int(available_memory_bytes(shape.device) * self.kv_cache_fraction) // shape.bytes_per_token
        return None


class SequenceRunner(Protocol):
    def open_sequence(self, reserve_tokens: int, timeout_s: float | None = None) -> PrefixCache:
        """A cache for one session, with room for `reserve_tokens` (waits up to `timeout_s` for it)."""


class SerialRunner:
    """One Hugging Face cache per session, one session per pass (architectures the packed pass lacks)."""

    batched = False

    def __init__(self, model: PreTrainedModel) -> None:
        self.model = model

    def open_sequence(self, reserve_tokens: int, timeout_s: float | None = None) -> CachedSequence:
        return CachedSequence(self.model)


class BatchedRunner:
    """Sessions in preallocated caches under one budget; their passes shared by a scheduler."""

    batched = True

    def __init__(self, parts: ModelParts, options: BatchingOptions | None = None) -> None:
        options = options or BatchingOptions()
        self.parts = parts
        self.options = options
        self.budget = KVBudget(options.capacity_tokens(parts.kv_shape), parts.kv_shape.bytes_per_token)
        self.scheduler = BatchScheduler(partial(packed_forward, parts), options.max_batch_size, options.max_wait_s, options.on_batch)

    def open_sequence(self, reserve_tokens: int, timeout_s: float | None = None) -> BatchedSequence:
        timeout_s = self.options.admission_timeout_s if timeout_s is None else timeout_s
        kv = SessionKV(self.parts.kv_shape, self.budget, max(1, reserve_tokens), timeout_s)
        return BatchedSequence(kv, self.scheduler)

    def close(self) -> None:
        self.scheduler.close()


class BatchedSequence(PrefixCache):
    def __init__(self, kv: SessionKV, scheduler: BatchScheduler) -> None:
        super().__init__()
        self.kv = kv
        self.scheduler = scheduler
        scheduler.join()

    @property
    def device(self) -> torch.device:
        return self.kv.shape.device

    def _drop(self, num_tokens: int) -> None:
        self.kv.length -= num_tokens  # the stale entries are overwritten by the next pass

    def _feed(self, new_ids: list[int], start: int, num_logits: int) -> torch.Tensor:
        self.kv.ensure_capacity(start + len(new_ids))
        return self.scheduler.submit(PackedRow(self.kv, new_ids, start, num_logits))

    def _feed_tree(self, new_ids: list[int], start: int, num_logits: int, tree_parents: list[int]) -> torch.Tensor:
        self.kv.ensure_capacity(start + len(new_ids))
        return self.scheduler.submit(PackedRow(self.kv, new_ids, start, num_logits, tree_parents))

    def _compact(self, slots: list[int], start: int) -> None:
        self.kv.compact(slots, start)

    def release(self) -> None:
        if not self.kv.released:
            self.kv.release()
            self.scheduler.leave()
        self.cached_ids = []


def default_runner(model: PreTrainedModel, options: BatchingOptions | None = None) -> SequenceRunner:
    """The packed, batchable runner where the architecture allows; a Hugging Face cache otherwise."""
    parts = model_parts(model)
    if parts is None:
        if options is not None and options.max_batch_size > 1:
            log.warning("%s: the packed pass does not support this architecture; its sessions run one at a time", model.config.model_type)
        return SerialRunner(model)
    return BatchedRunner(parts, options)
