"""Continuous batching: sessions of one model share forward passes.

`kv_store` holds each session's KV cache in preallocated tensors under a memory budget,
`packed_forward` runs the rows of many sessions (each with its own length, new tokens and
rollback point) as one packed pass, `scheduler` gathers the rows that sessions submit, and
`runner` gives every session the same `advance(sequence)` interface a lone cache has.
"""

from specdec.batching.kv_store import KVBudget, SessionKV
from specdec.batching.runner import BatchedRunner, BatchingOptions, SequenceRunner, SerialRunner, default_runner

__all__ = ["BatchedRunner", "BatchingOptions", "KVBudget", "SequenceRunner", "SerialRunner", "SessionKV", "default_runner"]
