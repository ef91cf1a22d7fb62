"""Per-session KV caches in preallocated tensors, under one memory budget per model.

A session reserves its tokens when it opens (the verify side reserves prompt + max_tokens, so a
running generation can never run out of cache), and its tensors are allocated once at that
size: no step copies a whole cache. Rollback is setting a length. Sessions whose size is not
known in advance (the draft side) grow by doubling, each growth checked against the budget.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass

import torch

from specdec.errors import CapacityError, InvalidRequestError


@dataclass(frozen=True)
class KVShape:
    """What one cached token costs in one model: its layers, KV heads and head size."""

    num_layers: int
    num_kv_heads: int
    head_dim: int
    dtype: torch.dtype
    device: torch.device

    @property
    def bytes_per_token(self) -> int:
        element = torch.tensor([], dtype=self.dtype).element_size()
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * element


class KVBudget:
    """Tokens of KV cache the sessions of one model may hold together.

    `reserve` waits (up to a timeout) for tokens to be freed rather than letting the device run
    out of memory; a request that could never fit is refused at once.
    """

    def __init__(self, capacity_tokens: int | None, bytes_per_token: int) -> None:
        self.capacity_tokens = capacity_tokens  # None: unbounded (in-process use)
        self.bytes_per_token = bytes_per_token
        self.used_tokens = 0
        self.sessions = 0
        self._freed = threading.Condition()

    @property
    def free_tokens(self) -> int | None:
        return None if self.capacity_tokens is None else self.capacity_tokens - self.used_tokens

    def reserve(self, tokens: int, timeout_s: float | None, what: str = "max_tokens") -> None:
        """Take `tokens` for a new session, waiting up to `timeout_s` for room."""
        if self.capacity_tokens is not None and tokens > self.capacity_tokens:
            raise InvalidRequestError(
                what,
                f"this request needs {tokens} tokens of KV cache but the whole cache budget holds "
                f"{self.capacity_tokens}; ask for fewer tokens, or raise kv_cache_bytes / kv_cache_fraction",
            )
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._freed:
            while not self._fits(tokens):
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise CapacityError(
                        f"the KV cache is full ({self.used_tokens} of {self.capacity_tokens} tokens held by "
                        f"{self.sessions} sessions) and no room freed within {timeout_s:.1f} s; retry later"
                    )
                self._freed.wait(remaining)
            self.used_tokens += tokens
            self.sessions += 1

    def try_grow(self, tokens: int) -> bool:
        """Take `tokens` more for a running session, without waiting."""
        with self._freed:
            if not self._fits(tokens):
                return False
            self.used_tokens += tokens
            return True

    def release(self, tokens: int) -> None:
        with self._freed:
            self.used_tokens -= tokens
            self.sessions -= 1
            self._freed.notify_all()

    def _fits(self, tokens: int) -> bool:
        return self.capacity_tokens is None or self.used_tokens + tokens <= self.capacity_tokens


class SessionKV:
    """One session's keys and values for every layer, `[kv_heads, capacity, head_dim]` each.

    NOTE: positions >= `length` hold stale values from rolled-back tokens; they are never read,
    because attention only ever sees `[:, :start + new]` and writes start at `length` or before.
    """

    def __init__(self, shape: KVShape, budget: KVBudget, capacity: int, timeout_s: float | None = None) -> None:
        budget.reserve(capacity, timeout_s)
        self.shape = shape
        self.budget = budget
        self.capacity = capacity
        self.length = 0
        self.keys = [self._empty(capacity) for _ in range(shape.num_layers)]
        self.values = [self._empty(capacity) for _ in range(shape.num_layers)]
        self.released = False

    def _empty(self, capacity: int) -> torch.Tensor:
        shape = self.shape
        return torch.empty(shape.num_kv_heads, capacity, shape.head_dim, dtype=shape.dtype, device=shape.device)

    def ensure_capacity(self, tokens: int) -> None:
        """Grow (doubling, within the budget) so that `tokens` positions fit."""
        if tokens <= self.capacity:
            return
        capacity = max(tokens, 2 * self.capacity)
        if not self.budget.try_grow(capacity - self.capacity):
            raise CapacityError(
                f"the KV cache budget has no room to grow this session to {tokens} tokens "
                f"({self.budget.used_tokens} of {self.budget.capacity_tokens} in use)"
            )
        for cache in (self.keys, self.values):
            for layer, old in enumerate(cache):
                cache[layer] = self._empty(capacity)
                cache[layer][:, : self.length] = old[:, : self.length]
        self.capacity = capacity

    def write(self, layer: int, start: int, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store `keys`/`values` `[kv_heads, n, head_dim]` at `start`; return views of `[:, :start + n]`."""
        end = start + keys.shape[1]
        self.keys[layer][:, start:end] = keys
        self.values[layer][:, start:end] = values
        return self.keys[layer][:, :end], self.values[layer][:, :end]

    def compact(self, slots: list[int], start: int) -> None:
        """Move the entries at `slots` (ascending, each >= start) to `start`, `start + 1`, ...; drop the rest.

        How a token tree's accepted path becomes a plain sequence: a copy of a few entries per layer.
        """
        index = torch.tensor(slots, dtype=torch.long, device=self.shape.device)
        for cache in (self.keys, self.values):
            for layer_cache in cache:
                # NOTE: index_select copies before the write, so overlapping source and target are safe.
                layer_cache[:, start : start + len(slots)] = layer_cache.index_select(1, index)
        self.length = start + len(slots)

    def release(self) -> None:
        if not self.released:
            self.released = True
            self.budget.release(self.capacity)
            self.keys, self.values = [], []


def available_memory_bytes(device: torch.device) -> int:
    """Memory free for caches on `device` now (after the weights are loaded)."""
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return free
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            fields = dict(line.split(":", 1) for line in meminfo)
        return int(fields["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
