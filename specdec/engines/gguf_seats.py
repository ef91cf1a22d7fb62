"""A session's place in a llama.cpp context: its sequence id and KV cells (Seat), and which id it gets (LowestFirst)."""

from __future__ import annotations

import heapq
import threading

from specdec.batching.kv_store import KVBudget
from specdec.errors import DraftUnavailableError


class Seat:
    """One session's place in the context: a sequence id and its reserved KV cells."""

    def __init__(
        self, seq_id: int, budget: KVBudget, capacity: int, failure: type[Exception] = DraftUnavailableError, limit: int | None = None
    ) -> None:
        self.seq_id = seq_id
        self.budget = budget
        self.capacity = capacity
        self.failure = failure
        self.limit = limit  # the cells of its own (per_session_kv), else None: it grows within the shared pool
        self.length = 0  # positions llama.cpp holds for this sequence
        self.long = bytearray()  # per position: 1 where a pass of MANY_TOKENS or more computed it (with a prompt cache)
        self.released = False

    def ensure_capacity(self, tokens: int) -> None:
        if tokens <= self.capacity:
            return
        if self.limit is not None:  # its cells were all taken at the start
            raise self.failure(f"a session holds at most {self.limit} KV cells of its own; raise model.target_context_tokens")
        grown = max(tokens, 2 * self.capacity)
        if not self.budget.try_grow(grown - self.capacity):
            # A draft cannot go on, but the generation can: verify continues with the target alone.
            raise self.failure(
                f"the gguf model's KV cache is full ({self.budget.used_tokens} of {self.budget.capacity_tokens} "
                f"cells in use); raise model.gguf_context_tokens"
            )
        self.capacity = grown

    def mark(self, position: int, long: bool) -> None:
        if position >= len(self.long):
            self.long.extend(bytes(position + 1 - len(self.long)))
        self.long[position] = long


class LowestFirst:
    """Free sequence ids, the lowest taken first: sessions then hold ids in a run, which llama.cpp decodes as one
    pass with a stream per session only where the ids are consecutive (gguf_passes.plan_passes)."""

    def __init__(self, ids) -> None:
        self._free = list(ids)
        heapq.heapify(self._free)
        self._changed = threading.Condition()

    def take(self, timeout_s: float | None) -> int:
        with self._changed:
            if not self._changed.wait_for(lambda: self._free, timeout_s):
                raise TimeoutError
            return heapq.heappop(self._free)

    def give(self, seq_id: int) -> None:
        with self._changed:
            heapq.heappush(self._free, seq_id)
            self._changed.notify()
