"""Admission control: a bounded number running, a bounded queue with a timeout, per-key rates."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import time
from collections.abc import AsyncIterator

from gateway.errors import overloaded


class Admission:
    """`max_running` requests at once; up to `max_queue` wait at most `queue_timeout_s` for a slot."""

    def __init__(self, max_running: int, max_queue: int, queue_timeout_s: float) -> None:
        self.slots = asyncio.Semaphore(max_running)
        self.max_running, self.max_queue, self.queue_timeout_s = max_running, max_queue, queue_timeout_s
        self.waiting = 0
        self.running = 0

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[float]:
        """Hold a slot for the body of the `async with`; yields the seconds spent queued."""
        started = time.perf_counter()
        # NOTE: counted, not read off the semaphore: requests arriving in one event-loop turn have
        # not tried to acquire yet, so the semaphore still looks free to all of them.
        if self.running + self.waiting >= self.max_running + self.max_queue:
            raise overloaded(f"server busy: {self.running} running and {self.waiting} queued", retry_after_s=1)
        self.waiting += 1
        try:
            await asyncio.wait_for(self.slots.acquire(), timeout=self.queue_timeout_s)
        except asyncio.TimeoutError as error:
            raise overloaded(f"no slot freed within {self.queue_timeout_s:g}s", retry_after_s=self.queue_timeout_s / 2) from error
        finally:
            self.waiting -= 1
        self.running += 1
        try:
            yield time.perf_counter() - started
        finally:
            self.running -= 1
            self.slots.release()


class RateLimiter:
    """Per-key sliding one-minute windows of requests and of completion tokens."""

    WINDOW_S = 60.0

    def __init__(self, requests_per_minute: int | None, tokens_per_minute: int | None) -> None:
        self.rpm, self.tpm = requests_per_minute, tokens_per_minute
        self.requests: dict[str, collections.deque[float]] = collections.defaultdict(collections.deque)
        self.tokens: dict[str, collections.deque[tuple[float, int]]] = collections.defaultdict(collections.deque)

    def check(self, key: str) -> None:
        """Count one request for `key`, or raise 429 with the seconds until the window frees up."""
        now = time.monotonic()
        if self.tpm is not None:
            used = _trim(self.tokens[key], now - self.WINDOW_S, timed_pairs=True)
            if sum(count for _, count in used) >= self.tpm:
                raise overloaded(f"rate limit: {self.tpm} tokens per minute", retry_after_s=used[0][0] + self.WINDOW_S - now)
        if self.rpm is not None:
            window = _trim(self.requests[key], now - self.WINDOW_S)
            if len(window) >= self.rpm:
                raise overloaded(f"rate limit: {self.rpm} requests per minute", retry_after_s=window[0] + self.WINDOW_S - now)
            window.append(now)

    def record_tokens(self, key: str, count: int) -> None:
        if self.tpm is not None and count:
            self.tokens[key].append((time.monotonic(), count))


def _trim(window: collections.deque, horizon: float, timed_pairs: bool = False) -> collections.deque:
    while window and (window[0][0] if timed_pairs else window[0]) < horizon:
        window.popleft()
    return window
