"""Admission control: bounded generations running, a bounded queue with a timeout, per-key rates."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import time
from collections.abc import AsyncIterator

from gateway.errors import overloaded


class Admission:
    """`max_running` generations at once, counted as verify counts its sessions: a request for n
    choices takes n. Up to `max_queue` requests wait, first come first served, at most
    `queue_timeout_s` each; beyond that, 429."""

    def __init__(self, max_running: int, max_queue: int, queue_timeout_s: float) -> None:
        self.max_running, self.max_queue, self.queue_timeout_s = max_running, max_queue, queue_timeout_s
        self.generations = 0  # running, n per request
        self.running = 0  # requests
        self.queue: collections.deque[tuple[int, asyncio.Future]] = collections.deque()

    @property
    def waiting(self) -> int:
        return len(self.queue)

    @contextlib.asynccontextmanager
    async def slot(self, generations: int = 1) -> AsyncIterator[float]:
        """Hold room for `generations` for the body of the `async with`; yields the seconds spent queued."""
        started = time.perf_counter()
        weight = min(generations, self.max_running)  # NOTE: a request wider than everything takes everything
        await self._enter(weight)
        self.running += 1
        try:
            yield time.perf_counter() - started
        finally:
            self.running -= 1
            self.generations -= weight
            self._admit_waiting()

    async def _enter(self, weight: int) -> None:
        # NOTE: counted here, in one step, so requests arriving in the same event-loop turn all see each other.
        if not self.queue and self.generations + weight <= self.max_running:
            self.generations += weight
            return
        if len(self.queue) >= self.max_queue:
            raise overloaded(f"server busy: {self.running} running and {self.waiting} queued", retry_after_s=1)
        entry = (weight, asyncio.get_running_loop().create_future())
        self.queue.append(entry)
        try:
            await asyncio.wait_for(asyncio.shield(entry[1]), timeout=self.queue_timeout_s)
        except asyncio.TimeoutError as error:
            self._leave(entry)
            raise overloaded(f"no slot freed within {self.queue_timeout_s:g}s", retry_after_s=self.queue_timeout_s / 2) from error
        except BaseException:
            self._leave(entry)
            raise

    def _leave(self, entry: tuple[int, asyncio.Future]) -> None:
        """A waiter gives up (timeout, client gone): out of the queue, or its room back if it was admitted meanwhile."""
        weight, admitted = entry
        if admitted.done():
            self.generations -= weight
        else:
            admitted.cancel()
            self.queue.remove(entry)
        self._admit_waiting()

    def _admit_waiting(self) -> None:
        while self.queue and self.generations + self.queue[0][0] <= self.max_running:
            weight, admitted = self.queue.popleft()
            self.generations += weight
            admitted.set_result(None)


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
